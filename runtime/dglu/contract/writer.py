"""The one way to write a manifest: every entry is read back first, then written as JSON
with sorted keys (except the order-carrying maps ``arguments`` and ``scalars``, kept as
given), a two-space indent and a final newline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .reader import parse_manifest
from .schema import MANIFEST_FILE, ORDERED_MAPS, SCHEMA_VERSION

def _canonical(value: Any, keep_order: bool = False) -> Any:
    """``value`` with every object's keys sorted, except inside ORDERED_MAPS themselves."""
    if isinstance(value, dict):
        items = value.items() if keep_order else sorted(value.items())
        return {k: _canonical(v, keep_order=not keep_order and k in ORDERED_MAPS) for k, v in items}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def manifest_text(variants: list[dict[str, Any]]) -> str:
    """The canonical manifest.json text listing ``variants`` (each read back first)."""
    data = {"schema_version": SCHEMA_VERSION, "variants": list(variants)}
    parse_manifest(json.loads(json.dumps(data)), Path("<manifest being written>") / MANIFEST_FILE)
    return json.dumps(_canonical(data), indent=2) + "\n"
