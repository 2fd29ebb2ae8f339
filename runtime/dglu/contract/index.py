"""The manifest's index, ``manifest-index.json`` beside ``manifest.json`` (docs/manifest.md).

It holds, for every variant, the identity fields selection and the staleness rules read
(dglu.contract.reader.IDENTITY_FIELDS) as one compact record (a list in RECORD_FIELDS'
order: the key's values in KEY_FIELDS' order, its act_params, the build and the front
policy by their place in the index's ``act_params``, ``builds`` and ``fronts``, which hold
each once), the byte range of its entry in manifest.json and that entry's CRC-32, plus the
manifest's size. The records are grouped by architecture: the file is one JSON object
whose first member, ``head``, holds everything but the records, with the character range
of each architecture's list of records (``architectures``, counted from the end of the
head); the lists follow in ``records``. So the runtime reads a manifest of many variants
without parsing it whole, nor the records of other architectures: the head, a ``stat`` of
the manifest, the device's architecture's records (a few containers each: a big JSON
parse inside a process that already holds a large heap, torch's, sets off a full garbage
collection) and the one entry a call selects, whose bytes must have their record's CRC-32
(a staleness check: the cubins' integrity is their sha256). A record's fields are checked
when its variant is used (dglu.contract.reader.VariantEntry): the records a process never
selects cost no checks.

``index_text`` makes the index of a manifest's text; the build side writes it atomically
right after the manifest (dglu_build.artifact_store). ``read_index`` returns the index of
a directory (its head parsed) when it describes its manifest, and ``index_records`` the
records of one architecture or of all; a missing index means "parse the manifest"; an
index of another format, key fields or manifest size (stale, or the manifest was edited)
is never used: a warning says so and names the command that rewrites it.
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from pathlib import Path
from typing import Any

from .errors import ManifestError
from .keys import KEY_FIELD_DEFAULTS, KEY_FIELDS
from .records import Record
from .schema import MANIFEST_FILE

INDEX_FILE = "manifest-index.json"
INDEX_FORMAT = 5
HEAD_START = '{"head":'  # the index's first characters: its head follows
_DECODER = json.JSONDecoder()
# A record's fields, in order: the identity fields (reader.IDENTITY_FIELDS; "key" as its
# values in KEY_FIELDS' order, act_params as its place in ``act_params``, "build" as its
# place in ``builds``, "front" as its id in
# ``fronts``), then the entry's byte range in manifest.json, its CRC-32 and its place in
# the manifest's ``variants`` (which the entry's error messages name).
RECORD_FIELDS = (
    "name", "family", "key", "cubin", "sha256", "size", "build", "front", "start", "end", "crc32", "position"
)
REWRITE_HINT = (
    "rebuild the directory (`dglu-build compile KERNEL_SPECS.yaml -o DIR` writes the index "
    "anew), or delete the index (the whole manifest is then parsed)"
)


class StaleIndexWarning(UserWarning):
    """An index that does not describe its manifest: the manifest is parsed whole instead."""


def entry_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) byte offsets of each entry of the top-level ``variants`` list in
    the manifest ``text``."""
    decoder = json.JSONDecoder()
    position = _skip(text, text.index("{") + 1)
    while text[position] != "]":  # the top-level keys, up to "variants" and its list
        key, position = decoder.raw_decode(text, position)
        position = _skip(text, text.index(":", position) + 1)
        if key == "variants":
            position += 1  # its "["
            break
        _, position = decoder.raw_decode(text, position)
        position = _skip(text, position)
    spans = []
    while True:
        position = _skip(text, position)
        if text[position] == "]":
            break
        _, end = decoder.raw_decode(text, position)
        spans.append((position, end))
        position = end
    if text.isascii():
        return spans
    return [(len(text[:start].encode()), len(text[:end].encode())) for start, end in spans]


def _skip(text: str, position: int) -> int:
    """``position`` moved past white space and commas."""
    while text[position] in " \t\r\n,":
        position += 1
    return position


def index_text(manifest_text: str) -> str:
    """The index of the manifest ``manifest_text`` (each span checked to hold its entry)."""
    raw = manifest_text.encode()
    manifest = json.loads(manifest_text)
    records: dict[str, list[Any]] = {}  # by architecture, in the manifest's order
    fronts: dict[str, Any] = {}
    builds: list[Any] = []
    act_params: list[Any] = []
    spans = entry_spans(manifest_text)
    for position, (entry, (start, end)) in enumerate(zip(manifest["variants"], spans, strict=True)):
        if json.loads(raw[start:end]) != entry:
            raise ValueError(f"variant {entry.get('name')!r}: its span {start}..{end} holds another entry")
        front_id = entry["front"]
        if front_id not in fronts:
            fronts[front_id] = manifest["fronts"][front_id]
        if entry["build"] not in builds:
            builds.append(entry["build"])
        key = {**KEY_FIELD_DEFAULTS, **entry["key"]}
        if key.get("act_params") not in act_params:
            act_params.append(key.get("act_params"))
        key["act_params"] = act_params.index(key.get("act_params"))
        records.setdefault(key["arch"], []).append([
            entry["name"], entry["family"], [key.get(name) for name in KEY_FIELDS], entry["cubin"],
            entry["sha256"], entry["size"], builds.index(entry["build"]), front_id, start, end,
            entry_crc32(raw[start:end]), position,
        ])
    head = {
        "act_params": act_params,
        "builds": builds,
        "fronts": fronts,
        "index_format": INDEX_FORMAT,
        "key_fields": list(KEY_FIELDS),
        "manifest_bytes": len(raw),
        "record_fields": list(RECORD_FIELDS),
        "schema_version": manifest["schema_version"],
    }
    return index_layout(head, records)


def index_layout(head: dict[str, Any], records: dict[str, list[Any]]) -> str:
    """The index's text: ``head`` (given its ``architectures``: where each architecture's
    records lie, counted from the head's end) first, then ``records`` (architecture -> its
    records), each architecture's list on a line of its own, in sorted order."""
    members, spans, position = [], {}, len(',"records":{')
    for arch in sorted(records):
        member, listed = f"{json.dumps(arch)}:", json.dumps(records[arch], separators=(",", ":"))
        spans[arch] = [position + len(member), position + len(member) + len(listed)]
        members.append(member + listed)
        position += len(member) + len(listed) + len(",\n")
    head_text = json.dumps({**head, "architectures": spans}, separators=(",", ":"), sort_keys=True)
    return HEAD_START + head_text + ',"records":{' + ",\n".join(members) + "}}\n"


def entry_crc32(data: bytes) -> str:
    """The CRC-32 of an entry's bytes as 8 hex digits: whether the index was made from them."""
    return f"{zlib.crc32(data):08x}"


class Index(Record):
    """An index that describes its manifest: the manifest's path and schema_version, the
    act_params and builds (by place) and the fronts (by id) the records name, and where
    each architecture's records lie in the index's ``text`` (a character range)."""

    manifest: Path
    schema_version: Any
    act_params: list[Any]
    builds: list[Any]
    fronts: dict[str, Any]
    architectures: dict[str, tuple[int, int]]
    text: str


def read_index(directory: Path) -> Index | None:
    """The index of ``directory/manifest.json`` (its head parsed, no record) if it has one
    of this format and key fields that gives the manifest's size; None when it has none,
    or (with a StaleIndexWarning) when it does not describe the manifest."""
    path = directory / INDEX_FILE
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _stale(path, f"cannot be read: {exc.strerror}")
    except UnicodeDecodeError as exc:
        return _stale(path, f"is not an index dglu reads (not ASCII: {exc})")
    manifest_path = directory / MANIFEST_FILE
    try:
        size = os.stat(manifest_path).st_size
    except OSError as exc:
        raise ManifestError(f"{manifest_path}: cannot read: {exc.strerror}") from exc
    try:
        if not text.startswith(HEAD_START):
            raise ValueError(f"it does not start with {HEAD_START!r}")
        head, end = _DECODER.raw_decode(text, len(HEAD_START))
        found = (head["index_format"], head["manifest_bytes"])
        layout = (head["record_fields"], head["key_fields"])
        act_params, builds, fronts = head["act_params"], head["builds"], head["fronts"]
        schema_version = head["schema_version"]
        architectures = {arch: (end + a, end + b) for arch, (a, b) in head["architectures"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _stale(path, f"is not an index dglu reads ({type(exc).__name__}: {exc})")
    if found[0] != INDEX_FORMAT:
        return _stale(path, f"has index_format {found[0]!r}; this dglu reads index_format {INDEX_FORMAT}")
    if found[1] != size:
        return _stale(path, f"describes another {MANIFEST_FILE} (of {found[1]!r} bytes; the manifest has {size})")
    if layout != (list(RECORD_FIELDS), list(KEY_FIELDS)):
        return _stale(path, f"lists other record or key fields ({layout}) than this dglu ({RECORD_FIELDS}, {tuple(KEY_FIELDS)})")
    if not all(isinstance(x, list) for x in (act_params, builds)) or not isinstance(fronts, dict):
        return _stale(path, "has no list of act_params or builds, or no object of fronts")
    return Index(manifest_path, schema_version, act_params, builds, fronts, architectures, text)


def index_records(index: Index, arch: str | None = None) -> list[tuple[str, Any]]:
    """(architecture, record) of each record of ``index`` of architecture ``arch`` (none
    when it has none), or with None of every architecture (by architecture, in sorted
    order), each architecture's in the manifest's order; ManifestError when a range of
    records is not a JSON list."""
    records = []
    for name, (start, end) in sorted(index.architectures.items()):
        if arch is not None and name != arch:
            continue
        try:
            listed = json.loads(index.text[start:end])
            found = f"a JSON {type(listed).__name__}"
        except ValueError as exc:
            listed, found = None, f"not JSON: {exc}"
        if not isinstance(listed, list):
            raise ManifestError(
                f"{index.manifest.parent / INDEX_FILE}: the records of {name} (characters "
                f"{start}..{end}) are {found}, not a list; {REWRITE_HINT}"
            )
        records += ((name, record) for record in listed)
    return records


def _stale(path: Path, problem: str) -> None:
    warnings.warn(
        f"{path} {problem}: it is not used, the whole manifest is read instead; {REWRITE_HINT}",
        StaleIndexWarning,
        stacklevel=4,
    )
    return None


def read_entry(manifest: Path, start: Any, end: Any, crc32: Any) -> bytes | None:
    """The bytes ``start``..``end`` of ``manifest`` if they are a byte range of it whose
    CRC-32 is ``crc32``; else None."""
    if not (type(start) is int and type(end) is int and 0 <= start < end):
        return None
    with open(manifest, "rb") as file:
        file.seek(start)
        data = file.read(end - start)
    return data if len(data) == end - start and entry_crc32(data) == crc32 else None
