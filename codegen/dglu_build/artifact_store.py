"""An artifact directory as the build side keeps it: cubins, manifest.json and build records.

Layout (docs/manifest.md is the reader's view; readers need only the first two)::

    DIR/manifest.json                      lists every variant of the directory
    DIR/manifest-index.json                its variants' identity fields and where each entry lies
    DIR/<name>.<sha256[:16]>.cubin         one per variant, named by its content
    DIR/.dglu-build/lock                   the fcntl lock every writer holds
    DIR/.dglu-build/records/<name>.json    per variant: its manifest entry and build key

Writers hold the lock for their whole run; every file is written atomically
(temp file + rename). A cubin is never rewritten in place (its name changes
with its content), the manifest is replaced only once every cubin it lists is
in place, and cubins are deleted only once no manifest or record refers to
them. The index is removed before the manifest is replaced and written after it, so
a reader sees the new manifest with its own index, or with none (the runtime then
parses the whole manifest). So a reader always sees a manifest whose cubins exist and match, and a
writer killed at any point leaves a valid directory plus temp files, which the
next writer removes. Names are checked before they become file names.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dglu_build.atomic_write import TEMP_SUFFIX, write_atomic
from dglu.contract.index import INDEX_FILE, index_text
from dglu.contract.schema import MANIFEST_FILE as MANIFEST_NAME, SCHEMA_VERSION
from dglu.contract.writer import expanded, manifest_text

STATE_DIR = ".dglu-build"
LOCK_NAME = "lock"
RECORDS_DIR = "records"
RECORD_FORMAT = 2
# Entry fields the store fills in from the cubin it writes.
STORED_FIELDS = ("cubin", "sha256", "size")
SAFE_NAME = re.compile(r"[a-z0-9][a-z0-9_]*")


class StoreError(ValueError):
    """An artifact directory that cannot be read or written as asked."""


@dataclass(frozen=True)
class Record:
    """A built variant: its manifest entry and the build key it was built under (None: unknown)."""

    entry: dict[str, Any]
    build_key: str | None

    @property
    def name(self) -> str:
        return self.entry["name"]

    @property
    def described(self) -> dict[str, Any]:
        """The entry without the fields the store derives from the cubin."""
        return {field: value for field, value in self.entry.items() if field not in STORED_FIELDS}


def check_name(name: Any, where: str) -> str:
    """``name`` if it is a variant name safe to use in a file name; StoreError otherwise."""
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise StoreError(f"{where}: variant name {name!r} is not a name dglu-build writes ([a-z0-9_]+)")
    return name


def check_entry(entry: Any, where: str) -> dict[str, Any]:
    """``entry`` if its name and cubin file name are safe to use as paths; StoreError otherwise."""
    if not isinstance(entry, dict):
        raise StoreError(f"{where}: needs an object, got {type(entry).__name__}")
    check_name(entry.get("name"), where)
    cubin = entry.get("cubin")
    if not isinstance(cubin, str) or Path(cubin).name != cubin or not cubin.endswith(".cubin"):
        raise StoreError(f"{where}: cubin {cubin!r} is not a .cubin file name inside the directory")
    return entry


def cubin_file_name(name: str, sha256: str) -> str:
    """The file a cubin is stored in: named by variant and content, so it is never overwritten."""
    return f"{name}.{sha256[:16]}.cubin"


def read_manifest_file(directory: Path, *, older: bool = False) -> dict[str, Any]:
    """The parsed manifest.json of ``directory``, its top level checked, each entry with its
    front policy in it (dglu.contract.writer.expanded: as the build side keeps entries).

    With ``older``, a manifest of an earlier schema version is returned too (a build
    reads it to rebuild its variants); otherwise it is refused with the command that
    rebuilds it.
    """
    path = directory / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise StoreError(f"{directory}: no {MANIFEST_NAME} (not an artifact directory)") from None
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: unreadable: {err}") from None
    found = manifest.get("schema_version") if isinstance(manifest, dict) else type(manifest).__name__
    is_older = type(found) is int and 1 <= found < SCHEMA_VERSION
    if found != SCHEMA_VERSION and not (older and is_older):
        rebuild = f"; rebuild it: dglu-build compile SPECS -o {directory}" if is_older else ""
        raise StoreError(f"{path}: schema_version {found!r}, this dglu-build reads {SCHEMA_VERSION}{rebuild}")
    if not isinstance(manifest.get("variants"), list) or not isinstance(manifest.get("fronts", {}), dict):
        raise StoreError(f"{path}: needs a 'variants' list (and an object of 'fronts')")
    return expanded(manifest)


class ArtifactStore:
    """An artifact directory opened with ``open_store``; see the module docstring."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._records_dir = directory / STATE_DIR / RECORDS_DIR

    def known_records(self) -> dict[str, Record]:
        """Every variant the directory holds or has built: its records, plus manifest entries without one."""
        records = {}
        if self._records_dir.is_dir():
            for path in sorted(self._records_dir.glob("*.json")):
                record = self._read_record(path)
                if record is not None:
                    records[record.name] = record
        if (self.directory / MANIFEST_NAME).is_file():
            manifest = read_manifest_file(self.directory, older=True)
            for index, entry in enumerate(manifest["variants"]):
                check_entry(entry, f"{self.directory / MANIFEST_NAME}: variants[{index}]")
                records.setdefault(entry["name"], Record(entry, None))
        return records

    def _read_record(self, path: Path) -> Record | None:
        """The record in ``path``; its build key is None when an older dglu-build wrote it (it is
        then rebuilt); None when it is not a record at all."""
        try:
            data = json.loads(path.read_text())
            record = Record(check_entry(data["entry"], str(path)), data["build_key"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if record.name != path.stem:
            return None
        return record if data.get("format") == RECORD_FORMAT else Record(record.entry, None)

    def cubin(self, record: Record) -> bytes | None:
        """The record's cubin if it is present and matches its sha256, else None."""
        path = self.directory / record.entry["cubin"]
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == record.entry.get("sha256") else None

    def put(self, described: dict[str, Any], cubin: bytes, build_key: str | None) -> Record:
        """Store a variant: ``described`` is its manifest entry but for STORED_FIELDS; the cubin goes in first."""
        name = check_name(described["name"], f"{self.directory}")
        sha256 = hashlib.sha256(cubin).hexdigest()
        entry = {**described, "cubin": cubin_file_name(name, sha256), "sha256": sha256, "size": len(cubin)}
        record = Record(entry, build_key)
        write_atomic(self.directory / entry["cubin"], cubin)
        self._records_dir.mkdir(parents=True, exist_ok=True)
        data = {"format": RECORD_FORMAT, "build_key": build_key, "entry": entry}
        write_atomic(self._records_dir / f"{name}.json", _json_bytes(data))
        return record

    def write_manifest(self, records: list[Record]) -> dict[str, Any] | None:
        """Make ``records`` (sorted by name) the directory's manifest and its index, then drop
        unreferenced cubins.

        With no records the manifest is removed: a directory without one holds no variants.
        """
        manifest = None
        (self.directory / INDEX_FILE).unlink(missing_ok=True)
        if records:
            text = manifest_text([record.entry for record in sorted(records, key=lambda record: record.name)])
            write_atomic(self.directory / MANIFEST_NAME, text.encode())
            write_atomic(self.directory / INDEX_FILE, index_text(text).encode())
            manifest = json.loads(text)
        else:
            (self.directory / MANIFEST_NAME).unlink(missing_ok=True)
        self._remove_unreferenced_cubins(records)
        return manifest

    def _remove_unreferenced_cubins(self, listed: list[Record]) -> None:
        referenced = {record.entry["cubin"] for record in [*listed, *self.known_records().values()]}
        for path in self.directory.glob("*.cubin"):
            if path.name not in referenced:
                path.unlink(missing_ok=True)

    def remove_temp_files(self) -> None:
        """Delete what writers killed midway left behind."""
        for folder in (self.directory, self._records_dir):
            for path in folder.glob(f".*{TEMP_SUFFIX}"):
                path.unlink(missing_ok=True)

    def copy_to(self, destination: Path, names: list[str]) -> dict[str, Any]:
        """Write the variants ``names`` (cubins + a manifest of just them) into the new directory ``destination``."""
        records = self.known_records()
        missing = [name for name in names if name not in records]
        if missing:
            raise StoreError(f"{self.directory}: has no variant(s) {', '.join(missing)}")
        destination.mkdir(parents=True, exist_ok=False)
        selected = [records[name] for name in sorted(names)]
        for record in selected:
            cubin = self.cubin(record)
            if cubin is None:
                raise StoreError(f"{self.directory}: cubin {record.entry['cubin']} of {record.name} is missing or altered")
            write_atomic(destination / record.entry["cubin"], cubin)
        return ArtifactStore(destination).write_manifest(selected)


def _json_bytes(data: Any) -> bytes:
    """A record as JSON, its entry's keys in the order the build gave them (a manifest's
    ``arguments`` and ``scalars`` are ordered: docs/manifest.md)."""
    return (json.dumps(data, indent=2) + "\n").encode()


@contextmanager
def open_store(
    directory: str | Path, notify: Callable[[str], None], *, shared: bool = False
) -> Iterator[ArtifactStore]:
    """Open ``directory`` under its lock: exclusive to write (creating it), shared to read.

    A reader of a directory no build ever wrote (no lock file) reads it without a lock.
    ``notify`` hears that the call is waiting for another process's lock.
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise StoreError(f"{directory} exists and is not a directory")
    lock_path = directory / STATE_DIR / LOCK_NAME
    if shared and not lock_path.exists():
        if not directory.is_dir():
            raise StoreError(f"{directory}: no such directory")
        yield ArtifactStore(directory)
        return
    if not shared:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, lock_path, notify)
        store = ArtifactStore(directory)
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            store.remove_temp_files()
        yield store
    finally:
        os.close(fd)  # releases the lock


def _lock(fd: int, mode: int, lock_path: Path, notify: Callable[[str], None]) -> None:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
        notify(f"waiting for {lock_path.parent.parent}: locked by pid {holder}")
        fcntl.flock(fd, mode)
