"""Compile the sm90 MXFP8 kernels of one variant into one sm_90a cubin, no GPU needed.

The host entry is traced with placeholder pointers, int32 extents and flags (one cubin
serves every shape). The manifest fields come from the family's declarations
(interface.py), the kernel symbols from the cubin itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cutlass

from ..aot import PLACEHOLDER_EXTENTS, compile_family_variant
from ..dtypes import DTYPES
from ..sm90_bf16.compile import ARCH, check_smem_capacity
from . import NAME, interface
from .config import Config
from .kernel import Sm90Mxfp8Kernels


def _host_pointers(config: Config) -> dict[str, tuple[Any, int]]:
    """(element type, assumed alignment) of each pointer the host entry takes, in its order."""
    ab, d = DTYPES[config.ab_dtype], DTYPES[config.d_dtype]
    f32, i32, i64, u8, bf16 = cutlass.Float32, cutlass.Int32, cutlass.Int64, cutlass.Uint8, cutlass.BFloat16
    return {
        "a": (ab, 16),
        "sfa": (u8, 4),
        "b": (ab, 16),
        "sfb": (u8, 4),
        "b_ptrs": (i64, 8),
        "sfb_ptrs": (i64, 8),
        "c": (DTYPES[config.c_dtype], 16),
        "d_row": (d, 16),
        "d_col": (d, 16),
        "sfd_row": (u8, 4),
        "sfd_col": (u8, 4),
        "norm_const": (f32, 4),
        "padded_offsets": (i32, 4),
        "alpha": (f32, 4),
        "beta": (f32, 4),
        "prob": (f32, 4),
        "dprob": (f32, 4),
        "dbias": (bf16, 4),
        "offsets_ws": (i32, 16),
        "dbias_ws": (f32, 16),
        "tile_counter": (i32, 16),
        "b_desc_ws": (i64, 128),  # discrete weights' descriptors (NULL with dense B)
    }


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """Compile the kernels of one variant into one cubin; return it and the manifest fields
    the family declares for it."""
    config = Config.from_key(key)
    check_smem_capacity()
    extents = {**PLACEHOLDER_EXTENTS, **{flag: 0 for flag in interface.FLAGS}}
    return compile_family_variant(
        NAME, interface, config, Sm90Mxfp8Kernels(config), _host_pointers(config), extents, ARCH, symbol_prefix
    )
