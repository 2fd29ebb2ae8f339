"""Check an artifact directory the way the runtime will trust it.

The manifest must pass the runtime's own reader (dglu.contract.reader), so a
directory that verifies is never refused at run time. Then every variant's
cubin is re-hashed against the manifest's sha256 and size, and the
manifest's launch description (kernels, parameters, TMA rules) and
``min_driver`` are checked against what ptxas wrote into that cubin
(dglu_build.abi_check). The manifest index, when there is one, must be the
one the manifest's text makes (dglu.contract.index). All problems are
collected, one per variant at most (plus the reader's and the index's), so one
run names them all.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from dglu_build.abi_check import AbiMismatch, check_variant_cubin
from dglu_build.artifact_store import StoreError, check_entry, read_manifest_file
from dglu.contract.index import INDEX_FILE, REWRITE_HINT, index_text
from dglu.contract.reader import read_manifest
from dglu.contract.schema import MANIFEST_FILE


@dataclass
class Verification:
    """The variants checked and the problems found."""

    directory: Path
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def verify_directory(directory: Path) -> Verification:
    """Check every variant of ``directory``'s manifest; StoreError if there is no readable manifest."""
    manifest = read_manifest_file(directory)
    verification = Verification(directory)
    try:
        read_manifest(directory)
    except (ValueError, OSError) as err:
        verification.problems.append(f"the dglu runtime refuses the manifest: {err}")
    index_problem = _index_problem(directory)
    if index_problem:
        verification.problems.append(index_problem)
    for index, entry in enumerate(manifest["variants"]):
        where = f"variants[{index}]"
        try:
            check_entry(entry, where)
            where = f"variant {entry['name']}"
            _check_variant(directory, entry, where)
        except (StoreError, AbiMismatch) as err:
            verification.problems.append(str(err))
        except (KeyError, TypeError) as err:
            verification.problems.append(f"{where}: malformed entry ({type(err).__name__}: {err})")
        else:
            verification.checked.append(entry["name"])
    return verification


def _index_problem(directory: Path) -> str | None:
    """What is wrong with the directory's manifest index (none: the runtime parses the
    whole manifest), or None."""
    path = directory / INDEX_FILE
    if not path.is_file():
        return None
    try:
        expected = index_text((directory / MANIFEST_FILE).read_text(encoding="utf-8"))
        found = path.read_text(encoding="utf-8")
    except (OSError, ValueError) as err:
        return f"{path}: cannot be checked against {MANIFEST_FILE} ({err})"
    if found != expected:
        return f"{path}: does not match {MANIFEST_FILE} (the runtime ignores it); {REWRITE_HINT}"
    return None


def _check_variant(directory: Path, entry: dict, where: str) -> None:
    path = directory / entry["cubin"]
    try:
        cubin = path.read_bytes()
    except OSError as err:
        raise StoreError(f"{where}: cannot read its cubin {path}: {err.strerror}") from None
    if len(cubin) != entry["size"]:
        raise StoreError(f"{where}: {path.name} has {len(cubin)} bytes, the manifest says {entry['size']}")
    sha256 = hashlib.sha256(cubin).hexdigest()
    if sha256 != entry["sha256"]:
        raise StoreError(f"{where}: {path.name} has sha256 {sha256}, the manifest says {entry['sha256']}")
    info = check_variant_cubin(cubin, entry, where)
    if entry["min_driver"] != info.min_driver:
        raise AbiMismatch(
            f"{where}: min_driver {entry['min_driver']}, but the cubin was built by CUDA {info.toolkit} "
            f"(needs {info.min_driver})"
        )
