"""Compile the sm90 BF16 kernels of one variant into one sm_90a cubin, no GPU needed.

The host entry is traced with placeholder pointers and int32 extents (one cubin serves
every shape; nothing is dereferenced at compile time). The manifest fields come from the
family's declarations (interface.py), the kernel symbols from the cubin itself.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass.cute.runtime import make_fake_stream, make_ptr

from ...cubin_info import read_cubin
from ..blocks.tma_helpers import DTYPES
from ..declaration import check_signature, manifest_kernel, symbol_of
from . import NAME, interface
from .config import SMEM_ARCH, SMEM_CAPACITY, Config
from .kernel import Sm90Bf16Kernel

ARCH = "sm_90a"
PLACEHOLDER_BYTES = 16 * 1024
PLACEHOLDER_EXTENTS = {"m": 1024, "n": 256, "k": 256, "l": 4}


def _host_pointers(config: Config) -> dict[str, tuple[Any, int]]:
    """(element type, assumed alignment) of each pointer the host entry takes, in its order."""
    ab = DTYPES[config.ab_dtype]
    f32, i32, i64 = cutlass.Float32, cutlass.Int32, cutlass.Int64
    return {
        "a": (ab, 16),
        "b": (ab, 16),  # discrete weights: one expert's matrix (the descriptor template)
        "c": (DTYPES[config.c_dtype], 16),
        "d_row": (DTYPES[config.d_dtype], 16),
        "padded_offsets": (i32, 4),
        "alpha": (f32, 4),
        "beta": (f32, 4),
        "prob": (f32, 4),
        "dprob": (f32, 4),
        "dbias_ws": (f32, 4),
        "dbias": (cutlass.BFloat16, 4),
        "b_ptrs": (i64, 8),
        "b_desc_ws": (i64, 128),
        "tile_counter": (i32, 4),
        "dprob_parts": (f32, 16),  # deterministic mode's partial sums
        "dbias_parts": (f32, 16),
        "act_out": (cutlass.BFloat16, 16),  # act_out variants' prob * GLU(C)
    }


def _host_arguments(config: Config) -> list:
    """Placeholders for Sm90Bf16Kernel.host's arguments, checked against its signature."""
    pointers = _host_pointers(config)
    names = [*pointers, *PLACEHOLDER_EXTENTS, "stream"]
    taken = list(inspect.signature(Sm90Bf16Kernel.host).parameters)[1:]
    if taken != names:
        raise TypeError(f"Sm90Bf16Kernel.host takes {taken}; the placeholders are for {names}")
    gmem = cute.AddressSpace.gmem
    return [
        *(make_ptr(dtype, PLACEHOLDER_BYTES, gmem, assumed_align=align) for dtype, align in pointers.values()),
        *(cutlass.Int32(value) for value in PLACEHOLDER_EXTENTS.values()),
        make_fake_stream(),
    ]


def _compile(host, args: list, dump_dir: Path) -> bytes:
    """Compile ``host`` for sm_90a; return the cubin."""
    compiled = cute.compile(
        host, *args, options=f"--gpu-arch {ARCH} --keep-cubin --keep-ptx --dump-dir={dump_dir}"
    )
    cubin = compiled.__cubin__
    if not isinstance(cubin, bytes) or not compiled.__ptx__:
        raise RuntimeError(f"CuTe DSL produced no cubin/PTX (dump dir {dump_dir})")
    return cubin


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """Compile the kernels of one variant into one cubin: the fused kernel, plus the
    per-expert descriptor writer (discrete weights) and the dbias finisher (dbias).
    Returns the cubin and the manifest fields the family declares for it."""
    config = Config.from_key(key)
    capacity = cutlass.memory.get_smem_capacity_in_bytes(SMEM_ARCH)
    if capacity != SMEM_CAPACITY[SMEM_ARCH]:
        raise RuntimeError(
            f"CuTe DSL says {SMEM_ARCH} has {capacity} bytes of shared memory per block; "
            f"config.SMEM_CAPACITY says {SMEM_CAPACITY[SMEM_ARCH]}: update it"
        )
    builder = Sm90Bf16Kernel(config)
    declared = interface.kernels(config)
    for kernel in declared:
        function = builder.kernel_functions()[kernel.role]
        check_signature(function, kernel.params)
        # the DSL appends a per-trace suffix ("_0"): the symbol is read back from the cubin
        function.set_name_prefix(f"{symbol_prefix}_{kernel.role}", remove_cutlass_symbol=True, keep_mangled_name=False)
    with tempfile.TemporaryDirectory(prefix="dglu-cute-") as tmp:
        cubin = _compile(builder.host, _host_arguments(config), Path(tmp))
    symbols = list(read_cubin(cubin).kernels)

    def extents(tensor: str) -> list[str]:
        return interface.tma_extents(config, tensor)

    kernels = [
        manifest_kernel(
            kernel,
            symbol_of(symbols, symbol_prefix, kernel.role),
            builder.smem_bytes if kernel.role == "main" else 0,
            extents,
        )
        for kernel in declared
    ]
    return cubin, {"family": NAME, **interface.entry(config), "kernels": kernels}
