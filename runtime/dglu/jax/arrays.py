"""JAX arrays and XLA buffers as the tensors dglu.validation checks.

JAX arrays are row-major and dense; ``array_spec`` presents one to the torch path's
validation as a tensor of its shape with contiguous strides, its dtype spelled as torch
prints it (``torch.bfloat16``: the element type names and the messages are the torch
path's). Two arguments are re-viewed: dense weights, a row-major ``(L, N, K)`` array, are
the torch path's K-major ``(N, K, L)`` view of the same bytes; discrete weights' ``b_ptrs``
as a uint32 ``(L, 2)`` array is the int64 ``(L,)`` array of the same bytes. At trace time
the address is 0 (unknown); the handler gives XLA's buffer addresses and device.
"""

from __future__ import annotations

from typing import Any, NamedTuple

TORCH_PREFIX = "torch."


class ArrayDevice(NamedTuple):
    """The device of an array, as validation reads a torch device (type, index)."""

    type: str
    index: int | None


TRACED = ArrayDevice("cuda", None)  # every array of a traced call: one CUDA device


class ArraySpec:
    """Shape, dtype, strides, address and device: the tensor methods validation reads."""

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: str,
        strides: tuple[int, ...] | None = None,
        pointer: int = 0,
        device: ArrayDevice = TRACED,
    ) -> None:
        self.shape = tuple(shape)
        self.dtype = torch_spelling(dtype)
        self.device = device
        self._strides = strides or row_major_strides(self.shape)
        self._pointer = pointer

    def dim(self) -> int:
        return len(self.shape)

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def data_ptr(self) -> int:
        return self._pointer


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides in elements of a dense row-major array of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def numpy_name(dtype: Any) -> str | None:
    """The numpy name of a JAX/numpy dtype (``"bfloat16"``), None if it is no dtype."""
    import numpy as np

    try:
        return np.dtype(dtype).name
    except TypeError:
        return None


def torch_spelling(dtype: Any) -> Any:
    """A dtype as torch prints it (``torch.bfloat16``), for the torch path's checks and
    messages; None, torch-spelled names and non-dtypes pass unchanged (the checks refuse
    the latter by name)."""
    if dtype is None or (isinstance(dtype, str) and dtype.startswith(TORCH_PREFIX)):
        return dtype
    name = numpy_name(dtype)
    return TORCH_PREFIX + name if name else dtype


def array_spec(
    role: str,
    shape: tuple[int, ...],
    dtype: str,
    pointer: int = 0,
    device: ArrayDevice = TRACED,
) -> ArraySpec:
    """The tensor the torch path would get for a JAX array of ``role`` (module docstring)."""
    shape = tuple(shape)
    if role == "b":
        if len(shape) != 3:
            raise ValueError(
                f"b_tensor: expected a row-major (L, N, K) array, got rank {len(shape)} "
                f"shape {shape}"
            )
        l, n, k = shape
        return ArraySpec((n, k, l), dtype, (k, 1, n * k), pointer, device)
    if role == "b_ptrs" and numpy_name(dtype) == "uint32" and len(shape) == 2 and shape[1] == 2:
        return ArraySpec((shape[0],), "int64", None, pointer, device)
    return ArraySpec(shape, dtype, None, pointer, device)
