"""Deterministic mode on the CPU: the key field, spec defaults, names, the family's
declarations, the ceiling EXPRESSION, the runtime's request and build hint, and (slow) the
manifest entry of a compiled deterministic variant."""

from __future__ import annotations

import pytest
from dglu.contract.keys import KEY_FIELDS, variant_name
from dglu_build.kernels.registry import families
from dglu.contract.expressions import parse_expr
from conftest_runtime import bf16_policy
from dglu.options import check_options
from dglu.selection import VariantRequest, build_command, missing_variant_message

from dglu_build.kernels.declaration import Pointer
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import DBIAS_SLAB_ROWS, Config
from dglu_build.specs import SpecError, parse_specs

BASE = {
    "arch": "sm_90a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static",
}
FAST_NAME = "sm90a_bf16_bf16_bf16_dswiglu_dbias_dense_k_128x128_1x1_static"
SPEC = """
defaults: {arch: sm_90a, ab_dtype: bf16, c_dtype: bf16, d_dtype: bf16, weight_mode: dense, b_major: k,
           tile_m: 128, tile_n: 128, cluster_m: 1, cluster_n: 1, scheduler: static}
variants:
  - {act_func: dswiglu, dbias: true%s}
"""


def test_the_key_field_and_its_allowed_values() -> None:
    assert KEY_FIELDS["deterministic"] is bool and list(KEY_FIELDS)[-5:] == [
        "deterministic", "act_out", "discrete_col_sfd", "use_single_group_runtime_offsets", "experts"]
    assert families()["sm90_bf16"].allowed["deterministic"] == (False, True)


def test_names_of_fast_keys_are_unchanged_and_deterministic_ones_end_in_det() -> None:
    assert variant_name(BASE) == variant_name({**BASE, "deterministic": False}) == FAST_NAME
    assert variant_name({**BASE, "deterministic": True}) == FAST_NAME + "_det"


def test_specs_default_to_the_fast_path_and_take_deterministic() -> None:
    (fast,) = parse_specs(SPEC % "")
    assert fast.deterministic is False and fast.key["deterministic"] is False and fast.name == FAST_NAME
    (det,) = parse_specs(SPEC % ", deterministic: true")
    assert det.deterministic is True and det.name == FAST_NAME + "_det"
    assert len(parse_specs(SPEC % ", deterministic: [false, true]")) == 2


def test_specs_refuse_a_deterministic_that_is_no_boolean() -> None:
    with pytest.raises(SpecError, match=r"field 'deterministic': got string 'yes', needs a boolean"):
        parse_specs(SPEC % ", deterministic: yes")


@pytest.mark.parametrize("dbias", [True, False])
@pytest.mark.parametrize("scheduler", ["static", "dynamic"])
def test_deterministic_declarations_use_partial_sums_and_fixed_order_finishers(dbias, scheduler) -> None:
    config = Config.from_key({**BASE, "dbias": dbias, "scheduler": scheduler, "deterministic": True})
    entry = interface.entry(config)
    assert entry["scalars"] == {"n2": "2*n", "l_n2": "l*n2", "n_tiles": "n/128", "m_slabs": f"m/{DBIAS_SLAB_ROWS}"}
    workspaces = entry["workspaces"]
    assert workspaces["dprob_parts"] == {"dtype": "fp32", "count": "n_tiles*m", "align": 16, "zero": "never"}
    assert ("dbias_parts" in workspaces) == dbias and "dbias_ws" not in workspaces
    kernels = interface.kernels(config)
    # one finisher: with dbias it reduces dbias's slabs and dprob's rows in one launch
    assert [k.role for k in kernels] == ["main", "parts_finish" if dbias else "dprob_finish"]
    main_pointers = [p.tensor for p in kernels[0].params if isinstance(p, Pointer)]
    assert "dprob_parts" in main_pointers and "dbias_parts" in main_pointers and "dprob" not in main_pointers
    finish_pointers = [p.tensor for p in kernels[1].params if isinstance(p, Pointer)]
    if dbias:
        # 32 dbias elements a block of 256 threads: its 8 warps split each element's slabs
        assert kernels[1].grid == {"rule": "elementwise", "count": "l_n2*8"} and kernels[1].block == 256
        assert finish_pointers == ["dbias_parts", "dbias", "dprob_parts", "dprob", "padded_offsets"]
    else:
        assert kernels[1].grid == {"rule": "elementwise", "count": "m"}
        assert finish_pointers == ["dprob_parts", "dprob", "padded_offsets"]


def test_fast_declarations_are_unchanged_by_the_field() -> None:
    fast = interface.entry(Config.from_key(BASE))
    assert fast == interface.entry(Config.from_key({**BASE, "deterministic": False}))
    assert fast["scalars"] == {"n2": "2*n", "l_n2": "l*n2"} and "dbias_ws" in fast["workspaces"]


def test_expressions_divide_rounding_up() -> None:
    assert parse_expr("n/128").value({"n": 256}) == 2
    assert parse_expr("n/128").value({"n": 288}) == 3
    assert parse_expr("2*m/32").value({"m": 33}) == 3
    assert parse_expr("n/128").text() == "ceil(N/128)"
    assert parse_expr("2*n").divisor == 1
    with pytest.raises(ValueError, match="bad divisor"):
        parse_expr("n/0")


def _options(policy=None, **given):
    defaults = dict(
        acc_dtype=None, mma_tiler_mn=None, cluster_shape_mn=None, sf_vec_size=16, vector_f32=False,
        m_aligned=256, discrete_col_sfd=False, act_func="dswiglu", geglu_alpha=1.702, glu_clamp_max=7.0,
        glu_clamp_min=-7.0, linear_offset=1.0, situ_beta1=4.0, situ_beta2=25.0, b_major="k",
        epilogue_op=None, use_dynamic_sched=False,
    )
    return check_options(**{**defaults, **given}, policy=policy or bf16_policy())


def test_options_take_deterministic_as_a_bool() -> None:
    assert _options().deterministic is False
    assert _options(deterministic=True).deterministic is True
    with pytest.raises(ValueError, match=r"deterministic: expected a bool, got 1"):
        _options(deterministic=1)


def test_the_missing_variant_hint_builds_the_deterministic_variant() -> None:
    request = VariantRequest(
        arch="sm_90a", ab_dtype="bf16", c_dtype="bf16", d_dtype="bf16", act_func="dswiglu", act_params=(),
        dbias=True, weight_mode="dense", b_major="k", deterministic=True,
    )
    message = missing_variant_message(request, [])
    assert FAST_NAME + "_det" in message and "--deterministic" in message
    assert "--deterministic" not in build_command({**BASE, "deterministic": False})


@pytest.mark.slow
def test_a_compiled_deterministic_variant_declares_its_workspaces_and_finishers() -> None:
    pytest.importorskip("cutlass")
    from dglu_build.kernels import compile_variant

    key = {**BASE, "weight_mode": "discrete", "deterministic": True}
    name = variant_name(key)
    result = compile_variant(key, "dglu_" + name)
    entry = result.entry
    assert set(entry["workspaces"]) == {"dprob_parts", "dbias_parts", "b_desc_ws"}
    assert [k["role"] for k in entry["kernels"]] == ["b_descriptors", "main", "parts_finish"]
    for kernel in entry["kernels"]:
        assert kernel["symbol"].startswith(f"dglu_{name}_{kernel['role']}_")
    finish = entry["kernels"][2]
    assert [p["name"] for p in finish["params"]] == [
        "dbias_parts", "dbias", "dprob_parts", "dprob", "padded_offsets", "m", "n2", "n_tiles", "l"]
