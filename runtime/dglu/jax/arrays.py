"""JAX arrays and XLA buffers as the tensors dglu.validation checks.

JAX arrays are row-major and dense; ``array_spec`` presents one to the torch path's
validation as a tensor of its shape with contiguous strides, its dtype spelled as torch
prints it (``torch.bfloat16``: the element type names and the messages are the torch
path's). Some arguments are the torch path's tensors re-viewed over the same bytes:

- dense weights: a row-major ``(L, N, K)`` array (``b_major="k"``) is the torch path's
  K-major ``(N, K, L)`` view; with ``b_major="n"`` (block-scaled families) a row-major
  ``(L, K, N)`` array is its N-major ``(N, K, L)`` view;
- discrete weights' ``b_ptrs`` / ``sfb_ptrs`` as a uint32 ``(L, 2)`` array are the int64
  ``(L,)`` array of the same bytes;
- scale factors (sfa, sfb, sfd_row, sfd_col) are passed as the seed's permuted storage
  itself: a row-major ``(L, ceil(rows/128), ceil(cols/128), 32, 4, 4)`` array of the scale
  dtype (the bytes the kernels read), which is the seed's logical
  ``(32, 4, ceil(rows/128), 4, ceil(cols/128), L)`` tensor with its permuted strides;
- FP4 operands (NVFP4, Blackwell): JAX has no dtype of two FP4 values a byte, so A and B
  are uint8 arrays of packed pairs (low nibble first), the torch path's
  ``torch.float4_e2m1fn_x2`` of the same shape.

At trace time the address is 0 (unknown); the handler gives XLA's buffer addresses and
device.
"""

from __future__ import annotations

import math
from typing import Any

from ..call import ARGUMENT_NAMES
from ..contract.records import Record

TORCH_PREFIX = "torch."
SCALE_FACTOR_ROLES = ("sfa", "sfb", "sfd_row", "sfd_col")
SF_ATOM = (32, 4, 4)  # one 512-byte atom: 128 rows (32 x 4) by 4 scale blocks
SF_ATOM_BYTES = math.prod(SF_ATOM)
SF_STORAGE_TO_SEED = (3, 4, 1, 5, 2, 0)  # the seed's permute of its storage
SEED_TO_SF_STORAGE = (5, 2, 4, 0, 1, 3)  # its inverse: jnp.transpose(seed_view, this)
POINTER_ROLES = ("b_ptrs", "sfb_ptrs")
OPERAND_ROLES = ("a", "b")  # uint8 here: FP4 pairs
FP4_PAIRS = "torch.float4_e2m1fn_x2"


class ArrayDevice(Record):
    """The device of an array, as validation reads a torch device (type, index)."""

    type: str
    index: int | None


TRACED = ArrayDevice("cuda", None)  # every array of a traced call: one CUDA device


class ArraySpec:
    """Shape, dtype, strides, address and device: the tensor methods validation reads."""

    shown_as = "JAX array"  # how a refusal names a value of this type (dglu.front.shown)

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


class TorchSpelled(str):
    """A dtype's torch name (``torch.bfloat16``) that prints as a torch dtype does, repr
    included, so that the torch path's messages read the same."""

    __repr__ = str.__str__


def torch_spelling(dtype: Any) -> Any:
    """A dtype as torch prints it (``torch.bfloat16``), for the torch path's checks and
    messages; None and non-dtypes pass unchanged (the checks refuse the latter by name)."""
    if dtype is None or isinstance(dtype, TorchSpelled):
        return dtype
    if isinstance(dtype, str) and dtype.startswith(TORCH_PREFIX):
        return TorchSpelled(dtype)
    name = numpy_name(dtype)
    return TorchSpelled(TORCH_PREFIX + name) if name else dtype


def operand_spelling(name: str, dtype: Any) -> Any:
    """The torch spelling of operand ``name``'s dtype (A, B, or discrete weights'
    ``b_dtype``): uint8 is FP4 pairs (torch.float4_e2m1fn_x2); JAX's unpacked
    float4_e2m1fn is refused, saying how to pass FP4."""
    spelled = torch_spelling(dtype)
    if spelled == "torch.uint8":
        return TorchSpelled(FP4_PAIRS)
    if spelled == "torch.float4_e2m1fn":
        raise ValueError(
            f"{name}: got {spelled.removeprefix(TORCH_PREFIX)} (one FP4 value an element); pass FP4 "
            "operands as uint8 arrays of packed pairs, low nibble first (the torch path's "
            "torch.float4_e2m1fn_x2, half the columns), e.g. jax.lax.bitcast_convert_type of an "
            "(..., 2) float4_e2m1fn array to jnp.uint8"
        )
    return spelled


def _scale_factor_spec(role: str, shape: tuple[int, ...], dtype: Any, pointer: int, device: ArrayDevice) -> ArraySpec:
    if len(shape) != 6 or shape[3:] != SF_ATOM:
        raise ValueError(
            f"{ARGUMENT_NAMES[role]}: expected the seed's scale-factor storage, a row-major "
            f"(L, ceil(rows/128), ceil(cols/128), 32, 4, 4) array, got shape {shape}; from the "
            f"seed's (32, 4, ceil(rows/128), 4, ceil(cols/128), L) view pass "
            f"jnp.transpose(view, {SEED_TO_SF_STORAGE})"
        )
    row_atoms, col_atoms = shape[1:3]
    pitch = SF_ATOM_BYTES * col_atoms  # bytes per 128 rows
    seed_shape = tuple(shape[axis] for axis in SF_STORAGE_TO_SEED)
    return ArraySpec(seed_shape, dtype, (16, 4, pitch, 1, SF_ATOM_BYTES, row_atoms * pitch), pointer, device)


def array_shape(role: str, seed_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the JAX array of output ``role`` whose torch-path tensor has
    ``seed_shape`` (scale factors: their storage; others: the same shape)."""
    if role in SCALE_FACTOR_ROLES:
        return tuple(seed_shape[axis] for axis in SEED_TO_SF_STORAGE)
    return tuple(seed_shape)


def array_spec(
    role: str,
    shape: tuple[int, ...],
    dtype: Any,
    pointer: int = 0,
    device: ArrayDevice = TRACED,
    b_major: str = "k",
) -> ArraySpec:
    """The tensor the torch path would get for a JAX array of ``role`` (module docstring);
    ``b_major``: dense B's order, which its row-major shape follows."""
    shape = tuple(shape)
    if role in OPERAND_ROLES:
        dtype = operand_spelling(ARGUMENT_NAMES[role], dtype)
    if role == "b":
        if len(shape) != 3:
            order = "(L, K, N)" if b_major == "n" else "(L, N, K)"
            raise ValueError(f"b_tensor: expected a row-major {order} array, got rank {len(shape)} shape {shape}")
        if b_major == "n":
            l, k, n = shape
            return ArraySpec((n, k, l), dtype, (1, n, n * k), pointer, device)
        l, n, k = shape
        return ArraySpec((n, k, l), dtype, (k, 1, n * k), pointer, device)
    if role in SCALE_FACTOR_ROLES:
        return _scale_factor_spec(role, shape, dtype, pointer, device)
    if role in POINTER_ROLES and numpy_name(dtype) == "uint32" and len(shape) == 2 and shape[1] == 2:
        return ArraySpec((shape[0],), "int64", None, pointer, device)
    return ArraySpec(shape, dtype, None, pointer, device)
