"""Encode CUtensorMap descriptors (cuTensorMapEncodeTiled) from a manifest TMA rule.

The tensor is viewed in its seed rank-3 shape; the descriptor's rank is ``len(rule.dims)``
(tensor dimensions left out must have size 1). TMA dimension i is tensor dimension
``rule.dims[i]`` (innermost first): globalDim and globalStrides (bytes, innermost
omitted) come from the tensor's actual shape and strides in that order; boxDim is the
rule's box; elementStrides are all 1. Encoded descriptors are cached (bounded LRU) by
device, pointer, shape, strides, dtype and rule; the driver's arguments but the address
by shape, strides, dtype and rule.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any

from . import driver
from .dtypes import ELEMENT_TYPES
from .problem import TensorView

if TYPE_CHECKING:
    from .contract.schema import TmaRule

TENSOR_MAP_BYTES = 128

# Manifest option value -> member name of the matching cuda.bindings.driver enum.
TMA_OPTIONS: dict[str, tuple[str, dict[str, str]]] = {
    "swizzle": (
        "CUtensorMapSwizzle",
        {
            "none": "CU_TENSOR_MAP_SWIZZLE_NONE",
            "32B": "CU_TENSOR_MAP_SWIZZLE_32B",
            "64B": "CU_TENSOR_MAP_SWIZZLE_64B",
            "128B": "CU_TENSOR_MAP_SWIZZLE_128B",
        },
    ),
    "l2_promotion": (
        "CUtensorMapL2promotion",
        {
            "none": "CU_TENSOR_MAP_L2_PROMOTION_NONE",
            "64B": "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
            "128B": "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
            "256B": "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
        },
    ),
    "oob_fill": (
        "CUtensorMapFloatOOBfill",
        {
            "none": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
            "nan_request_zero_fma": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA",
        },
    ),
    "interleave": (
        "CUtensorMapInterleave",
        {
            "none": "CU_TENSOR_MAP_INTERLEAVE_NONE",
            "16B": "CU_TENSOR_MAP_INTERLEAVE_16B",
            "32B": "CU_TENSOR_MAP_INTERLEAVE_32B",
        },
    ),
}


def global_layout(rule: TmaRule, view: TensorView) -> tuple[list[int], list[int]]:
    """globalDim (elements) and globalStrides (bytes, innermost omitted) in TMA order."""
    if view.dtype != rule.dtype:
        raise ValueError(f"TMA rule wants {rule.dtype} elements, the tensor holds {view.dtype}")
    dropped = [d for d in range(len(view.shape)) if d not in rule.dims]
    if any(view.shape[d] != 1 for d in dropped):
        raise ValueError(
            f"TMA rule covers dimensions {list(rule.dims)} of a tensor of shape "
            f"{view.shape}; the others must have size 1"
        )
    innermost = rule.dims[0]
    if view.strides[innermost] != 1 and view.shape[innermost] > 1:
        raise ValueError(
            f"TMA innermost dimension {innermost} must have stride 1, the tensor has "
            f"strides {view.strides}"
        )
    element_size = ELEMENT_TYPES[view.dtype].size
    dims = [view.shape[d] for d in rule.dims]
    strides = [view.strides[d] * element_size for d in rule.dims[1:]]
    return dims, strides


def _enum(cuda: object, option: str, value: str) -> object:
    enum_name, members = TMA_OPTIONS[option]
    return getattr(getattr(cuda, enum_name), members[value])


@functools.lru_cache(maxsize=1024)
def encode_tensor_map(rule: TmaRule, view: TensorView) -> bytes:
    """The 128-byte CUtensorMap of ``view`` under ``rule`` (cached)."""
    data_type, rank, layout = _encoding(rule, view.shape, view.strides, view.dtype)
    tensor_map = driver.checked("cuTensorMapEncodeTiled", data_type, rank, view.pointer, *layout)
    return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)


@functools.lru_cache(maxsize=256)
def _encoding(
    rule: TmaRule, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str
) -> tuple[Any, int, tuple[Any, ...]]:
    """cuTensorMapEncodeTiled's arguments but the address, for a view of ``shape``,
    ``strides`` and ``dtype`` under ``rule``: its data type, rank, and the arguments after
    the address (cached: a tensor of a known layout at a new address, such as the wrapper's
    new D_row, is encoded with the driver call alone)."""
    from cuda.bindings import driver as cuda

    driver.initialize()
    dims, byte_strides = global_layout(rule, TensorView(None, 0, shape, strides, dtype))
    data_type = getattr(cuda.CUtensorMapDataType, ELEMENT_TYPES[dtype].tensor_map_type)
    return data_type, len(dims), (
        [cuda.cuuint64_t(d) for d in dims],
        [cuda.cuuint64_t(s) for s in byte_strides],
        [cuda.cuuint32_t(b) for b in rule.box],
        [cuda.cuuint32_t(1)] * len(dims),
        _enum(cuda, "interleave", rule.interleave),
        _enum(cuda, "swizzle", rule.swizzle),
        _enum(cuda, "l2_promotion", rule.l2_promotion),
        _enum(cuda, "oob_fill", rule.oob_fill),
    )
