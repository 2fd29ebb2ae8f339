"""Combine artifact directories (e.g. the shards of a release build) into one.

Every source must verify (dglu_build.verify) and all must agree: a variant that
two sources hold must be the same entry built under the same build key, and
every variant must come from the same toolchain (``build.toolchain``): the
shards of one release are built alike.
Conflicts are all reported, and refused, before anything is written. The
output's existing variants take part like a source, so shards can be merged
in as they arrive.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dglu_build.artifact_store import ArtifactStore, Record, StoreError, open_store, read_manifest_file
from dglu_build.verify import verify_directory


class MergeConflict(StoreError):
    """Sources that cannot become one artifact directory."""


def merge_directories(sources: Sequence[Path], out_dir: Path, notify: Callable[[str], None]) -> dict[str, Any]:
    """Merge ``sources`` into ``out_dir``; return the manifest written."""
    if not sources:
        raise MergeConflict("sources: got none, need at least one directory to merge")
    gathered: list[tuple[Path, Record, bytes]] = []
    for source in sources:
        with open_store(source, notify, shared=True) as store:
            gathered += _verified_records(store)
    with open_store(out_dir, notify) as out:
        existing = [(out_dir, record, out.cubin(record)) for record in out.known_records().values()]
        chosen = _without_conflicts([*existing, *gathered])
        records = [out.put(record.described, cubin, record.build_key) for _, record, cubin in chosen]
        return out.write_manifest(records)


def _verified_records(store: ArtifactStore) -> list[tuple[Path, Record, bytes]]:
    """The variants of ``store``'s manifest, which must verify; build keys from records that match them."""
    verification = verify_directory(store.directory)
    if verification.problems:
        raise MergeConflict(f"{store.directory} does not verify:\n  " + "\n  ".join(verification.problems))
    manifest = read_manifest_file(store.directory)
    records = store.known_records()
    verified = []
    for entry in manifest["variants"]:
        record = records[entry["name"]]
        if record.entry != entry:  # a record a killed build left, newer than the manifest
            record = Record(entry, None)
        verified.append((store.directory, record, store.cubin(record)))
    return verified


def _without_conflicts(candidates: list[tuple[Path, Record, bytes | None]]) -> list[tuple[Path, Record, bytes]]:
    """One candidate per variant name; MergeConflict naming every disagreement."""
    chosen: dict[str, tuple[Path, Record, bytes]] = {}
    problems = []
    for origin, record, cubin in candidates:
        if cubin is None:
            problems.append(f"{origin}: the cubin of {record.name} is missing or altered")
            continue
        first = chosen.setdefault(record.name, (origin, record, cubin))
        if first[1].entry["sha256"] != record.entry["sha256"] or first[1].described != record.described:
            problems.append(f"{record.name}: {first[0]} and {origin} hold different builds of it")
        elif first[1].build_key != record.build_key:
            problems.append(f"{record.name}: {first[0]} and {origin} built it under different build keys")
    toolchains: dict[str, Path] = {}
    for origin, record, _ in chosen.values():
        toolchains.setdefault(json.dumps(record.entry["build"]["toolchain"], sort_keys=True), origin)
    if len(toolchains) > 1:
        problems.append("different toolchains: " + "; ".join(f"{origin}: {tc}" for tc, origin in toolchains.items()))
    if problems:
        raise MergeConflict("refusing to merge:\n  " + "\n  ".join(problems))
    return list(chosen.values())

