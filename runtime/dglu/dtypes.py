"""Element types by their manifest names: byte size, torch dtype and TMA data type."""

from __future__ import annotations

from typing import Any, NamedTuple


class ElementType(NamedTuple):
    """One element type as the manifest names it (e.g. "bf16")."""

    name: str
    size: int
    torch_name: str
    tensor_map_type: str  # member name of cuda.bindings.driver.CUtensorMapDataType


ELEMENT_TYPES: dict[str, ElementType] = {
    e.name: e
    for e in (
        ElementType("bf16", 2, "bfloat16", "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
        ElementType("fp16", 2, "float16", "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"),
        ElementType("fp32", 4, "float32", "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
        ElementType("i32", 4, "int32", "CU_TENSOR_MAP_DATA_TYPE_INT32"),
        ElementType("i64", 8, "int64", "CU_TENSOR_MAP_DATA_TYPE_INT64"),
        ElementType("e4m3", 1, "float8_e4m3fn", "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
        ElementType("e5m2", 1, "float8_e5m2", "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
        ElementType("e8m0", 1, "float8_e8m0fnu", "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
    )
}

FLOAT_TYPES = ("bf16", "fp16", "fp32")
FP8_TYPES = ("e4m3", "e5m2")  # MXFP8 operands, C and D


_BY_TORCH_NAME = {e.torch_name: e for e in ELEMENT_TYPES.values()}


def element_type_of(torch_dtype: Any) -> ElementType | None:
    """The element type of a torch dtype, or None when dglu has no name for it."""
    return _BY_TORCH_NAME.get(str(torch_dtype).removeprefix("torch."))


def torch_dtype(name: str) -> Any:
    """The torch dtype of a manifest element type name (imports torch)."""
    import torch

    return getattr(torch, ELEMENT_TYPES[name].torch_name)
