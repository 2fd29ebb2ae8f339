"""Spec files: expansion, normalisation, names, and every kind of bad input."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from dglu.contract.keys import ACT_PARAM_DEFAULTS, JOINT_FIELDS, KEY_FIELDS
from dglu_build.kernels.registry import families

from dglu_build.specs import SpecError, load_dispatch_files, load_spec_files, load_specs, parse_specs

REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULTS = """\
defaults:
  arch: sm_90a
  ab_dtype: bf16
  c_dtype: bf16
  d_dtype: bf16
  weight_mode: dense
  b_major: k
  tile_m: 128
  tile_n: 128
  cluster_m: 1
  cluster_n: 1
  scheduler: static
"""
DEFAULTS_LINES = DEFAULTS.count("\n")
ALLOWED = families()["sm90_bf16"].allowed  # the family of DEFAULTS' arch and ab_dtype
# every family's architectures, as an error lists them
ALL_ARCHS = ", ".join(repr(a) for a in dict.fromkeys(a for f in families().values() for a in f.allowed["arch"]))
# Tile widths the default consumer builds for the default tile_m of 128 (128x256 fits
# shared memory only without the staging buffer: consumer cooperative_rf), and a tile
# other than the default.
TILE_NS = [n for m, n in ALLOWED["tile_mn"] if m == 128 and n <= 128]
OTHER_TILE = next(tile for tile in ALLOWED["tile_mn"] if tuple(tile) != (128, 128))


def spec(variants: str, defaults: str = DEFAULTS) -> str:
    """A spec file text: ``defaults`` followed by a ``variants:`` block."""
    return defaults + "variants:\n" + textwrap.indent(textwrap.dedent(variants), "  ")


def spec_error(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_specs(text, "bad.yaml")
    return str(caught.value)


# --- good specs -------------------------------------------------------------


def test_smoke_spec_has_one_variant_per_activation():
    variants = load_specs(REPO_ROOT / "kernel_specs" / "smoke.yaml")
    assert [(v.act_func, v.dbias) for v in variants] == [("dswiglu", True), ("dgeglu", False)]
    assert variants[0].name == "sm90a_bf16_bf16_bf16_dswiglu_dbias_dense_k_128x128_1x1_static"
    assert variants[1].name == "sm90a_bf16_bf16_bf16_dgeglu_nodbias_dense_k_128x128_1x1_static"


def test_default_spec_has_every_activation_with_and_without_dbias_at_128x128():
    variants = load_specs(REPO_ROOT / "kernel_specs" / "default.yaml")
    at_128x128 = {(v.act_func, v.dbias) for v in variants if (v.tile_m, v.tile_n) == (128, 128)}
    assert at_128x128 == {(act, dbias) for act in ALLOWED["act_func"] for dbias in (True, False)}


def test_default_spec_covers_the_contracts_c_and_d_dtypes_for_dswiglu_and_dgeglu():
    variants = load_specs(REPO_ROOT / "kernel_specs" / "default.yaml")
    dtypes = ALLOWED["c_dtype"]
    seeds = {(v.act_func, v.c_dtype, v.d_dtype, v.dbias) for v in variants if v.key["act_params"] == ACT_PARAM_DEFAULTS[v.act_func]}
    wanted = {(act, c, d, dbias) for act in ("dswiglu", "dgeglu") for c in dtypes for d in dtypes for dbias in (True, False)}
    assert wanted <= seeds
    for variant in variants:  # the Hopper BF16 family's (MXFP8 D is FP8; see default.yaml's comments)
        if variant.arch == "sm_90a" and variant.ab_dtype == "bf16" and "fp32" in (variant.c_dtype, variant.d_dtype):
            assert (variant.tile_m, variant.tile_n) == (128, 64), variant.name  # see default.yaml's comment


def test_lists_expand_to_the_cartesian_product_in_field_order():
    variants = parse_specs(spec(f"- {{act_func: [dswiglu, dgeglu], dbias: [true, false], tile_n: {TILE_NS}}}\n"))
    assert [(v.act_func, v.dbias, v.tile_n) for v in variants] == [
        (act, dbias, tile_n) for act in ("dswiglu", "dgeglu") for dbias in (True, False) for tile_n in TILE_NS
    ]
    assert len({v.name for v in variants}) == 4 * len(TILE_NS)


def test_entry_fields_override_defaults():
    tile_m, tile_n = OTHER_TILE
    (variant,) = parse_specs(spec(f"- {{act_func: dswiglu, dbias: false, tile_m: {tile_m}, tile_n: {tile_n}}}\n"))
    assert (variant.tile_m, variant.tile_n, variant.dbias) == (tile_m, tile_n, False)
    assert variant.name.endswith(f"_nodbias_dense_k_{tile_m}x{tile_n}_1x1_static")


def test_key_has_every_field_in_canonical_order_with_act_param_defaults():
    (variant,) = parse_specs(spec("- {act_func: dgeglu, dbias: true}\n"))
    key = variant.key
    assert list(key) == list(KEY_FIELDS)
    assert key["act_params"] == ACT_PARAM_DEFAULTS["dgeglu"]
    assert all(type(value) is float for value in key["act_params"].values())
    assert key["dbias"] is True and key["tile_m"] == 128


def test_act_params_other_than_the_defaults_get_a_stable_hash_suffix():
    text = spec(
        """\
        - {act_func: dgeglu, dbias: true}
        - {act_func: dgeglu, dbias: true, act_params: {geglu_alpha: 1, linear_offset: 0, glu_clamp_max: 10, glu_clamp_min: -10}}
        - {act_func: dgeglu, dbias: true, act_params: {glu_clamp_max: 1e1, glu_clamp_min: -1e1, geglu_alpha: 1.0, linear_offset: 0.0}}
        """
    )
    with pytest.raises(SpecError, match=r"variants\[2\] \(line \d+\): duplicate variant .*_p[0-9a-f]{8}, already given by variants\[1\]"):
        parse_specs(text)
    default, deepseek = parse_specs(text.rsplit("\n  - ", 1)[0] + "\n")
    assert not re.search(r"_p[0-9a-f]{8}$", default.name)
    assert re.fullmatch(re.escape(default.name) + r"_p[0-9a-f]{8}", deepseek.name)
    assert deepseek.key["act_params"] == {"geglu_alpha": 1.0, "glu_clamp_max": 10.0, "glu_clamp_min": -10.0, "linear_offset": 0.0}
    assert deepseek.name == parse_specs(text.rsplit("\n  - ", 1)[0] + "\n")[1].name


def test_act_params_equal_to_the_defaults_name_the_same_variant():
    text = spec("- {act_func: dgeglu, dbias: true}\n- {act_func: dgeglu, dbias: true, act_params: {geglu_alpha: 1.702}}\n")
    assert "duplicate variant" in spec_error(text)


def test_names_are_filesystem_safe():
    variants = parse_specs(spec(f"- {{act_func: [dswiglu, dgeglu], dbias: [true, false], tile_n: {TILE_NS}}}\n"))
    assert all(re.fullmatch(r"[a-z0-9_]+", v.name) for v in variants)


def test_the_family_constrains_every_field_but_act_params():
    constrained = {name for key in ALLOWED for name in JOINT_FIELDS.get(key, (key,))}
    assert constrained == set(KEY_FIELDS) - {"act_params"}


# --- bad specs: structure ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "bad.yaml: needs a mapping with keys ['defaults', 'variants', 'dispatch'], got null"),
        ("- a\n- b\n", "bad.yaml: needs a mapping with keys ['defaults', 'variants', 'dispatch'], got a list"),
        (DEFAULTS + "variant: []\n", "bad.yaml: unknown top-level key 'variant'; allowed: defaults, variants, dispatch"),
        (DEFAULTS, "bad.yaml: 'variants' needs a non-empty list of entries, got null"),
        (DEFAULTS + "variants: []\n", "bad.yaml: 'variants' needs a non-empty list of entries, got a list"),
        (DEFAULTS + "variants: {act_func: dswiglu}\n", "'variants' needs a non-empty list of entries, got a mapping"),
        ("defaults: [1]\nvariants: [{}]\n", "bad.yaml: defaults (line 1): needs a mapping of fields, got a list"),
        (spec("- dswiglu\n"), f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): needs a mapping of fields, got string 'dswiglu'"),
    ],
)
def test_bad_structure_is_named(text, expected):
    assert expected in spec_error(text)


def test_invalid_yaml_names_the_file_and_line():
    message = spec_error(spec("- {act_func: dswiglu, dbias: true\n"))
    assert message.startswith("bad.yaml: invalid YAML:")
    assert f"line {DEFAULTS_LINES + 3}" in message


def test_duplicate_yaml_keys_are_rejected():
    message = spec_error(spec("- act_func: dswiglu\n  dbias: true\n  act_func: dgeglu\n"))
    assert "found duplicate key 'act_func'" in message
    assert f"first at line {DEFAULTS_LINES + 2}" in message


def test_missing_file_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"nope\.yaml: cannot read spec file: No such file"):
        load_specs(tmp_path / "nope.yaml")


# --- bad specs: fields ---------------------------------------------------------


def test_unknown_field_lists_the_allowed_ones():
    message = spec_error(spec("- {act_func: dswiglu, dbias: true, tile_nn: 128}\n"))
    assert f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): unknown field 'tile_nn'; allowed: " in message
    assert ", ".join(KEY_FIELDS) in message


def test_unknown_field_in_defaults_is_named():
    message = spec_error(spec("- {act_func: dswiglu, dbias: true}\n", DEFAULTS + "  stages: 4\n"))
    assert "bad.yaml: defaults (line 1): unknown field 'stages'" in message


def test_missing_fields_are_listed():
    message = spec_error(spec("- {act_func: dswiglu}\n", "defaults: {arch: sm_90a}\n"))
    assert "bad.yaml: variants[0] (line 3): missing field(s) ab_dtype, c_dtype, d_dtype, dbias," in message


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{act_func: dswiglu, dbias: yes}", "field 'dbias': got string 'yes', needs a boolean (true or false)"),
        ("{act_func: dswiglu, dbias: on}", "field 'dbias': got string 'on', needs a boolean (true or false)"),
        ("{act_func: dswiglu, dbias: 1}", "field 'dbias': got integer 1, needs a boolean (true or false)"),
        ("{act_func: dswiglu, dbias: 'true'}", "field 'dbias': got string 'true', needs a boolean"),
        ("{act_func: dswiglu, dbias: true, tile_m: '128'}", "field 'tile_m': got string '128', needs an integer"),
        ("{act_func: dswiglu, dbias: true, tile_m: 128.0}", "field 'tile_m': got float 128.0, needs an integer"),
        ("{act_func: dswiglu, dbias: true, tile_m: true}", "field 'tile_m': got boolean true, needs an integer"),
        ("{act_func: dswiglu, dbias: true, tile_m: 0200}", "field 'tile_m': got string '0200', needs an integer"),
        ("{act_func: true, dbias: true}", "field 'act_func': got boolean true, needs a string (quote it if you meant a string)"),
        ("{act_func: dswiglu, dbias: true, arch: 90}", "field 'arch': got integer 90, needs a string"),
        ("{act_func: dswiglu, dbias: true, scheduler: ~}", "field 'scheduler': got null, needs a string"),
        ("{act_func: dswiglu, dbias: true, act_params: 1.702}", "field 'act_params': got float 1.702, needs a mapping"),
        ("{act_func: [dswiglu, 7], dbias: true}", "field 'act_func': got integer 7, needs a string"),
        ("{act_func: [], dbias: true}", "field 'act_func': empty list, needs at least one value"),
    ],
)
def test_wrong_types_are_named_with_what_is_needed(entry, expected):
    message = spec_error(spec(f"- {entry}\n"))
    assert message.startswith(f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): {expected}")


def test_wrong_type_in_defaults_is_named():
    message = spec_error(spec("- {act_func: dswiglu, dbias: true}\n", DEFAULTS.replace("tile_m: 128", "tile_m: big")))
    assert message == "bad.yaml: defaults (line 1): field 'tile_m': got string 'big', needs an integer"


def _allowed(table_key: str) -> str:
    def fmt(value):
        if isinstance(value, tuple):
            return "(" + ", ".join(map(str, value)) + ")"
        return repr(value) if isinstance(value, str) else str(value)

    return ", ".join(fmt(value) for value in ALLOWED[table_key])


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{act_func: dswiglu, dbias: true, arch: sm_80}", f"field 'arch': got 'sm_80', allowed: {ALL_ARCHS}"),
        ("{act_func: relu, dbias: true}", f"field 'act_func': got 'relu', allowed: {_allowed('act_func')}"),
        ("{act_func: on, dbias: true}", f"field 'act_func': got 'on', allowed: {_allowed('act_func')}"),
        ("{act_func: [dswiglu, relu], dbias: true}", "field 'act_func': got 'relu', allowed:"),
        ("{act_func: dswiglu, dbias: true, ab_dtype: fp8}", f"field 'ab_dtype': got 'fp8', allowed with arch 'sm_90a': {_allowed('ab_dtype')}"),
        ("{act_func: dswiglu, dbias: true, weight_mode: sparse}", f"field 'weight_mode': got 'sparse', allowed: {_allowed('weight_mode')}"),
        ("{act_func: dswiglu, dbias: true, tile_n: 100}", f"fields (tile_m, tile_n): got (128, 100), allowed: {_allowed('tile_mn')}"),
        ("{act_func: dswiglu, dbias: true, cluster_m: 3}", f"fields (cluster_m, cluster_n): got (3, 1), allowed: {_allowed('cluster_mn')}"),
    ],
)
def test_unsupported_values_list_the_allowed_ones(entry, expected):
    message = spec_error(spec(f"- {entry}\n"))
    assert message.startswith(f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): {expected}")


def test_errors_name_the_entry_and_its_line():
    text = spec("- {act_func: dswiglu, dbias: true}\n\n- act_func: dgeglu\n  dbias: false\n  tile_n: 100\n")
    assert f"variants[1] (line {DEFAULTS_LINES + 4}): fields (tile_m, tile_n)" in spec_error(text)


# --- bad specs: act_params and duplicates -------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{act_func: dswiglu, dbias: true, act_params: {geglu_alpha: 1.0}}", "unknown parameter 'geglu_alpha' for dswiglu; allowed: none"),
        ("{act_func: dgeglu, dbias: true, act_params: {alpha: 1.0}}", "unknown parameter 'alpha' for dgeglu; allowed: geglu_alpha, glu_clamp_max,"),
        ("{act_func: dgeglu, dbias: true, act_params: {geglu_alpha: fast}}", "geglu_alpha: got string 'fast', needs a finite number"),
        ("{act_func: dgeglu, dbias: true, act_params: {geglu_alpha: true}}", "geglu_alpha: got boolean true, needs a finite number"),
        ("{act_func: dgeglu, dbias: true, act_params: {geglu_alpha: .inf}}", "geglu_alpha: got string '.inf', needs a finite number"),
        ("{act_func: dgeglu, dbias: true, act_params: {geglu_alpha: 1e999}}", "geglu_alpha: got float inf, needs a finite number"),
        ("{act_func: dgeglu, dbias: true, act_params: {glu_clamp_min: 7}}", "glu_clamp_min (7.0) must be below glu_clamp_max (7.0)"),
    ],
)
def test_bad_act_params_are_named(entry, expected):
    message = spec_error(spec(f"- {entry}\n"))
    assert message.startswith(f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): field 'act_params': {expected}")


def test_duplicates_across_entries_name_both():
    message = spec_error(spec("- {act_func: dswiglu, dbias: true}\n- {act_func: [dgeglu, dswiglu], dbias: true}\n"))
    assert message == (
        f"bad.yaml: variants[1] (line {DEFAULTS_LINES + 3}): duplicate variant "
        f"sm90a_bf16_bf16_bf16_dswiglu_dbias_dense_k_128x128_1x1_static, "
        f"already given by variants[0] (line {DEFAULTS_LINES + 2})"
    )


def test_duplicates_within_one_entry_are_rejected():
    message = spec_error(spec("- {act_func: dswiglu, dbias: [true, true]}\n"))
    assert "duplicate variant sm90a_bf16_bf16_bf16_dswiglu_dbias_" in message
    assert message.count(f"variants[0] (line {DEFAULTS_LINES + 2})") == 2


# --- combinations the kernels cannot build (checked before anything compiles) ---


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{act_func: dswiglu, dbias: true, weight_mode: discrete, cluster_m: 2}", "2-CTA clusters are built for dense weights only"),
        ("{act_func: dswiglu, dbias: true, scheduler: dynamic, cluster_m: 2}", "use scheduler 'static' with cluster_m 2"),
        ("{act_func: dswiglu, dbias: true, b_major: n}", "b_major 'n' is for discrete weights"),
    ],
)
def test_unbuildable_combination_names_the_entry_variant_and_fix(entry, expected):
    message = spec_error(spec(f"- {entry}\n"))
    assert message.startswith(f"bad.yaml: variants[0] (line {DEFAULTS_LINES + 2}): sm90a_")
    assert expected in message


def test_buildable_modes_pass_the_check():
    variants = parse_specs(
        spec(
            "- {act_func: dswiglu, dbias: true, weight_mode: discrete, b_major: [k, n]}\n"
            "- {act_func: dswiglu, dbias: true, scheduler: dynamic}\n"
            "- {act_func: dswiglu, dbias: true, cluster_m: 2}\n"
        )
    )
    assert [(v.weight_mode, v.b_major, v.scheduler, v.cluster_m) for v in variants] == [
        ("discrete", "k", "static", 1),
        ("discrete", "n", "static", 1),
        ("dense", "k", "dynamic", 1),
        ("dense", "k", "static", 2),
    ]


# --- dispatch rules -----------------------------------------------------------

TWO_TILES = """\
- {act_func: dswiglu, dbias: true, consumer: pingpong}
- {act_func: dswiglu, dbias: true, consumer: pingpong, cluster_m: 2}
"""


def dispatch_of(tmp_path, rules: str):
    path = tmp_path / "spec.yaml"
    path.write_text(spec(TWO_TILES) + "dispatch:\n" + textwrap.indent(textwrap.dedent(rules), "  "))
    return load_dispatch_files([path], load_spec_files([path]))


def test_dispatch_rules_are_read_in_order(tmp_path):
    rules = dispatch_of(tmp_path, """\
        - {arch: sm_90a, when: {min_n: 2049}, choose: {cluster_m: 2, consumer: pingpong}}
        - {arch: sm_90a, when: {}, choose: {cluster_m: 1}, measured: bench/RESULTS.md}
    """)
    assert [dict(rule.choose) for rule in rules] == [{"cluster_m": 2, "consumer": "pingpong"}, {"cluster_m": 1}]
    assert rules[1].measured == "bench/RESULTS.md"


def test_a_dispatch_rule_must_choose_a_variant_of_the_specs(tmp_path):
    with pytest.raises(SpecError, match=r"dispatch\[0\]: chooses \{'tile_n': 256\} on sm_90a, which no variant"):
        dispatch_of(tmp_path, "- {arch: sm_90a, when: {}, choose: {tile_n: 256}}\n")


def test_a_malformed_dispatch_rule_is_named(tmp_path):
    with pytest.raises(SpecError, match=r"spec.yaml: dispatch\[0\]: when.max_n: needs a non-negative integer"):
        dispatch_of(tmp_path, "- {arch: sm_90a, when: {max_n: x}, choose: {cluster_m: 2}}\n")


def test_the_default_specs_dispatch_rules_choose_shipped_variants():
    path = REPO_ROOT / "kernel_specs" / "default.yaml"
    variants = load_spec_files([path])
    rules = load_dispatch_files([path], variants)
    assert {rule.arch for rule in rules} == {"sm_90a"} and len(rules) == 4
    # every rule chooses BF16 launch shapes (ping-pong or cooperative_rf consumers): the
    # MXFP8 calls, whose family builds neither, pass over them
    for rule in rules:
        chosen = [v for v in variants if all(v.key[field] == value for field, value in rule.choose)]
        assert chosen and {v.key["ab_dtype"] for v in chosen} == {"bf16"}, rule


def test_the_build_writes_the_rules_beside_the_manifest_and_removes_a_stale_table(tmp_path):
    from dglu.contract.dispatch import read_dispatch
    from dglu_build.build import write_dispatch

    rules = dispatch_of(tmp_path, "- {arch: sm_90a, when: {min_n: 2049}, choose: {cluster_m: 2}}\n")
    out = tmp_path / "artifacts"
    write_dispatch(out, rules)
    assert list(read_dispatch(out)) == rules
    write_dispatch(out, [])
    assert not (out / "dispatch.json").exists()
