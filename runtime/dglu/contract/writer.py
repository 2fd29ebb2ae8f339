"""The one way to write a manifest: the entries' front policies are written once per family
and operand types at the top level (``fronts``; each entry names its own), every entry is
read back, then all is written as JSON with sorted keys (except the order-carrying maps
``arguments`` and ``scalars``, kept as given), a two-space indent and a final newline.

The build side keeps each entry with its front policy in it (``expanded`` gives a
manifest's entries so); only the file holds each policy once."""

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


def front_key(family: str, front: Any) -> str:
    """The id of a family's front policy in a manifest's (and its index's) ``fronts``: a
    family may have one per operand types
    (e.g. sm100_blockscaled: MXFP8's and NVFP4's), ``family/e4m3+e5m2``."""
    return f"{family}/{'+'.join(front['operands'])}"


def manifest_data(variants: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest listing ``variants`` (entries whose ``front`` is their family's policy):
    each policy once in ``fronts`` by its id (front_key), each entry naming it;
    ValueError when two entries give one id different policies."""
    fronts: dict[str, Any] = {}
    entries = []
    for entry in variants:
        front_id = front_key(entry["family"], entry["front"])
        if fronts.setdefault(front_id, entry["front"]) != entry["front"]:
            raise ValueError(f"variant {entry['name']!r}: its front differs from {front_id}'s")
        entries.append({**entry, "front": front_id})
    return {"schema_version": SCHEMA_VERSION, "fronts": fronts, "variants": entries}


def expanded(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` (parsed JSON) with each entry's front id replaced by its policy (as the
    build side keeps entries); an entry whose ``front`` is no id of ``fronts`` (an older
    manifest's policy) is kept as it is."""
    fronts = manifest.get("fronts", {})
    variants = [
        {**entry, "front": fronts[entry["front"]]} if isinstance(entry, dict) and isinstance(entry.get("front"), str)
        and entry["front"] in fronts else entry
        for entry in manifest.get("variants", [])
    ]
    return {**manifest, "variants": variants}


def manifest_text(variants: list[dict[str, Any]]) -> str:
    """The canonical manifest.json text listing ``variants`` (see manifest_data; each
    read back first)."""
    data = manifest_data(variants)
    parse_manifest(json.loads(json.dumps(data)), Path("<manifest being written>") / MANIFEST_FILE)
    return json.dumps(_canonical(data), indent=2) + "\n"
