"""Compile the Hopper dGLU kernels of one variant to an sm_90a cubin, no GPU needed.

Besides the cubin, this module states the launch contract of each kernel
(parameter ABI, block, cluster, shared memory, grid rule, TMA rules) in the
manifest's terms. The parameter list mirrors the kernels' signatures in
hopper_dglu.py; tests check it against the parameter info in the cubin.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream, make_ptr

from .hopper_dglu import (
    DTYPES,
    DESCRIPTOR_THREADS,
    FINISH_THREADS,
    THREADS_PER_CTA,
    TILE_K,
    Activation,
    HopperDgluKernel,
)

# What this kernel family compiles; specs are validated against it.
SUPPORTED = {
    "arch": ["sm_90a"],
    "ab_dtype": ["bf16"],
    "c_dtype": ["bf16", "fp16", "fp32"],
    "d_dtype": ["bf16", "fp16", "fp32"],
    "act_func": ["dswiglu", "dgeglu", "dsituglu"],
    "dbias": [True, False],
    "weight_mode": ["dense", "discrete"],
    "b_major": ["k", "n"],
    "tile_mn": [(128, 128), (128, 64)],
    "cluster_mn": [(1, 1), (2, 1)],
    "scheduler": ["static", "dynamic"],
}


def _pointer(name: str, tensor: str | None = None, optional: bool = False) -> dict:
    param = {"name": name, "kind": "pointer", "size": 8, "align": 8, "tensor": tensor or name}
    if optional:
        param["optional"] = True
    return param


def _i32(name: str) -> dict:
    return {"name": name, "kind": "i32", "size": 4, "align": 4, "value": name}


def _tensormap(tensor: str) -> dict:
    return {"name": f"tma_{tensor}", "kind": "tensormap", "size": 128, "align": 64, "tensor": tensor}


def _i32_tuple(name: str, values: list[str]) -> dict:
    return {"name": name, "kind": "i32_tuple", "size": 4 * len(values), "align": 4, "values": values}


def _main_params(discrete: bool, dynamic: bool) -> list[dict]:
    """The fused kernel's parameters; discrete weights read B through per-expert
    descriptors (``b_desc_ws``) built from a template for one expert's matrix."""
    if discrete:
        b = [_tensormap("b_expert"), _i32_tuple("b_expert_extents", ["n", "k"])]
    else:
        b = [_tensormap("b"), _i32_tuple("b_extents", ["n", "k", "l"])]
    return [
        _tensormap("a"),
        _i32_tuple("a_extents", ["m", "k"]),
        *b,
        _tensormap("c"),
        _i32_tuple("c_extents", ["m", "n2"]),
        _tensormap("d_row"),
        _i32_tuple("d_row_extents", ["m", "n2"]),
        _pointer("padded_offsets"),
        _pointer("alpha"),
        _pointer("beta"),
        _pointer("prob"),
        _pointer("dprob"),
        _pointer("dbias_ws", optional=True),
        _pointer("b_desc_ws", optional=not discrete),
        _pointer("tile_counter", optional=not dynamic),
        _i32("n"),
        _i32("l"),
    ]


DESCRIPTOR_PARAMS = [
    _tensormap("b_expert"),
    _pointer("b_ptrs"),
    _pointer("b_desc_ws"),
    _i32("n"),
    _i32("k"),
    _i32("l"),
]
FINISH_PARAMS = [_pointer("dbias_ws"), _pointer("dbias"), _i32("l_n2")]


def _tma_rules(kernel: HopperDgluKernel, c_dtype: str, d_dtype: str) -> dict[str, dict]:
    """TMA descriptors: A (M, K), B (N, K, L) or one expert's (N, K), C and D (M, 2N);
    innermost first, 128B swizzle."""
    common = {"swizzle": "128B", "l2_promotion": "128B", "oob_fill": "none", "interleave": "none"}
    if kernel.b_n_major:
        # N innermost: a 128-byte swizzle row holds 64 of N, so a tile takes tile_n/64 boxes
        b = {"b_expert": {**common, "dtype": "bf16", "dims": [0, 1], "box": [64, TILE_K]}}
    elif kernel.discrete_weights:
        b = {"b_expert": {**common, "dtype": "bf16", "dims": [1, 0], "box": [TILE_K, kernel.tile_n]}}
    else:
        # with a 2-CTA cluster each CTA loads (and multicasts) half of B's tile
        b = {"b": {**common, "dtype": "bf16", "dims": [1, 0, 2], "box": [TILE_K, kernel.tile_n // kernel.cluster_m, 1]}}
    return {
        "a": {**common, "dtype": "bf16", "dims": [1, 0], "box": [TILE_K, kernel.tile_m]},
        **b,
        "c": {**common, "dtype": c_dtype, "dims": [1, 0], "box": [kernel.slots.c.box_cols, kernel.tile_m]},
        "d_row": {**common, "dtype": d_dtype, "dims": [1, 0], "box": [kernel.slots.d.box_cols, kernel.tile_m]},
    }


def _activation(key: dict) -> Activation:
    return Activation(key["act_func"], dict(key.get("act_params") or {}))


def _compile(host, args: list, dump_dir: Path) -> tuple[bytes, str]:
    """Compile ``host`` for sm_90a; return the cubin and its PTX."""
    compiled = cute.compile(
        host, *args, options=f"--gpu-arch sm_90a --keep-cubin --keep-ptx --dump-dir={dump_dir}"
    )
    cubin, ptx = compiled.__cubin__, compiled.__ptx__
    if not isinstance(cubin, bytes) or not ptx:
        raise RuntimeError(f"CuTe DSL produced no cubin/PTX (dump dir {dump_dir})")
    return cubin, ptx


def _elementwise_kernel(role: str, symbol: str, threads: int, count: str, params: list[dict]) -> dict:
    """Manifest entry of a small helper kernel: one thread per element of ``count``."""
    return {
        "role": role,
        "symbol": symbol,
        "block": [threads, 1, 1],
        "cluster": [1, 1, 1],
        "dynamic_smem_bytes": 0,
        "grid": {"rule": "elementwise", "count": count},
        "params": params,
    }


def _entry_named(entries: list[str], prefix: str) -> str | None:
    """The PTX entry whose name is ``prefix`` plus the DSL's numeric suffix."""
    found = [e for e in entries if re.fullmatch(re.escape(prefix) + r"(_\d+)?", e)]
    if len(found) > 1:
        raise RuntimeError(f"several kernels named {prefix!r}: {found}")
    return found[0] if found else None


def hopper_kernel(key: dict) -> HopperDgluKernel:
    """The kernel builder of a variant; raises ValueError (without compiling) for a
    combination of fields it cannot build, e.g. a tile too wide for its dtypes."""
    return HopperDgluKernel(
        (key["tile_m"], key["tile_n"]),
        _activation(key),
        key["dbias"],
        DTYPES[key["c_dtype"]],
        DTYPES[key["d_dtype"]],
        discrete_weights=key["weight_mode"] == "discrete",
        b_n_major=key["b_major"] == "n",
        dynamic_schedule=key["scheduler"] == "dynamic",
        cluster_m=key["cluster_m"],
    )


def compile_hopper_variant(key: dict, symbol_prefix: str) -> tuple[bytes, list[dict], dict]:
    """Compile the kernels of one Hopper variant into one cubin: the fused kernel, plus the
    per-expert descriptor writer (discrete weights) and the dbias finisher (dbias)."""
    tile_mn = (key["tile_m"], key["tile_n"])
    discrete = key["weight_mode"] == "discrete"
    kernel = hopper_kernel(key)
    bf16, f32, i32 = cutlass.BFloat16, cutlass.Float32, cutlass.Int32
    gmem = cute.AddressSpace.gmem

    def ptr(dtype, align=16):
        return make_ptr(dtype, 16 * 1024, gmem, assumed_align=align)

    # placeholders for HopperDgluKernel.host's arguments, in its order: extents are
    # dynamic (one cubin serves every shape), nothing is dereferenced at compile time
    args = [
        ptr(bf16),  # a
        ptr(bf16),  # b (discrete weights: one expert's matrix)
        ptr(DTYPES[key["c_dtype"]]),  # c
        ptr(DTYPES[key["d_dtype"]]),  # d_row
        ptr(i32, 4),  # padded_offsets
        *(ptr(f32, 4) for _ in range(5)),  # alpha, beta, prob, dprob, dbias_ws
        ptr(bf16, 4),  # dbias
        ptr(cutlass.Int64, 8),  # b_ptrs
        ptr(cutlass.Int64, 128),  # b_desc_ws
        ptr(i32, 4),  # tile_counter
        i32(1024), i32(256), i32(256), i32(4),  # m, n, k, l
        make_fake_stream(),
    ]
    main_symbol = f"{symbol_prefix}_main"
    finish_symbol = f"{symbol_prefix}_dbias_finish"
    descriptor_symbol = f"{symbol_prefix}_b_descriptors"
    for fn, symbol in (
        (HopperDgluKernel.kernel, main_symbol),
        (HopperDgluKernel.dbias_finish, finish_symbol),
        (HopperDgluKernel.b_descriptors, descriptor_symbol),
    ):
        fn.set_name_prefix(symbol, remove_cutlass_symbol=True, keep_mangled_name=False)
    with tempfile.TemporaryDirectory(prefix="dglu-cute-") as tmp:
        cubin, ptx = _compile(kernel.host, args, Path(tmp))
    entries = re.findall(r"\.entry\s+(\w+)\s*\(", ptx)
    # the DSL appends a per-trace suffix ("_0") to the prefix it was given
    main_symbol, finish_symbol, descriptor_symbol = (
        _entry_named(entries, s) for s in (main_symbol, finish_symbol, descriptor_symbol)
    )
    main = {
        "role": "main",
        "symbol": main_symbol,
        "block": [THREADS_PER_CTA, 1, 1],
        "cluster": [key["cluster_m"], key["cluster_n"], 1],
        "dynamic_smem_bytes": kernel.smem_bytes,
        "grid": {"rule": "persistent_tiles", "tile_m": tile_mn[0], "tile_n": tile_mn[1]},
        "params": _main_params(discrete, key["scheduler"] == "dynamic"),
    }
    kernels = [
        *([_elementwise_kernel("b_descriptors", descriptor_symbol, DESCRIPTOR_THREADS, "l", DESCRIPTOR_PARAMS)]
          if discrete else []),
        main,
        *([_elementwise_kernel("dbias_finish", finish_symbol, FINISH_THREADS, "l_n2", FINISH_PARAMS)]
          if key["dbias"] else []),
    ]
    return cubin, kernels, _tma_rules(kernel, key["c_dtype"], key["d_dtype"])
