"""Element types (dglu.contract.element_types) as torch dtypes."""

from __future__ import annotations

from typing import Any

from .contract.element_types import ELEMENT_TYPES, FLOAT_TYPES, FP8_TYPES, ElementType

__all__ = ["ELEMENT_TYPES", "FLOAT_TYPES", "FP8_TYPES", "ElementType", "element_type_of", "torch_dtype"]


_BY_TORCH_NAME = {e.torch_name: e for e in ELEMENT_TYPES.values()}


def element_type_of(torch_dtype: Any) -> ElementType | None:
    """The element type of a torch dtype, or None when dglu has no name for it."""
    return _BY_TORCH_NAME.get(str(torch_dtype).removeprefix("torch."))


def torch_dtype(name: str) -> Any:
    """The torch dtype of a manifest element type name (imports torch)."""
    import torch

    return getattr(torch, ELEMENT_TYPES[name].torch_name)
