"""The runtime reads manifests lazily: every variant's identity fields (name, family, key,
build, cubin, sha256, size) when the manifest is read, the rest of an entry only when a
call selects it, with the same refusals as a full read (dglu.contract.reader.VariantEntry)."""

from __future__ import annotations

from pathlib import Path

import pytest
import stand_ins
from conftest_runtime import DEFAULT_KEYS, variant_key, variant_name, write_artifacts, write_manifest
from dglu import api, call, manifest
from dglu.contract import reader
from dglu.errors import ManifestError

KEYS = DEFAULT_KEYS[:4]  # one tile each: the wrapper call below selects SELECTED
SELECTED = variant_key(act_func="dswiglu", dbias=True)


def _artifacts(tmp_path: Path, **corrupt_other: object) -> Path:
    """KEYS' artifacts; the fields ``corrupt_other`` replaced in every variant
    but the one SELECTED names."""
    written = write_artifacts(tmp_path, KEYS)
    for entry in written["variants"]:
        if entry["name"] != variant_name(SELECTED):
            entry.update(corrupt_other)
    write_manifest(tmp_path, written)
    return tmp_path


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """The stand-in driver, with the real search path (DGLU_CUBIN_PATH) and manifest reading."""

    def install(directory: Path) -> stand_ins.StandInDriver:
        fake = stand_ins.install(monkeypatch, (), directory)
        monkeypatch.setenv("DGLU_CUBIN_PATH", str(directory))
        monkeypatch.setenv("XDG_CACHE_HOME", str(directory / "no-cache"))
        monkeypatch.setattr(call, "installed_variants", manifest.installed_variants)
        monkeypatch.setattr(call, "search_path", manifest.search_path)
        manifest.installed_manifests.cache_clear()
        return fake

    yield install
    manifest.installed_manifests.cache_clear()


def _wrapper_call() -> None:
    api.grouped_gemm_dglu(**stand_ins.dense_call_tensors(1024, 96, 256, 4), generate_dbias=True)


def test_a_call_reads_in_full_only_the_variant_it_selects(tmp_path, installed, monkeypatch) -> None:
    installed(_artifacts(tmp_path))
    read = []
    original = reader._read_rest
    monkeypatch.setattr(reader, "_read_rest", lambda entry, *a: read.append(entry.where) or original(entry, *a))
    _wrapper_call()
    _wrapper_call()
    assert len(manifest.installed_variants()) == len(KEYS)
    assert len(read) == 1 and variant_name(SELECTED) in read[0], read


def test_bad_entries_of_variants_not_selected_do_not_stop_a_call(tmp_path, installed) -> None:
    fake = installed(_artifacts(tmp_path, kernels=[], min_driver="new"))
    _wrapper_call()
    assert fake.counts["cuLaunchKernelEx"] == 2


def test_a_selected_variant_with_a_bad_entry_is_refused_as_a_full_read_refuses_it(tmp_path, installed) -> None:
    written = write_artifacts(tmp_path, [SELECTED])
    written["variants"][0]["kernels"][0]["block"] = [128, 0, 1]
    write_manifest(tmp_path, written)
    with pytest.raises(ManifestError) as full:
        reader.read_manifest(tmp_path)
    fake = installed(tmp_path)
    with pytest.raises(ManifestError) as lazy:
        _wrapper_call()
    assert str(lazy.value) == str(full.value) and "field 'block' must be 3 positive integers" in str(full.value)
    assert fake.counts["cuLaunchKernelEx"] == 0 and fake.counts["cuModuleLoadData"] == 0
    with pytest.raises(ManifestError):  # a failed reading is not kept: refused on every use
        _wrapper_call()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sha256", "0" * 63, "field 'sha256' must be 64 lowercase hex digits"),
        ("cubin", "../x.cubin", "field 'cubin' must be a file name inside"),
        ("surprise", 1, "unknown field(s) ['surprise']"),
    ],
)
def test_identity_fields_are_checked_when_the_manifest_is_read(tmp_path, field, value, message) -> None:
    written = write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    written["variants"][1][field] = value
    write_manifest(tmp_path, written)
    with pytest.raises(ManifestError) as error:
        reader.read_manifest(tmp_path, lazy=True)
    assert message in str(error.value) and "variants[1]" in str(error.value)


def test_a_lazy_entry_reads_as_the_full_variant(tmp_path) -> None:
    write_artifacts(tmp_path, DEFAULT_KEYS)
    full = reader.read_manifest(tmp_path).variants
    lazy = reader.read_manifest(tmp_path, lazy=True).variants
    assert [reader.full_variant(entry) for entry in lazy] == list(full)
    assert all(reader.full_variant(variant) is variant for variant in full)
