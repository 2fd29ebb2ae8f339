"""The build side's two calls into the manifest contract (docs/manifest.md, schema v2).

``manifest_text`` writes a manifest, ``read_with_runtime_reader`` reads one the way the
dglu runtime will. Both belong to ``dglu.contract.schema`` (the one reader and writer
both sides share); until it is on this branch they are minimal stand-ins that the merge
replaces by ``schema.manifest_text`` and ``schema.read_manifest``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
MANIFEST_NAME = "manifest.json"


def manifest_text(variants: list[dict[str, Any]]) -> str:
    """The canonical manifest.json text listing ``variants`` (sorted keys, 2-space indent, final newline)."""
    # interim for dglu.contract.schema.manifest_text(variants), which also validates each entry
    return json.dumps({"schema_version": SCHEMA_VERSION, "variants": variants}, sort_keys=True, indent=2) + "\n"


def read_with_runtime_reader(directory: Path) -> None:
    """Read ``directory``'s manifest as the runtime does; ValueError (or OSError) if it refuses it."""
    # interim for dglu.contract.schema.read_manifest(directory), the runtime's strict v2 reader
    manifest = json.loads((directory / MANIFEST_NAME).read_text())
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{directory / MANIFEST_NAME}: needs schema_version {SCHEMA_VERSION}")
    if not isinstance(manifest.get("variants"), list):
        raise ValueError(f"{directory / MANIFEST_NAME}: needs a 'variants' list")
