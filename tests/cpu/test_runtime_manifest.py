"""dglu.manifest: reading artifact directories, refusing bad ones, the search order."""

from __future__ import annotations

import copy
from pathlib import Path

import dglu
import pytest
from conftest_runtime import (
    DEFAULT_KEYS,
    variant_key,
    variant_name,
    write_artifacts,
    write_manifest,
)
from dglu.contract.keys import KEY_FIELD_DEFAULTS
from dglu.contract.expressions import parse_expr
from dglu.errors import ManifestError
from dglu.manifest import (
    PACKAGE_ORIGIN,
    SearchEntry,
    load_manifests,
    merged_variants,
    read_manifest,
    search_path,
)


def test_reads_every_field_of_a_good_manifest(tmp_path: Path) -> None:
    written = write_artifacts(tmp_path, DEFAULT_KEYS)
    manifest = read_manifest(tmp_path)

    assert manifest.path == tmp_path / "manifest.json"
    assert [v.name for v in manifest.variants] == [v["name"] for v in written["variants"]]
    for variant, entry in zip(manifest.variants, written["variants"], strict=True):
        # a key without the newer fields (written before them) reads as their defaults
        assert variant.key.as_dict() == {**KEY_FIELD_DEFAULTS, **entry["key"]} and variant.family == entry["family"]
        assert variant.cubin_path == tmp_path / entry["cubin"]
        assert (variant.sha256, variant.size) == (entry["sha256"], entry["size"])
        assert variant.build.dglu_version == entry["build"]["dglu_version"]
        assert variant.build.source_hash == entry["build"]["source_hash"]
        assert dict(variant.build.toolchain) == entry["build"]["toolchain"]
        assert (variant.min_driver, variant.m_aligned) == (entry["min_driver"], entry["m_aligned"])
        assert list(variant.arguments) == list(entry["arguments"])  # the check order
        for role, rule in variant.arguments.items():
            written_rule = entry["arguments"][role]
            assert rule.shape == tuple(map(parse_expr, written_rule["shape"]))
            assert rule.strides == tuple(map(parse_expr, written_rule["strides"]))
            assert (list(rule.dtypes), rule.align, rule.io) == (
                written_rule["dtypes"], written_rule["align"], written_rule["io"]
            )
            assert rule.rank_drop == written_rule.get("rank_drop", False)
        assert dict(variant.scalars) == {n: parse_expr(v) for n, v in entry["scalars"].items()}
        assert {
            s: (limit.min, limit.max, limit.multiple_of, limit.why)
            for s, limit in variant.limits.items()
        } == {
            s: (rule.get("min"), rule.get("max"), rule.get("multiple_of"), rule["why"])
            for s, rule in entry["limits"].items()
        }
        assert {
            w: (rule.dtype, rule.count, rule.align, rule.zero)
            for w, rule in variant.workspaces.items()
        } == {
            w: (rule["dtype"], parse_expr(rule["count"]), rule["align"], rule["zero"])
            for w, rule in entry["workspaces"].items()
        }
        assert [k.symbol for k in variant.kernels] == [k["symbol"] for k in entry["kernels"]]
        for kernel, kernel_entry in zip(variant.kernels, entry["kernels"], strict=True):
            assert (list(kernel.block), list(kernel.cluster)) == (
                kernel_entry["block"], kernel_entry["cluster"]
            )
            assert kernel.dynamic_smem_bytes == kernel_entry["dynamic_smem_bytes"]
            assert {n: list(v) for n, v in kernel.attributes.items()} == kernel_entry["attributes"]
            assert kernel.grid.rule == kernel_entry["grid"]["rule"]
            assert [(p.name, p.kind, p.size, p.align) for p in kernel.params] == [
                (p["name"], p["kind"], p["size"], p["align"]) for p in kernel_entry["params"]
            ]
        assert {t: list(rule.dims) for t, rule in variant.tma.items()} == {
            t: rule["dims"] for t, rule in entry["tma"].items()
        }
    main = manifest.variants[0].kernels[0]
    assert [(p.tensor, p.optional) for p in main.params if p.kind == "pointer"] == [
        ("c", False),
        ("d_row", False),
        ("dprob", False),
        ("dbias_ws", True),
        ("b_desc_ws", True),
        ("tile_counter", True),
    ]
    a_extents = next(p for p in main.params if p.kind == "i32_tuple")
    assert a_extents.values == (parse_expr("m"), parse_expr("k"))
    finish = manifest.variants[0].kernels[1]
    assert finish.grid.count.value({"l_n2": 1000}) == 1000


def test_kernel_attributes_are_read(tmp_path: Path) -> None:
    write_artifacts(tmp_path, [variant_key(cluster_m=2, tile_m=128)])
    (variant,) = read_manifest(tmp_path).variants
    main = variant.kernels[0]
    assert dict(main.attributes) == {"cluster_dimension": (2, 1, 1)} and main.cluster == (2, 1, 1)


@pytest.mark.parametrize("version", [1, 2, 4, 0, "3", True, None])
def test_refuses_another_schema_version_with_the_rebuild_command(
    tmp_path: Path, version: object
) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    manifest["schema_version"] = version
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError) as error:
        read_manifest(tmp_path)
    message = str(error.value)
    assert message.startswith(
        f"{tmp_path / 'manifest.json'}: schema_version {version!r}, but this dglu reads "
        "schema_version 3; rebuild the directory with `dglu-build compile KERNEL_SPECS.yaml -o DIR`"
    )
    assert "reinstall the dglu wheel" in message


def test_missing_schema_version_and_broken_json(tmp_path: Path) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    del manifest["schema_version"]
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError, match="manifest.json: no schema_version, but this dglu reads"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"schema_version": 3,')
    with pytest.raises(ManifestError, match="not valid JSON"):
        read_manifest(tmp_path)


def _variant(manifest: dict) -> dict:
    return manifest["variants"][0]


def _main_param(manifest: dict, name: str) -> dict:
    return next(p for p in _variant(manifest)["kernels"][0]["params"] if p["name"] == name)


# (what to break, fragments the error must contain)
BROKEN = {
    "unknown key field": (
        lambda m: _variant(m)["key"].update(colour="red"),
        ["key", "unknown field(s) ['colour']"],
    ),
    "tile_m a bool": (
        lambda m: _variant(m)["key"].update(tile_m=True),
        ["key", "field 'tile_m' must be an integer", "a boolean True"],
    ),
    "dbias a string": (
        lambda m: _variant(m)["key"].update(dbias="yes"),
        ["field 'dbias' must be a boolean", "'yes'"],
    ),
    "act_params not numbers": (
        lambda m: _variant(m)["key"].update(act_params={"geglu_alpha": "1.7"}),
        ["field 'act_params' must map names to numbers"],
    ),
    "missing key field": (
        lambda m: _variant(m)["key"].pop("scheduler"),
        ["key", "missing field 'scheduler'"],
    ),
    "cubin outside the directory": (
        lambda m: _variant(m).update(cubin="../elsewhere.cubin"),
        ["field 'cubin' must be a file name inside"],
    ),
    "sha256 not hex": (
        lambda m: _variant(m).update(sha256="XYZ"),
        ["field 'sha256' must be 64 lowercase hex digits"],
    ),
    "missing build": (
        lambda m: _variant(m).pop("build"),
        ["missing field 'build'"],
    ),
    "source_hash not hex": (
        lambda m: _variant(m)["build"].update(source_hash="abc"),
        ["build", "field 'source_hash' must be 64 lowercase hex digits, got 'abc'"],
    ),
    "toolchain version a number": (
        lambda m: _variant(m)["build"]["toolchain"].update(ptxas=12.9),
        ["build", "field 'toolchain' must map tool names to version strings"],
    ),
    "min_driver zero": (
        lambda m: _variant(m).update(min_driver=0),
        ["field 'min_driver' must be positive, got 0"],
    ),
    "m_aligned a string": (
        lambda m: _variant(m).update(m_aligned="256"),
        ["field 'm_aligned' must be an integer"],
    ),
    "no arguments": (
        lambda m: _variant(m).update(arguments={}),
        ["field 'arguments' must list at least one argument"],
    ),
    "argument shape naming an unknown scalar": (
        lambda m: _variant(m)["arguments"]["a"].update(shape=["rows", "k", 1]),
        ["arguments.a", "field 'shape' names unknown scalar(s) ['rows']"],
    ),
    "argument strides of another rank": (
        lambda m: _variant(m)["arguments"]["a"].update(strides=["k", 1]),
        ["arguments.a", "field 'strides' must have 3 entries"],
    ),
    "argument dtype unknown": (
        lambda m: _variant(m)["arguments"]["c"].update(dtypes=["fp8"]),
        ["arguments.c", "field 'dtypes' must list element types of"],
    ),
    "argument io unknown": (
        lambda m: _variant(m)["arguments"]["dprob"].update(io="inout"),
        ["arguments.dprob", "field 'io' is 'inout'", "'accumulate'"],
    ),
    "expression with a bad factor": (
        lambda m: _variant(m)["arguments"]["a"].update(strides=["k", 1, "m+k"]),
        ["arguments.a", "field 'strides' has a bad factor 'm+k'"],
    ),
    "scalar using a later one": (
        lambda m: _variant(m).update(scalars={"l_n2": "l*n2", "n2": "2*n"}),
        ["field 'scalars.l_n2' names unknown scalar(s) ['n2']"],
    ),
    "scalar redefining a base one": (
        lambda m: _variant(m).update(scalars={"m": "2*n"}),
        ["field 'scalars' has a bad or repeated scalar name 'm'"],
    ),
    "limit without why": (
        lambda m: _variant(m)["limits"]["n"].pop("why"),
        ["limits.n", "missing field 'why'"],
    ),
    "limit on an unknown scalar": (
        lambda m: _variant(m)["limits"].update(rows={"min": 1, "why": "x"}),
        ["field 'limits' limits unknown scalar 'rows'"],
    ),
    "limit min above max": (
        lambda m: _variant(m)["limits"]["l"].update(min=2000),
        ["limits.l", "field 'min' 2000 exceeds max 1024"],
    ),
    "view of no argument": (
        lambda m: _variant(m).update(views={"b_expert": {
            "of": "b_ptrs", "dtype": "bf16", "shape": ["n", "k", 1],
            "strides": ["k", 1, "n*k"], "address_align_down": 16}}),
        ["views.b_expert", "field 'of' is 'b_ptrs'"],
    ),
    "workspace zero kind unknown": (
        lambda m: _variant(m)["workspaces"]["dbias_ws"].update(zero="sometimes"),
        ["workspaces.dbias_ws", "field 'zero' is 'sometimes'", "'each_call'"],
    ),
    "workspace named like an argument": (
        lambda m: _variant(m)["workspaces"].update(
            c={"dtype": "fp32", "count": 4, "align": 16, "zero": "never"}),
        ["field 'workspaces' reuses tensor names ['c']"],
    ),
    "unknown param kind": (
        lambda m: _main_param(m, "m").update(kind="u64"),
        ["kernels[0], params[10]", "field 'kind' is 'u64'", "'tensormap'"],
    ),
    "tensormap without a TMA rule": (
        lambda m: _main_param(m, "tma_a").update(tensor="c"),
        ["params[0]", "field 'tensor' is 'c'", "expected one of ['a', 'b']"],
    ),
    "pointer to an unknown tensor": (
        lambda m: _main_param(m, "c").update(tensor="weights"),
        ["params[4]", "field 'tensor' is 'weights'", "dbias_ws"],
    ),
    "unknown scalar": (
        lambda m: _main_param(m, "m").update(value="rows"),
        ["params[10]", "field 'value' names unknown scalar(s) ['rows']"],
    ),
    "optional on a scalar": (
        lambda m: _main_param(m, "m").update(optional=True),
        ["params[10]", "unknown field(s) ['optional']"],
    ),
    "unknown grid rule": (
        lambda m: _variant(m)["kernels"][0]["grid"].update(rule="spiral"),
        ["kernels[0], grid", "field 'rule' is 'spiral'", "persistent_tiles"],
    ),
    "persistent_tiles without tile_n": (
        lambda m: _variant(m)["kernels"][0]["grid"].pop("tile_n"),
        ["kernels[0], grid", "missing field 'tile_n'"],
    ),
    "persistent_tiles of zero rows": (
        lambda m: _variant(m)["kernels"][0]["grid"].update(tile_m=0),
        ["kernels[0], grid", "field 'tile_m' must be positive, got 0"],
    ),
    "elementwise count not a scalar": (
        lambda m: _variant(m)["kernels"][1]["grid"].update(count="everything"),
        ["kernels[1], grid", "field 'count' names unknown scalar(s) ['everything']"],
    ),
    "block of two numbers": (
        lambda m: _variant(m)["kernels"][0].update(block=[384, 1]),
        ["kernels[0]", "field 'block' must be 3 positive integers"],
    ),
    "unknown kernel attribute": (
        lambda m: _variant(m)["kernels"][0].update(attributes={"priority": 1}),
        ["kernels[0]", "field 'attributes' has unknown attribute 'priority'"],
    ),
    "cluster attribute unlike the cluster": (
        lambda m: _variant(m)["kernels"][0].update(attributes={"cluster_dimension": [2, 1, 1]}),
        ["kernels[0]", "cluster_dimension [2, 1, 1] differs from cluster [1, 1, 1]"],
    ),
    "TMA dims not a permutation": (
        lambda m: _variant(m)["tma"]["a"].update(dims=[0, 2]),
        ["tma.a", "field 'dims'", "[0, 2]"],
    ),
    "TMA box of the wrong length": (
        lambda m: _variant(m)["tma"]["b"].update(box=[64, 128]),
        ["tma.b", "field 'box' must be 3 integers"],
    ),
    "TMA swizzle unknown": (
        lambda m: _variant(m)["tma"]["a"].update(swizzle="96B"),
        ["tma.a", "field 'swizzle' is '96B'", "'128B'"],
    ),
    "TMA rule of no tensor": (
        lambda m: _variant(m)["tma"].update(weights=_variant(m)["tma"]["a"]),
        ["field 'tma' has a rule for 'weights', which is no argument or view"],
    ),
    "no kernels": (
        lambda m: _variant(m).update(kernels=[]),
        ["field 'kernels' must list at least one kernel"],
    ),
    "unknown variant field": (
        lambda m: _variant(m).update(notes="fast"),
        ["unknown field(s) ['notes']"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_refuses_a_malformed_entry_naming_where(tmp_path: Path, case: str) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    breaker, fragments = BROKEN[case]
    broken = copy.deepcopy(manifest)
    breaker(broken)
    write_manifest(tmp_path, broken)
    with pytest.raises(ManifestError) as error:
        read_manifest(tmp_path)
    message = str(error.value)
    name = _variant(manifest)["name"]
    assert message.startswith(f"{tmp_path / 'manifest.json'}: variants[0] ('{name}')"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_variants_sharing_entries_share_their_reading_and_each_is_checked_in_its_own(
    tmp_path: Path,
) -> None:
    """A family's variants repeat rules and kernel params: read once, yet a params list
    accepted for one variant is refused for another whose tensors it does not fit."""
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    first = _variant(manifest)
    twin = copy.deepcopy(first) | {"name": first["name"] + "_twin"}
    manifest["variants"].append(twin)
    write_manifest(tmp_path, manifest)
    one, other = read_manifest(tmp_path).variants
    assert other.name == twin["name"] and other.arguments is one.arguments
    assert other.kernels[0].params is one.kernels[0].params

    del twin["tma"]["a"]
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError) as error:
        read_manifest(tmp_path)
    assert str(error.value).startswith(
        f"{tmp_path / 'manifest.json'}: variants[1] ('{twin['name']}'), kernels[0], params["
    ), error.value
    assert "field 'tensor' is 'a'" in str(error.value)


def test_reads_a_discrete_weight_variant_as_documented(tmp_path: Path) -> None:
    """The b_descriptors kernel, the b_expert template descriptor, b_ptrs and b_desc_ws."""
    write_artifacts(tmp_path, [variant_key(weight_mode="discrete", b_major="n", dbias=False)])
    (read,) = read_manifest(tmp_path).variants
    assert [k.role for k in read.kernels] == ["b_descriptors", "main"]
    assert list(read.tma) == ["a", "b_expert"] and read.tma["b_expert"].dims == (0, 1)
    assert [(p.tensor, p.optional) for p in read.kernels[0].params if p.tensor] == [
        ("b_expert", False),
        ("b_ptrs", False),
        ("b_desc_ws", False),
    ]
    main_pointers = {p.tensor: p.optional for p in read.kernels[1].params if p.kind == "pointer"}
    assert (main_pointers["b_desc_ws"], main_pointers["tile_counter"]) == (False, True)


def test_reads_a_dynamic_scheduler_variant_as_documented(tmp_path: Path) -> None:
    """scheduler "dynamic": the main kernel requires the tile_counter workspace."""
    write_artifacts(tmp_path, [variant_key(scheduler="dynamic")])
    (read,) = read_manifest(tmp_path).variants
    main_pointers = {p.tensor: p.optional for p in read.kernels[0].params if p.kind == "pointer"}
    assert (main_pointers["b_desc_ws"], main_pointers["tile_counter"]) == (True, False)


def test_refuses_duplicate_variant_names(tmp_path: Path) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    manifest["variants"].append(copy.deepcopy(manifest["variants"][0]))
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError, match="listed more than once"):
        read_manifest(tmp_path)


def test_search_order_and_shadowing(tmp_path: Path) -> None:
    first, second, cache = tmp_path / "first", tmp_path / "second", tmp_path / "xdg"
    shared = variant_key(act_func="dgeglu", dbias=False)
    write_artifacts(first, [shared])
    write_artifacts(second, [variant_key(act_func="dswiglu", dbias=False), shared])
    write_artifacts(cache / "dglu" / "variants", [variant_key(tile_n=256)])
    env = {"DGLU_CUBIN_PATH": f"{first}:{second}", "XDG_CACHE_HOME": str(cache)}

    entries = search_path(env)
    assert [e.directory for e in entries[:3]] == [first, second, cache / "dglu" / "variants"]
    assert [e.origin for e in entries] == [
        "DGLU_CUBIN_PATH",
        "DGLU_CUBIN_PATH",
        "user variants",
        "package",
    ]
    assert entries[-1].directory.name == "_cubins" and entries[-1].directory.parent.name == "dglu"

    variants, stale = merged_variants(load_manifests(entries))
    assert stale == ()
    assert [v.name for v in variants] == [
        variant_name(shared),
        variant_name(variant_key(act_func="dswiglu", dbias=False)),
        variant_name(variant_key(tile_n=256)),
    ]
    assert variants[0].cubin_path.parent == first


def _stale_setup(tmp_path: Path, **build: str) -> tuple:
    """A package directory and a user directory holding the same variant; the user's
    built with ``build`` changed."""
    key = variant_key(act_func="dgeglu", dbias=False)
    package, user = tmp_path / "package", tmp_path / "user"
    write_artifacts(package, [key])
    manifest = write_artifacts(user, [key, variant_key(tile_n=256)])
    manifest["variants"][0]["build"].update(build)
    write_manifest(user, manifest)
    entries = [SearchEntry(user, "user variants", False), SearchEntry(package, PACKAGE_ORIGIN, False)]
    return merged_variants(load_manifests(entries)), user, package, variant_name(key)


def test_a_user_variant_of_other_kernel_sources_is_stale(tmp_path: Path) -> None:
    (variants, stale), user, package, name = _stale_setup(tmp_path, source_hash="6" * 64)
    assert [(v.name, v.directory) for v in variants] == [
        (variant_name(variant_key(tile_n=256)), user),
        (name, package),  # the package's own, not the stale one that came first
    ]
    ((variant, reason),) = stale
    assert (variant.name, variant.directory) == (name, user)
    assert reason == (
        "built from other kernel sources (source_hash 666666666666) than the package's "
        "variant of that name (555555555555)"
    )


def test_a_variant_of_another_dglu_version_is_stale(tmp_path: Path) -> None:
    (variants, stale), user, _, name = _stale_setup(tmp_path, dglu_version="0.0.1")
    assert [reason for _, reason in stale] == [
        f"built by dglu 0.0.1, this is dglu {dglu.__version__}"
    ]
    assert [v.directory for v in variants if v.name == name] == [tmp_path / "package"]


def test_the_same_source_hash_is_not_stale(tmp_path: Path) -> None:
    (variants, stale), user, _, name = _stale_setup(tmp_path)
    assert stale == ()
    assert [v.directory for v in variants if v.name == name] == [user]  # the earlier wins


def test_user_dir_defaults_to_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    entries = search_path({})
    assert entries[0].directory == tmp_path / ".cache" / "dglu" / "variants"
    assert [e.required for e in entries] == [False, False]


def test_listed_directory_without_manifest_is_an_error(tmp_path: Path) -> None:
    env = {"DGLU_CUBIN_PATH": str(tmp_path / "missing"), "XDG_CACHE_HOME": str(tmp_path)}
    with pytest.raises(
        ManifestError, match="DGLU_CUBIN_PATH lists .*missing, which has no manifest.json"
    ):
        load_manifests(search_path(env))


def test_absent_optional_directories_are_skipped(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "nothing")}
    manifests = load_manifests(search_path(env)[:1])
    assert manifests == ()


def test_reading_writes_nothing(tmp_path: Path) -> None:
    write_artifacts(tmp_path, DEFAULT_KEYS)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir())
    read_manifest(tmp_path)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in tmp_path.iterdir()) == before
