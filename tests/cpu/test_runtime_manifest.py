"""dglu.manifest: reading artifact directories, refusing bad ones, the search order."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest_runtime import (
    DEFAULT_KEYS,
    variant_key,
    variant_name,
    write_artifacts,
    write_manifest,
)
from dglu.errors import ManifestError
from dglu.manifest import load_manifests, merged_variants, read_manifest, search_path


def test_reads_every_field_of_a_good_manifest(tmp_path: Path) -> None:
    written = write_artifacts(tmp_path, DEFAULT_KEYS)
    manifest = read_manifest(tmp_path)

    assert manifest.path == tmp_path / "manifest.json"
    assert dict(manifest.toolchain) == written["toolchain"]
    assert [v.name for v in manifest.variants] == [v["name"] for v in written["variants"]]
    for variant, entry in zip(manifest.variants, written["variants"], strict=True):
        assert variant.key.as_dict() == entry["key"]
        assert variant.cubin_path == tmp_path / entry["cubin"]
        assert (variant.sha256, variant.size) == (entry["sha256"], entry["size"])
        assert [k.symbol for k in variant.kernels] == [k["symbol"] for k in entry["kernels"]]
        for kernel, kernel_entry in zip(variant.kernels, entry["kernels"], strict=True):
            assert list(kernel.block) == kernel_entry["block"]
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
    assert next(p for p in main.params if p.kind == "i32_tuple").values == ("m", "k")


@pytest.mark.parametrize("version", [2, 0, "1", True, None])
def test_refuses_another_schema_version(tmp_path: Path, version: object) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    manifest["schema_version"] = version
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError) as error:
        read_manifest(tmp_path)
    message = str(error.value)
    assert str(tmp_path / "manifest.json") in message
    assert f"schema_version {version!r}" in message and "reads (1)" in message


def test_missing_schema_version_and_broken_json(tmp_path: Path) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    del manifest["schema_version"]
    write_manifest(tmp_path, manifest)
    with pytest.raises(ManifestError, match="missing field 'schema_version'"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"schema_version": 1,')
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
        ["variants[0]", "key", "unknown field(s) ['colour']"],
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
    "unknown param kind": (
        lambda m: _main_param(m, "m").update(kind="i64"),
        ["kernels[0], params[10]", "field 'kind' is 'i64'", "'tensormap'"],
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
        ["params[10]", "field 'value' is 'rows'"],
    ),
    "optional on a scalar": (
        lambda m: _main_param(m, "m").update(optional=True),
        ["params[10]", "unknown field(s) ['optional']"],
    ),
    "unknown grid rule": (
        lambda m: _variant(m)["kernels"][0]["grid"].update(rule="spiral"),
        ["kernels[0], grid", "unknown grid rule 'spiral'", "persistent_tiles"],
    ),
    "elementwise count not a scalar": (
        lambda m: _variant(m)["kernels"][1]["grid"].update(count="everything"),
        ["kernels[1], grid", "count='everything'"],
    ),
    "block of two numbers": (
        lambda m: _variant(m)["kernels"][0].update(block=[384, 1]),
        ["kernels[0]", "field 'block' must be 3 positive integers"],
    ),
    "unknown role": (
        lambda m: _variant(m)["kernels"][0].update(role="helper"),
        ["field 'role' is 'helper'", "'dbias_finish'"],
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
    assert f"{tmp_path / 'manifest.json'}: variants[0]" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


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

    variants = merged_variants(load_manifests(entries))
    assert [v.name for v in variants] == [
        variant_name(shared),
        variant_name(variant_key(act_func="dswiglu", dbias=False)),
        variant_name(variant_key(tile_n=256)),
    ]
    assert variants[0].cubin_path.parent == first


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
