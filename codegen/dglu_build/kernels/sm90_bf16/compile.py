"""Compile the sm90 BF16 kernels of one variant into one sm_90a cubin, no GPU needed.

The host entry is traced with placeholder pointers, int32 extents and the rounding flag
(one cubin serves every shape and flag value; nothing is dereferenced at compile time).
The manifest fields come from the family's declarations (interface.py), the kernel
symbols from the cubin itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cutlass
import cutlass.memory

from ..aot import PLACEHOLDER_EXTENTS, compile_family_variant
from ..dtypes import DTYPES
from . import NAME, interface
from .config import SMEM_ARCH, SMEM_CAPACITY, Config
from ..blocks.d_output import DPairStore
from .kernel import Sm90Bf16Kernel
from .registers import Sm90Bf16RegisterEpilogueKernel

ARCH = "sm_90a"


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
        "act_out": (cutlass.BFloat16, 16),  # act_out variants' prob * GLU(X)
    }


def check_smem_capacity() -> None:
    """The shared memory config.py budgets must be the DSL's own figure for the arch."""
    capacity = cutlass.memory.get_smem_capacity_in_bytes(SMEM_ARCH)
    if capacity != SMEM_CAPACITY[SMEM_ARCH]:
        raise RuntimeError(
            f"CuTe DSL says {SMEM_ARCH} has {capacity} bytes of shared memory per block; "
            f"config.SMEM_CAPACITY says {SMEM_CAPACITY[SMEM_ARCH]}: update it"
        )


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """Compile the kernels of one variant into one cubin: the fused kernel, plus the
    per-expert descriptor writer (discrete weights) and the dbias finisher (dbias).
    Returns the cubin and the manifest fields the family declares for it."""
    config = Config.from_key(key)
    check_smem_capacity()
    extents = {**PLACEHOLDER_EXTENTS, interface.DGRAD_ROUNDING_FLAG: 0}
    return compile_family_variant(
        NAME, interface, config, kernel_builder(config), _host_pointers(config), extents, ARCH, symbol_prefix
    )


def kernel_builder(config: Config) -> Sm90Bf16Kernel:
    """The kernel of the variant's consumer: the register-epilogue kernel (ping-pong or
    cooperative) with D stored as D's dtype (the family's output stage), or the staged
    cooperative one."""
    if config.register_epilogue:
        return Sm90Bf16RegisterEpilogueKernel(config, DPairStore(DTYPES[config.d_dtype]))
    return Sm90Bf16Kernel(config)
