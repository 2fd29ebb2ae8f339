"""Accept CUDA arrays of other frameworks (CuPy, ...) as torch tensors, without copies.

An argument that is not a torch tensor but speaks DLPack (``__dlpack__``) or
``__cuda_array_interface__`` is wrapped as a torch tensor over the same memory
(torch.from_dlpack / torch.as_tensor); its writes land in the caller's array. Anything
else is returned unchanged, for the checks to refuse by name. Outputs that the wrapper
allocates (D_row, dbias) are torch tensors.
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def torch_module() -> Any:
    """torch, imported on first use (importing dglu does not import torch; an import
    statement in a function costs ~0.15 us a call on the per-call path)."""
    import torch

    return torch


def as_torch(value: Any) -> Any:
    """``value`` as a torch tensor sharing its memory, when it is a foreign CUDA array."""
    torch = torch_module()
    if value is None or isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "__dlpack__"):
        return torch.from_dlpack(value)
    if hasattr(value, "__cuda_array_interface__"):
        return torch.as_tensor(value)  # on the array's own device, over its memory
    return value
