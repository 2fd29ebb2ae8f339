"""The manifest index (dglu.contract.index): the runtime reads a directory's variants from
its index and parses only the entry of the variant a call uses, with the strict reader's
checks and messages; a missing index means a full parse, a stale one is never used."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from conftest_runtime import DEFAULT_KEYS, variant_key, write_artifacts, write_index, write_manifest
from dglu.contract import index, reader
from dglu.contract.reader import IDENTITY_FIELDS
from dglu.errors import ManifestError


def _identities(manifest) -> list[dict]:
    return [{field: getattr(v, field) for field in (*IDENTITY_FIELDS, "directory")} for v in manifest.variants]


@pytest.fixture
def indexed(tmp_path: Path) -> Path:
    write_artifacts(tmp_path, DEFAULT_KEYS)
    write_index(tmp_path)
    return tmp_path


def test_an_indexed_read_parses_only_the_index_and_the_entries_used(indexed, monkeypatch) -> None:
    manifest_bytes = (indexed / "manifest.json").stat().st_size
    parsed = []
    loads = json.loads
    monkeypatch.setattr(reader.json, "loads", lambda text: parsed.append(len(text)) or loads(text))
    monkeypatch.setattr(index.json, "loads", lambda text: parsed.append(len(text)) or loads(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazy = reader.read_manifest(indexed, lazy=True)
        variant = reader.full_variant(lazy.variants[2])
    assert len(parsed) == 2 and max(parsed) < manifest_bytes / 2, parsed  # the index, one entry
    full = reader.read_manifest(indexed)
    assert _identities(lazy) == _identities(full) and variant == full.variants[2]
    assert [reader.full_variant(v) for v in lazy.variants] == list(full.variants)


def test_without_an_index_the_whole_manifest_is_read_silently(tmp_path) -> None:
    write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazy = reader.read_manifest(tmp_path, lazy=True)
    assert _identities(lazy) == _identities(reader.read_manifest(tmp_path))


def test_a_stale_index_is_not_used_and_a_warning_says_how_to_rewrite_it(indexed) -> None:
    manifest = json.loads((indexed / "manifest.json").read_text())
    del manifest["variants"][0]  # the manifest changed behind the index's back
    write_manifest(indexed, manifest)
    with pytest.warns(index.StaleIndexWarning, match=r"manifest-index.json describes another manifest.json .*"
                      r"it is not used, the whole manifest is read instead; rebuild the directory \(`dglu-build "
                      r"compile KERNEL_SPECS.yaml -o DIR` writes the index anew\), or delete the index"):
        lazy = reader.read_manifest(indexed, lazy=True)
    assert [v.name for v in lazy.variants] == [v["name"] for v in manifest["variants"]]


def test_an_index_that_is_not_json_is_stale(indexed) -> None:
    (indexed / index.INDEX_FILE).write_text("{")
    with pytest.warns(index.StaleIndexWarning, match="is not an index dglu reads"):
        assert len(reader.read_manifest(indexed, lazy=True).variants) == len(DEFAULT_KEYS)


def _rewrite_index(directory: Path, change) -> None:
    """Let ``change`` edit the index's data (its ``head`` and ``records``), then write it in
    the index's layout again (the heads' character ranges made anew)."""
    path = directory / index.INDEX_FILE
    data = json.loads(path.read_text())
    change(data)
    path.write_text(index.index_layout(data["head"], data["records"]))


def _tamper_record(directory: Path, position: int, **fields) -> None:
    """Change the index's record of the manifest's variants[position] (it still matches
    the manifest's bytes)."""
    place = index.RECORD_FIELDS.index("position")

    def change(data: dict) -> None:
        (record,) = [r for group in data["records"].values() for r in group if r[place] == position]
        for field, value in fields.items():
            record[index.RECORD_FIELDS.index(field)] = value

    _rewrite_index(directory, change)


def test_a_record_that_differs_from_its_entry_is_refused_when_the_variant_is_used(indexed) -> None:
    _tamper_record(indexed, 1, size=12345)
    entry = reader.read_manifest(indexed, lazy=True).variants[1]
    assert entry.size == 12345
    with pytest.raises(ManifestError, match=r"variants\[1\] \('\w+'\): fields \['size'\] differ from .*"
                       r"manifest-index.json's record of the variant; rebuild the directory"):
        entry.variant()


@pytest.mark.parametrize("span", [{"start": 5, "end": 10**9}, {"start": "0"}, {"crc32": "00000000"}])
def test_a_record_without_its_entrys_byte_range_is_refused_when_the_variant_is_used(indexed, span) -> None:
    _tamper_record(indexed, 0, **span)
    lazy = reader.read_manifest(indexed, lazy=True)
    reader.full_variant(lazy.variants[1])  # the other records read
    with pytest.raises(ManifestError, match=r"manifest-index.json: the record of '\w+' names no byte range "
                       r"of manifest.json with its CRC-32 .*; rebuild the directory"):
        lazy.variants[0].variant()


def test_a_record_of_another_layout_is_refused_naming_the_index(indexed) -> None:
    _rewrite_index(indexed, lambda data: data["records"]["sm_90a"][1].pop())
    with pytest.raises(ManifestError, match=r"manifest-index.json: records of sm_90a\[1\]: not a record of index_format 5"):
        reader.read_manifest(indexed, lazy=True)


def test_records_that_are_not_a_json_list_are_refused_naming_the_index(indexed) -> None:
    path = indexed / index.INDEX_FILE
    text = path.read_text()
    start, end = index.read_index(indexed).architectures["sm_90a"]
    path.write_text(text[:start] + "{" + " " * (end - start - 1) + text[end:])
    with pytest.raises(ManifestError, match=r"manifest-index.json: the records of sm_90a \(characters \d+\.\.\d+\) "
                       r"are not JSON: .*, not a list; rebuild the directory"):
        reader.read_manifest(indexed, lazy=True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"index_format": 4}, "has index_format 4; this dglu reads index_format 5"),
        ({"key_fields": ["arch"]}, "lists other record or key fields"),
        ({"manifest_bytes": 1}, "describes another manifest.json (of 1 bytes; the manifest has"),
    ],
)
def test_an_index_of_another_format_key_fields_or_manifest_is_stale(indexed, change, message) -> None:
    _rewrite_index(indexed, lambda data: data["head"].update(change))
    with pytest.warns(index.StaleIndexWarning, match=re.escape(message)):
        lazy = reader.read_manifest(indexed, lazy=True)
    assert _identities(lazy) == _identities(reader.read_manifest(indexed))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sha256", "0" * 63, "field 'sha256' must be 64 lowercase hex digits"),
        ("cubin", "../x.cubin", "field 'cubin' must be a file name inside"),
    ],
)
def test_identity_fields_of_the_index_are_checked_as_the_manifests_are_when_used(tmp_path, field, value, message) -> None:
    written = write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    written["variants"][1][field] = value
    write_manifest(tmp_path, written)
    write_index(tmp_path)
    lazy = reader.read_manifest(tmp_path, lazy=True)  # records a call does not select: not checked
    reader.full_variant(lazy.variants[0])
    with pytest.raises(ManifestError) as error:
        reader.full_variant(lazy.variants[1])
    assert message in str(error.value) and "variants[1]" in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"surprise": 1}, "unknown field(s) ['surprise']"),
        ({"min_driver": "new"}, "field 'min_driver' must be an integer"),
    ],
)
def test_an_entrys_other_fields_are_checked_when_it_is_used_with_a_full_reads_message(
    tmp_path, change, message
) -> None:
    written = write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    written["variants"][1].update(change)
    write_manifest(tmp_path, written)
    with pytest.raises(ManifestError) as full:
        reader.read_manifest(tmp_path)
    write_index(tmp_path)
    lazy = reader.read_manifest(tmp_path, lazy=True)
    reader.full_variant(lazy.variants[0])  # the good one reads
    with pytest.raises(ManifestError) as used:
        reader.full_variant(lazy.variants[1])
    assert str(used.value) == str(full.value) and message in str(full.value)


def test_the_spans_cover_each_entry_of_a_non_ascii_manifest_whatever_comes_before() -> None:
    text = json.dumps({"schema_version": 3, "fronts": {"f/x": {"variants": ["]"]}}, "variants": [{"name": "é"}, {"name": "b", "x": [1, {"y": "]"}]}]},
                      indent=2, ensure_ascii=False)
    raw = text.encode()
    spans = index.entry_spans(text)
    assert [json.loads(raw[a:b]) for a, b in spans] == json.loads(text)["variants"]


def test_the_artifact_store_writes_the_index_with_the_manifest_and_verify_checks_it(tmp_path) -> None:
    import os

    from conftest_runtime import variant_entry
    from dglu_build.artifact_store import STORED_FIELDS, open_store
    from dglu_build.verify import _index_problem

    with open_store(tmp_path, print) as store:
        records = []
        for number, key in enumerate(DEFAULT_KEYS[:3]):
            entry = variant_entry(key, os.urandom(600))
            described = {f: v for f, v in entry.items() if f not in STORED_FIELDS} | {"name": f"v{number}"}
            records.append(store.put(described, os.urandom(600), None))
        store.write_manifest(records)
    found = index.read_index(tmp_path)
    assert found is not None and [r[0] for _, r in index.index_records(found)] == sorted(r.name for r in records)
    assert _index_problem(tmp_path) is None
    _tamper_record(tmp_path, 0, size=1)
    assert "manifest-index.json: does not match manifest.json" in _index_problem(tmp_path)
    with open_store(tmp_path, print) as store:
        store.write_manifest([])  # no variants: neither a manifest nor an index
    assert not (tmp_path / index.INDEX_FILE).exists() and not (tmp_path / "manifest.json").exists()


def test_a_family_may_hold_one_front_per_operand_types(tmp_path) -> None:
    """Entries of one family whose front policies differ by operand types (Blackwell
    block-scaled: MXFP8's and NVFP4's) are indexed under one front each, and every record
    reads back its own; two different fronts for the same operand types are refused."""
    from conftest_runtime import bf16_front

    from dglu.contract.writer import expanded, manifest_data

    entries = expanded(write_artifacts(tmp_path, DEFAULT_KEYS[:3]))["variants"]
    other = {**bf16_front(), "operands": ["fp16"], "outputs": list(reversed(bf16_front()["outputs"]))}
    entries[1]["front"] = other
    manifest = manifest_data(entries)
    assert sorted(manifest["fronts"]) == ["sm90_bf16/bf16", "sm90_bf16/fp16"]
    write_manifest(tmp_path, manifest)
    write_index(tmp_path)
    indexed = json.loads((tmp_path / index.INDEX_FILE).read_text())
    assert sorted(indexed["head"]["fronts"]) == ["sm90_bf16/bf16", "sm90_bf16/fp16"]
    front = index.RECORD_FIELDS.index("front")
    assert [r[front] for r in indexed["records"]["sm_90a"]] == ["sm90_bf16/bf16", "sm90_bf16/fp16", "sm90_bf16/bf16"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lazy = reader.read_manifest(tmp_path, lazy=True)
    assert [v.front for v in lazy.variants] == [v.front for v in reader.read_manifest(tmp_path).variants]
    assert lazy.variants[1].front.operands != lazy.variants[0].front.operands
    entries[2]["front"] = {**bf16_front(), "outputs": other["outputs"]}
    with pytest.raises(ValueError, match="its front differs from sm90_bf16/bf16's"):
        manifest_data(entries)


MIXED_KEYS = [variant_key(arch="sm_100a"), *DEFAULT_KEYS[:2], variant_key(arch="sm_100a", dbias=False), DEFAULT_KEYS[2]]


def test_an_architectures_read_parses_only_its_records_and_keeps_the_manifests_order_and_places(
    tmp_path, monkeypatch
) -> None:
    """The index groups its records by architecture: a read of one architecture parses the
    index's head (not with json.loads) and that architecture's records, nothing of the
    others'; its variants are the full read's of that architecture, in order, and an
    entry's error names its place in the manifest's variants, as a full read's does."""
    write_artifacts(tmp_path, MIXED_KEYS)
    write_index(tmp_path)
    full = reader.read_manifest(tmp_path)
    parsed = []
    loads = json.loads
    monkeypatch.setattr(index.json, "loads", lambda text: parsed.append(text) or loads(text))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hopper = reader.read_manifest(tmp_path, lazy=True, arch="sm_90a")
    (records,) = parsed
    assert "sm_100a" not in records and records.count('"sm_90a"') == 3
    assert [v.name for v in hopper.variants] == [v.name for v in full.variants if v.key.arch == "sm_90a"]
    assert [reader.full_variant(v) for v in hopper.variants] == [v for v in full.variants if v.key.arch == "sm_90a"]
    assert _identities(reader.read_manifest(tmp_path, lazy=True, arch="sm_100a")) == [
        i for i in _identities(full) if i["key"].arch == "sm_100a"
    ]
    assert reader.read_manifest(tmp_path, lazy=True, arch="sm_120a").variants == ()
    every = reader.read_manifest(tmp_path, lazy=True)
    assert sorted(v.name for v in every.variants) == sorted(v.name for v in full.variants)
    _tamper_record(tmp_path, 4, size=12345)  # the manifest's variants[4]: the third sm_90a record
    entry = reader.read_manifest(tmp_path, lazy=True, arch="sm_90a").variants[2]
    with pytest.raises(ManifestError, match=r"manifest.json: variants\[4\] \('sm_90a[^']+'\): fields \['size'\] differ"):
        entry.variant()


def test_a_read_of_one_architecture_without_an_index_gives_the_same_variants(tmp_path) -> None:
    write_artifacts(tmp_path, MIXED_KEYS)
    without = reader.read_manifest(tmp_path, lazy=True, arch="sm_100a")
    write_index(tmp_path)
    assert _identities(without) == _identities(reader.read_manifest(tmp_path, lazy=True, arch="sm_100a"))
    assert [v.key.arch for v in without.variants] == ["sm_100a", "sm_100a"]


def test_fronts_that_differ_only_in_their_check_order_keep_their_own_order() -> None:
    from conftest_runtime import bf16_front

    front = bf16_front()
    reordered = {**front, "arguments": dict(reversed(list(front["arguments"].items())))}
    first = reader._read_front("first", front)
    second = reader._read_front("second", reordered)
    assert list(first.arguments) == list(front["arguments"])
    assert list(second.arguments) == list(reordered["arguments"]) != list(first.arguments)
