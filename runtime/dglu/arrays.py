"""Accept CUDA arrays of other frameworks (CuPy, ...) as torch tensors, without copies.

An argument that is not a torch tensor but speaks DLPack (``__dlpack__``) or
``__cuda_array_interface__`` is wrapped as a torch tensor over the same memory
(torch.from_dlpack / torch.as_tensor); its writes land in the caller's array. Anything
else is returned unchanged, for the checks to refuse by name. Outputs that the wrapper
allocates (D_row, dbias) are torch tensors.
"""

from __future__ import annotations

from typing import Any


def as_torch(value: Any) -> Any:
    """``value`` as a torch tensor sharing its memory, when it is a foreign CUDA array."""
    import torch

    if value is None or isinstance(value, torch.Tensor):
        return value
    if hasattr(value, "__dlpack__"):
        return torch.from_dlpack(value)
    if hasattr(value, "__cuda_array_interface__"):
        return torch.as_tensor(value)  # on the array's own device, over its memory
    return value
