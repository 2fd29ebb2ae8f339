"""The manifest's index, ``manifest-index.json`` beside ``manifest.json`` (docs/manifest.md).

It holds, for every variant, the identity fields selection and the staleness rules read
(dglu.contract.reader.IDENTITY_FIELDS) and the byte range of its entry in manifest.json,
plus the manifest's size and CRC-32 (a staleness check: the cubins' integrity is their sha256). So the runtime reads a manifest of many variants
without parsing it whole: the index (one small JSON object per variant), a hash of the
manifest's bytes, and the one entry a call selects (dglu.contract.reader.VariantEntry).
A big JSON parse inside a process that already holds a large heap (torch's) makes enough
new containers to set off a full garbage collection; the index makes a few hundred.

``index_text`` makes the index of a manifest's text; the build side writes it atomically
right after the manifest (dglu_build.artifact_store). ``read_index`` returns the records
of an index that matches its manifest; a missing index means "parse the manifest"; an
index that does not match the manifest's bytes (stale, or the manifest was edited) is
never used: a warning says so and names the command that rewrites it.
"""

from __future__ import annotations

import zlib
import json
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from .errors import ManifestError
from .schema import MANIFEST_FILE

INDEX_FILE = "manifest-index.json"
INDEX_FORMAT = 3
# What each record copies from its manifest entry (reader.IDENTITY_FIELDS but ``front``,
# which the index holds once per family and operand types, in ``fronts``); "span" and
# "front_id" (its key in ``fronts``) are added.
RECORD_FIELDS = ("name", "family", "key", "cubin", "sha256", "size", "build")
REWRITE_HINT = (
    "rebuild the directory (`dglu-build compile KERNEL_SPECS.yaml -o DIR` writes the index "
    "anew), or delete the index (the whole manifest is then parsed)"
)


class StaleIndexWarning(UserWarning):
    """An index that does not match its manifest: the manifest is parsed whole instead."""


def entry_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) byte offsets of each entry of the ``variants`` list in the manifest
    ``text`` (as the canonical writer lays it out: ``schema_version`` first)."""
    decoder = json.JSONDecoder()
    position = text.index("[", text.index('"variants"')) + 1
    spans = []
    while True:
        while text[position] in " \t\r\n,":
            position += 1
        if text[position] == "]":
            break
        _, end = decoder.raw_decode(text, position)
        spans.append((position, end))
        position = end
    if text.isascii():
        return spans
    return [(len(text[:start].encode()), len(text[:end].encode())) for start, end in spans]


def index_text(manifest_text: str) -> str:
    """The index of the manifest ``manifest_text`` (each span checked to hold its entry)."""
    raw = manifest_text.encode()
    manifest = json.loads(manifest_text)
    records = []
    fronts: dict[str, Any] = {}
    for entry, (start, end) in zip(manifest["variants"], entry_spans(manifest_text), strict=True):
        if json.loads(raw[start:end]) != entry:
            raise ValueError(f"variant {entry.get('name')!r}: its span {start}..{end} holds another entry")
        front_id = front_key(entry["family"], entry["front"])
        records.append({**{field: entry[field] for field in RECORD_FIELDS}, "span": [start, end], "front_id": front_id})
        if fronts.setdefault(front_id, entry["front"]) != entry["front"]:
            raise ValueError(f"variant {entry['name']!r}: its front differs from {front_id}'s")
    index = {
        "fronts": fronts,
        "index_format": INDEX_FORMAT,
        "schema_version": manifest["schema_version"],
        "manifest_bytes": len(raw),
        "manifest_crc32": _crc32(raw),
        "variants": records,
    }
    return json.dumps(index, separators=(",", ":"), sort_keys=True) + "\n"


def front_key(family: str, front: Any) -> str:
    """The index's key of a family's front policy: a family may have one per operand types
    (e.g. sm100_blockscaled: MXFP8's and NVFP4's), ``family/e4m3+e5m2``."""
    return f"{family}/{'+'.join(front['operands'])}"


class Index(NamedTuple):
    """An index that matches its manifest: the manifest's schema_version and bytes, one
    record per variant (its RECORD_FIELDS, ``span`` and ``front_id``) and the fronts by id."""

    schema_version: Any
    manifest: bytes
    records: list[dict[str, Any]]
    fronts: dict[str, Any]


def read_index(directory: Path) -> Index | None:
    """The index of ``directory/manifest.json`` if it has one that matches the manifest's
    bytes; None when it has none, or (with a StaleIndexWarning) when it does not match."""
    path = directory / INDEX_FILE
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _stale(path, f"cannot be read: {exc.strerror}")
    manifest_path = directory / MANIFEST_FILE
    try:
        manifest = manifest_path.read_bytes()
    except OSError as exc:
        raise ManifestError(f"{manifest_path}: cannot read: {exc.strerror}") from exc
    try:
        index = json.loads(text)
        found = (index["index_format"], index["manifest_bytes"], index["manifest_crc32"])
        records, schema_version, fronts = index["variants"], index["schema_version"], index["fronts"]
    except (ValueError, KeyError, TypeError) as exc:
        return _stale(path, f"is not an index dglu reads ({type(exc).__name__}: {exc})")
    wanted = (INDEX_FORMAT, len(manifest), _crc32(manifest))
    if found != wanted:
        return _stale(
            path,
            f"describes another {MANIFEST_FILE} (format, bytes, CRC-32 {found[0]}, {found[1]}, "
            f"{str(found[2])[:12]}; the manifest has {wanted[0]}, {wanted[1]}, {wanted[2][:12]})",
        )
    if not isinstance(records, list) or not isinstance(fronts, dict):
        return _stale(path, "has no list of variants or no object of fronts")
    return Index(schema_version, manifest, records, fronts)


def _crc32(data: bytes) -> str:
    """The CRC-32 of ``data`` as 8 hex digits: whether an index was made from these bytes
    (a manifest several MB long hashes ~4x faster than with sha256, on every first call)."""
    return f"{zlib.crc32(data):08x}"


def _stale(path: Path, problem: str) -> None:
    warnings.warn(
        f"{path} {problem}: it is not used, the whole manifest is read instead; {REWRITE_HINT}",
        StaleIndexWarning,
        stacklevel=4,
    )
    return None


def record_span(record: dict[str, Any], manifest: bytes) -> tuple[int, int] | None:
    """The record's ``span`` if it is a byte range of ``manifest``; else None."""
    span = record.get("span")
    if (
        isinstance(span, list) and len(span) == 2 and all(type(x) is int for x in span)
        and 0 <= span[0] < span[1] <= len(manifest)
    ):
        return span[0], span[1]
    return None
