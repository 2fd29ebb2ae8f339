"""Helpers for the runtime's CPU tests: hand-written artifact directories (docs/manifest.md).

Imported by the tests/cpu/test_runtime_*.py modules (pytest puts tests/cpu on sys.path).
The entries mirror what the build writes for the sm90_bf16 family (the current schema:
dglu.contract.writer.manifest_data).
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
        + ("_dcs" if key.get("discrete_col_sfd") else "")
        + ("_sgo" if key.get("use_single_group_runtime_offsets") else "")
    )


def _attributes(cluster: list[int]) -> dict[str, Any]:
    return {"cluster_dimension": cluster} if cluster != [1, 1, 1] else {}


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
                "attributes": {},
                "grid": {"rule": "elementwise", "count": "l"},
                "params": copy.deepcopy(DESCRIPTOR_PARAMS),
            }
        )
    cluster = [key["cluster_m"], key["cluster_n"], 1]
    kernels.append(
        {
            "role": "main",
            "symbol": f"{symbol}_main_0",
            "block": [384, 1, 1],
            "cluster": cluster,
            "dynamic_smem_bytes": 200_000,
            "attributes": _attributes(cluster),
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
                "attributes": {},
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


def _tensor(shape: list, strides: list, dtypes: list[str], align: int, io: str = "in",
            rank_drop: bool = False) -> dict[str, Any]:
    rule = {"shape": shape, "strides": strides, "dtypes": dtypes, "align": align, "io": io}
    return {**rule, "rank_drop": True} if rank_drop else rule


def arguments(key: dict[str, Any]) -> dict[str, Any]:
    """The seed's tensors as ARGUMENT rules (docs/manifest.md), in check order."""
    ab = key["ab_dtype"]
    weights = (
        {"b": _tensor(["n", "k", "l"], ["k", 1, "n*k"], [ab], 16)}
        if key["weight_mode"] == "dense"
        else {"b_ptrs": _tensor(["l"], [1], ["i64"], 8)}
    )
    cd_shape, cd_strides = ["m", "2*n", 1], ["2*n", 1, "2*m*n"]
    per_expert = _tensor(["l"], [1], ["fp32"], 4)
    per_row = _tensor(["m", 1, 1], [1, 1, 1], ["fp32"], 4)
    rules = {
        "a": _tensor(["m", "k", 1], ["k", 1, "m*k"], [ab], 16, rank_drop=True),
        **weights,
        "c": _tensor(cd_shape, cd_strides, [key["c_dtype"]], 16, rank_drop=True),
        "d_row": _tensor(cd_shape, cd_strides, [key["d_dtype"]], 16, "out", rank_drop=True),
        "padded_offsets": _tensor(["l"], [1], ["i32"], 4),
        "alpha": per_expert,
        "beta": per_expert,
        "prob": per_row,
        "dprob": {**per_row, "io": "accumulate"},
    }
    if key["dbias"]:
        rules["dbias"] = _tensor(["l", "2*n", 1], ["2*n", 1, 1], ["bf16"], 16, "accumulate")
    return copy.deepcopy(rules)


LIMITS = {
    "n": {"min": 32, "multiple_of": 32, "why": "gate/input columns come in blocks of 32"},
    "k": {"min": 8, "multiple_of": 8, "why": "rows of A span a multiple of 16 bytes"},
    "l": {"min": 1, "max": 1024, "why": "the kernels search at most 1024 experts"},
}
SOURCE_HASH = "5" * 64


def workspaces(key: dict[str, Any]) -> dict[str, Any]:
    """The workspaces the variant's kernels use."""
    rules = {}
    if key["dbias"]:
        rules["dbias_ws"] = {"dtype": "fp32", "count": "l_n2", "align": 16, "zero": "by_consumer"}
    if key["weight_mode"] == "discrete":
        rules["b_desc_ws"] = {"dtype": "i64", "count": "16*l", "align": 128, "zero": "never"}
    if key["scheduler"] == "dynamic":
        rules["tile_counter"] = {"dtype": "i32", "count": 4, "align": 16, "zero": "each_call"}
    return rules


def views(key: dict[str, Any]) -> dict[str, Any]:
    """Discrete weights: the b_expert template of one expert's (N, K) matrix."""
    if key["weight_mode"] != "discrete":
        return {}
    strides = ["k", 1, "n*k"] if key["b_major"] == "k" else [1, "n", "n*k"]
    return {
        "b_expert": {
            "of": "b_ptrs",
            "dtype": key["ab_dtype"],
            "shape": ["n", "k", 1],
            "strides": strides,
            "address_align_down": 16,
        }
    }


def bf16_front() -> dict[str, Any]:
    """The sm90_bf16 family's front policy, as its declaration writes it (a copy)."""
    from dglu_build.kernels.sm90_bf16.interface import FRONT

    return copy.deepcopy(FRONT)


def bf16_policy() -> Any:
    """The sm90_bf16 family's front policy as the runtime reads it (dglu.contract.front)."""
    from dglu.contract.element_types import ELEMENT_TYPES
    from dglu.contract.front import read_front

    return read_front(bf16_front(), "sm90_bf16", ELEMENT_TYPES)


def mxfp8_policy() -> Any:
    """The sm90_mxfp8 family's front policy as the runtime reads it."""
    from dglu.contract.element_types import ELEMENT_TYPES
    from dglu.contract.front import read_front
    from dglu_build.kernels.sm90_mxfp8.interface import FRONT

    return read_front(copy.deepcopy(FRONT), "sm90_mxfp8", ELEMENT_TYPES)


def variant_entry(key: dict[str, Any], cubin: bytes, **changes: Any) -> dict[str, Any]:
    """A complete v2 VARIANT entry for ``key`` and its cubin bytes."""
    import dglu

    name = variant_name(key)
    sha256 = hashlib.sha256(cubin).hexdigest()
    entry = {
        "name": name,
        "family": "sm90_bf16",
        "key": key,
        "cubin": f"{name}.{sha256[:16]}.cubin",
        "sha256": sha256,
        "size": len(cubin),
        "build": {
            "dglu_version": dglu.__version__,
            "source_hash": SOURCE_HASH,
            "toolchain": {"cutlass_dsl": "4.8.1", "python": "3.11.7"},
        },
        "front": bf16_front(),
        "min_driver": 12090,
        "m_aligned": 256,
        "arguments": arguments(key),
        "scalars": {"n2": "2*n", "l_n2": "l*n2"},
        "limits": copy.deepcopy(LIMITS),
        "views": views(key),
        "workspaces": workspaces(key),
        "kernels": kernel_entries(key, f"dglu_{name}"),
        "tma": {
            "a": {**TMA_COMMON, "dims": [1, 0], "box": [64, key["tile_m"]]},
            **b_tma_rule(key),
        },
    }
    entry.update(changes)
    return entry


def write_artifacts(directory: Path, keys: list[dict[str, Any]], **changes: Any) -> dict[str, Any]:
    """Write random cubins and a manifest for ``keys`` into ``directory`` (``changes``
    replace fields of every entry); return the manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    variants = []
    for key in keys:
        cubin = os.urandom(512 + len(variants))
        entry = variant_entry(key, cubin, **changes)
        (directory / entry["cubin"]).write_bytes(cubin)
        variants.append(entry)
    from dglu.contract.writer import manifest_data

    manifest = manifest_data(variants)
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


def write_index(directory: Path) -> Path:
    """Write the manifest index of ``directory/manifest.json`` as dglu-build does."""
    from dglu.contract.index import INDEX_FILE, index_text

    path = directory / INDEX_FILE
    path.write_text(index_text((directory / "manifest.json").read_text()))
    return path
