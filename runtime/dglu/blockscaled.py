"""The block-scaled (MXFP8) call's own checks: what Hopper runs and what it refuses.

Hopper runs the seed's block-scaled contract with FP8 operands (A and B both
torch.float8_e4m3fn or both torch.float8_e5m2) and E8M0 scale factors (torch.float8_e8m0fnu),
one per 32 elements of K; D_row and D_col are FP8 with SFD_row and SFD_col. It refuses FP4
operands (no FP4 tensor cores), E4M3 scale factors (NVFP4's, with sf_vec_size 16) and amax
(produced only with the bf16/fp16 D of FP4 operands). Shapes, strides and the remaining
dtypes are the variant's manifest rules (dglu.validation). Every check runs before anything
is allocated or launched.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .arguments import refused_value
from .dtypes import ELEMENT_TYPES, FLOAT_TYPES, FP8_TYPES, element_type_of

FP4_TORCH_NAMES = ("float4_e2m1fn_x2", "uint8")  # the seed's FP4 operand dtypes
SCALE_TYPE = "e8m0"
_FP4 = (
    "no FP4 tensor cores on Hopper; Blackwell cubins (sm_100a/sm_103a) run FP4 operands. "
    "On Hopper use torch.float8_e4m3fn or torch.float8_e5m2 with E8M0 scales (MXFP8)"
)


def _torch_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


@functools.cache
def _operand_kind(a_dtype: Any) -> str:
    """"float" (the BF16 backend's), "low" (FP8 or FP4) or "other" (cached: once per dtype)."""
    element = element_type_of(a_dtype)
    if element is not None and element.name in FLOAT_TYPES:
        return "float"
    low = (element is not None and element.name in FP8_TYPES) or _torch_name(a_dtype) in FP4_TORCH_NAMES
    return "low" if low else "other"


def is_block_scaled(a_dtype: Any, *scale_arguments: Any) -> bool:
    """True when the call is block-scaled: A is FP8 or FP4, or A is of no BF16-backend dtype
    and a scale argument is given (BF16-backend A with scales: the BF16 checks refuse them)."""
    try:
        kind = _operand_kind(a_dtype)
    except TypeError:  # an unhashable non-dtype: the argument checks refuse it
        kind = "other"
    if kind == "float":
        return False
    return kind == "low" or any(argument is not None for argument in scale_arguments)


def operand_type(name: str, dtype: Any) -> str:
    """The FP8 element type of operand ``name`` (A, B or b_dtype), or raise saying what
    Hopper supports."""
    if _torch_name(dtype) in FP4_TORCH_NAMES:
        raise ValueError(f"{name}: got {dtype}; {_FP4}")
    element = element_type_of(dtype)
    if element is None or element.name not in FP8_TYPES:
        raise ValueError(
            f"{name}: block-scaled operands are torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}"
        )
    return element.name


def check_operands(tensors: Mapping[str, tuple[str, Any]], b_dtype: Any = None) -> None:
    """A (and dense B, or discrete weights' ``b_dtype``) of one FP8 dtype; every scale
    factor E8M0. ``tensors``: role -> (argument name, tensor or None)."""
    a_name, a = tensors["a"]
    a_type = operand_type(a_name, a.dtype)
    b_name, b = tensors.get("b", ("b_dtype", None))
    b_type = operand_type(b_name, b.dtype) if b is not None else (
        operand_type("b_dtype", b_dtype) if b_dtype is not None else a_type
    )
    if b_type != a_type:
        raise ValueError(
            f"{b_name}: torch.{ELEMENT_TYPES[b_type].torch_name} differs from {a_name}'s "
            f"torch.{ELEMENT_TYPES[a_type].torch_name}; A and B must share one FP8 dtype"
        )
    for role in ("sfa", "sfb", "sfd_row", "sfd_col"):
        name, tensor = tensors.get(role, (role, None))
        if tensor is not None:
            _check_scale_dtype(name, tensor.dtype)


def _check_scale_dtype(name: str, dtype: Any) -> None:
    element = element_type_of(dtype)
    if element is not None and element.name == SCALE_TYPE:
        return
    if _torch_name(dtype) == "float8_e4m3fn":
        raise ValueError(
            f"{name}: got {dtype}; E4M3 scale factors go with sf_vec_size 16 (NVFP4's FP4 operands), which "
            "Hopper cannot run; FP8 operands take torch.float8_e8m0fnu scales, one per 32 of K"
        )
    raise ValueError(f"{name}: scale factors are torch.float8_e8m0fnu (E8M0), got {dtype}")


def require(arguments: Mapping[str, Any], needed_by: str) -> None:
    """Each of ``arguments`` (name -> value) is given: ``needed_by`` needs them."""
    for name, value in arguments.items():
        if value is None:
            raise ValueError(f"{name}: required with {needed_by}, got None")


def check_operand_family(tensors: Mapping[str, tuple[str, Any]], b_dtype: Any = None) -> None:
    """The first check of a block-scaled call: each given tensor of ``tensors`` (role ->
    (argument name, tensor)) is a tensor, A and B (or ``b_dtype``) FP8 of one type (FP4
    refused whatever else is missing or wrong), the scale factors E8M0."""
    import torch

    for name, tensor in tensors.values():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    check_operands(tensors, b_dtype)


def refuse_amax(name: str, amax: Any) -> None:
    """amax has no Hopper producer (see the module docstring; dglu.arguments says why)."""
    if (why := refused_value(name, amax)) is not None:
        raise ValueError(why)


def check_vector_f32(vector_f32: bool, c_name: str, c_dtype: Any) -> None:
    """The seed refuses FP8 C with vector_f32=True (its packed-f32 path reads 16/32-bit C)."""
    element = element_type_of(c_dtype)
    if vector_f32 and element is not None and element.name in FP8_TYPES:
        raise ValueError(
            f"vector_f32: True is refused with FP8 C ({c_name} is {c_dtype}); pass vector_f32=False"
        )


def dense_b_major(b: Any) -> str:
    """"n" when dense B (N, K, L) has N contiguous (stride 1 along N, N > 1), else "k"."""
    return "n" if b.dim() >= 2 and b.shape[0] > 1 and b.stride(0) == 1 else "k"


def check_single_group(padded_offsets_name: str, padded_offsets: Any, m: int, m_aligned: int) -> None:
    """use_single_group_runtime_offsets: one expert (padded_offsets an int32 (1,) tensor,
    never read) whose rows are A's M, a multiple of m_aligned."""
    length = padded_offsets.shape[0] if getattr(padded_offsets, "dim", lambda: 0)() == 1 else None
    if length != 1:
        raise ValueError(
            f"use_single_group_runtime_offsets: needs exactly one expert (L = 1, {padded_offsets_name} "
            f"an int32 (1,) tensor), got {padded_offsets_name} of shape {tuple(padded_offsets.shape)}"
        )
    if m % m_aligned:
        raise ValueError(
            f"use_single_group_runtime_offsets: the single expert's rows are A's M = {m}, which must "
            f"be a multiple of m_aligned = {m_aligned}"
        )
