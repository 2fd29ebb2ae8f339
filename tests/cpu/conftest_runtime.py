"""Helpers for the runtime's CPU tests: hand-written artifact directories (docs/manifest.md).

Imported by the tests/cpu/test_runtime_*.py modules (pytest puts tests/cpu on sys.path).
The cubins written here are random bytes: the runtime only hashes them on the CPU.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

GEGLU_DEFAULTS = {
    "geglu_alpha": 1.702,
    "glu_clamp_max": 7.0,
    "glu_clamp_min": -7.0,
    "linear_offset": 1.0,
}


def _pointer(tensor: str, optional: bool = False) -> dict[str, Any]:
    param = {"name": tensor, "kind": "pointer", "size": 8, "align": 8, "tensor": tensor}
    return {**param, "optional": True} if optional else param


def main_params(key: dict[str, Any]) -> list[dict[str, Any]]:
    """The main kernel's parameters (a shortened version of the real list): B as the
    b_expert template for discrete weights; b_desc_ws and tile_counter required only by
    the modes that use them."""
    discrete = key["weight_mode"] == "discrete"
    b, b_extents = ("b_expert", ["n", "k"]) if discrete else ("b", ["n", "k", "l"])
    return [
        {"name": "tma_a", "kind": "tensormap", "size": 128, "align": 64, "tensor": "a"},
        {"name": "a_extents", "kind": "i32_tuple", "size": 8, "align": 4, "values": ["m", "k"]},
        {"name": f"tma_{b}", "kind": "tensormap", "size": 128, "align": 64, "tensor": b},
        {
            "name": f"{b}_extents",
            "kind": "i32_tuple",
            "size": 4 * len(b_extents),
            "align": 4,
            "values": b_extents,
        },
        _pointer("c"),
        _pointer("d_row"),
        _pointer("dprob"),
        _pointer("dbias_ws", optional=True),
        _pointer("b_desc_ws", optional=not discrete),
        _pointer("tile_counter", optional=key["scheduler"] != "dynamic"),
        {"name": "m", "kind": "i32", "size": 4, "align": 4, "value": "m"},
    ]


DESCRIPTOR_PARAMS = [
    {"name": "tma_b_expert", "kind": "tensormap", "size": 128, "align": 64, "tensor": "b_expert"},
    _pointer("b_ptrs"),
    _pointer("b_desc_ws"),
    {"name": "l", "kind": "i32", "size": 4, "align": 4, "value": "l"},
]
FINISH_PARAMS = [
    {"name": "dbias_ws", "kind": "pointer", "size": 8, "align": 8, "tensor": "dbias_ws"},
    {"name": "dbias", "kind": "pointer", "size": 8, "align": 8, "tensor": "dbias"},
    {"name": "l_n2", "kind": "i32", "size": 4, "align": 4, "value": "l_n2"},
]
TMA_COMMON = {
    "dtype": "bf16",
    "swizzle": "128B",
    "l2_promotion": "128B",
    "oob_fill": "none",
    "interleave": "none",
}


def variant_key(**overrides: Any) -> dict[str, Any]:
    """A complete, normalised variant key; act_params follow act_func unless given."""
    key = {
        "arch": "sm_90a",
        "ab_dtype": "bf16",
        "c_dtype": "bf16",
        "d_dtype": "bf16",
        "act_func": "dswiglu",
        "act_params": {},
        "dbias": True,
        "weight_mode": "dense",
        "b_major": "k",
        "tile_m": 128,
        "tile_n": 128,
        "cluster_m": 1,
        "cluster_n": 1,
        "scheduler": "static",
    }
    if overrides.get("act_func") == "dgeglu" and "act_params" not in overrides:
        key["act_params"] = dict(GEGLU_DEFAULTS)
    key.update(overrides)
    return key


def variant_name(key: dict[str, Any]) -> str:
    """A readable unique name for a key (the runtime treats names as opaque)."""
    params = "".join(f"_{name}{value:g}" for name, value in sorted(key["act_params"].items()))
    return (
        f"{key['arch']}_{key['c_dtype']}_{key['d_dtype']}_{key['act_func']}{params}_"
        f"{'dbias' if key['dbias'] else 'nodbias'}_{key['weight_mode']}_{key['b_major']}_"
        f"{key['tile_m']}x{key['tile_n']}_{key['cluster_m']}x{key['cluster_n']}_{key['scheduler']}"
    )


def kernel_entries(key: dict[str, Any], symbol: str) -> list[dict[str, Any]]:
    """The kernels of a variant as the contract describes them (discrete weights start with
    b_descriptors; dbias adds a finisher)."""
    kernels = []
    if key["weight_mode"] == "discrete":
        kernels.append(
            {
                "role": "b_descriptors",
                "symbol": f"{symbol}_b_descriptors_2",
                "block": [128, 1, 1],
                "cluster": [1, 1, 1],
                "dynamic_smem_bytes": 0,
                "grid": {"rule": "elementwise", "count": "l"},
                "params": copy.deepcopy(DESCRIPTOR_PARAMS),
            }
        )
    kernels.append(
        {
            "role": "main",
            "symbol": f"{symbol}_main_0",
            "block": [384, 1, 1],
            "cluster": [key["cluster_m"], key["cluster_n"], 1],
            "dynamic_smem_bytes": 200_000,
            "grid": {"rule": "persistent_tiles", "tile_m": key["tile_m"], "tile_n": key["tile_n"]},
            "params": main_params(key),
        }
    )
    if key["dbias"]:
        kernels.append(
            {
                "role": "dbias_finish",
                "symbol": f"{symbol}_dbias_finish_1",
                "block": [256, 1, 1],
                "cluster": [1, 1, 1],
                "dynamic_smem_bytes": 0,
                "grid": {"rule": "elementwise", "count": "l_n2"},
                "params": copy.deepcopy(FINISH_PARAMS),
            }
        )
    return kernels


def b_tma_rule(key: dict[str, Any]) -> dict[str, Any]:
    """B's TMA rule: (N, K, L) for dense weights, one expert's (N, K) in b_major order for
    discrete ones."""
    if key["weight_mode"] == "dense":
        return {"b": {**TMA_COMMON, "dims": [1, 0, 2], "box": [64, key["tile_n"], 1]}}
    if key["b_major"] == "k":
        return {"b_expert": {**TMA_COMMON, "dims": [1, 0], "box": [64, key["tile_n"]]}}
    return {"b_expert": {**TMA_COMMON, "dims": [0, 1], "box": [64, 64]}}


def write_artifacts(directory: Path, keys: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    """Write random cubins and a manifest for ``keys`` into ``directory``; return the manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    variants = []
    for key in keys:
        name = variant_name(key)
        cubin = os.urandom(512 + len(variants))
        (directory / f"{name}.cubin").write_bytes(cubin)
        variants.append(
            {
                "name": name,
                "key": key,
                "cubin": f"{name}.cubin",
                "sha256": hashlib.sha256(cubin).hexdigest(),
                "size": len(cubin),
                "kernels": kernel_entries(key, f"dglu_{name}"),
                "tma": {
                    "a": {**TMA_COMMON, "dims": [1, 0], "box": [64, key["tile_m"]]},
                    **b_tma_rule(key),
                },
            }
        )
    manifest = {
        "schema_version": 1,
        "toolchain": {"cutlass_dsl": "4.8.1", "python": "3.11.7"},
        "variants": variants,
        **top,
    }
    write_manifest(directory, manifest)
    return manifest


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """(Re)write ``directory/manifest.json``."""
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=1))


DEFAULT_KEYS = [
    variant_key(act_func="dswiglu", dbias=True),
    variant_key(act_func="dswiglu", dbias=False),
    variant_key(act_func="dgeglu", dbias=True),
    variant_key(act_func="dgeglu", dbias=False),
    variant_key(act_func="dswiglu", dbias=True, tile_n=256),
]
