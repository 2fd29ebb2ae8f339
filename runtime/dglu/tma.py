"""Encode CUtensorMap descriptors (cuTensorMapEncodeTiled) from a manifest TMA rule.

The tensor is viewed in its seed rank-3 shape; the descriptor's rank is ``len(rule.dims)``
(tensor dimensions left out must have size 1). TMA dimension i is tensor dimension
``rule.dims[i]`` (innermost first): globalDim and globalStrides (bytes, innermost
omitted) come from the tensor's actual shape and strides in that order; boxDim is the
rule's box; elementStrides are all 1. Encoded descriptors are cached (bounded LRU) by
device, pointer, shape, strides, dtype and rule.
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING

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


def _enum(driver: object, option: str, value: str) -> object:
    enum_name, members = TMA_OPTIONS[option]
    return getattr(getattr(driver, enum_name), members[value])


@functools.lru_cache(maxsize=1024)
def encode_tensor_map(rule: TmaRule, view: TensorView) -> bytes:
    """The 128-byte CUtensorMap of ``view`` under ``rule`` (cached)."""
    from cuda.bindings import driver

    from .driver import checked, initialize

    initialize()
    dims, strides = global_layout(rule, view)
    data_type = getattr(driver.CUtensorMapDataType, ELEMENT_TYPES[view.dtype].tensor_map_type)
    tensor_map = checked(
        "cuTensorMapEncodeTiled",
        data_type,
        len(dims),
        view.pointer,
        [driver.cuuint64_t(d) for d in dims],
        [driver.cuuint64_t(s) for s in strides],
        [driver.cuuint32_t(b) for b in rule.box],
        [driver.cuuint32_t(1)] * len(dims),
        _enum(driver, "interleave", rule.interleave),
        _enum(driver, "swizzle", rule.swizzle),
        _enum(driver, "l2_promotion", rule.l2_promotion),
        _enum(driver, "oob_fill", rule.oob_fill),
    )
    return ctypes.string_at(tensor_map.getPtr(), TENSOR_MAP_BYTES)
