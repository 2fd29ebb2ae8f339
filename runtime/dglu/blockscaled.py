"""The block-scaled call's own checks: what each architecture runs and what it refuses.

MXFP8: FP8 operands (A and B both torch.float8_e4m3fn or both torch.float8_e5m2) with E8M0
scale factors (torch.float8_e8m0fnu), one per 32 elements of K; D_row and D_col are FP8 with
SFD_row and SFD_col. NVFP4: FP4 operands (torch.float4_e2m1fn_x2, two values a byte) with
E4M3 scale factors (torch.float8_e4m3fn), one per 16 elements of K; D bf16 (or fp16/fp32) and
amax. FP4 operands are accepted where an installed variant of the device's architecture takes
them (``fp4_runs_on``: the manifest's data, Blackwell's sm100_blockscaled variants) and refused
elsewhere (Hopper: no FP4 tensor cores), naming the argument. Hopper also refuses amax (its
only producer is NVFP4's 16-bit D). Shapes, strides and the remaining dtypes are the
variant's manifest rules (dglu.validation). Every check runs before anything is allocated
or launched.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .arguments import refused_value
from .dtypes import ELEMENT_TYPES, FLOAT_TYPES, FP8_TYPES, element_type_of

FP4_TORCH_NAMES = ("float4_e2m1fn_x2", "uint8")  # the seed's FP4 operand dtypes
FP4_TYPE = "e2m1x2"  # the manifest's FP4 operand type (torch.float4_e2m1fn_x2)
SCALE_TYPE = "e8m0"  # MXFP8's scale factors
FP4_SCALE_TYPE = "e4m3"  # NVFP4's
_FP4 = (
    "no FP4 tensor cores on Hopper; Blackwell cubins (sm_100a/sm_103a) run FP4 operands. "
    "On Hopper use torch.float8_e4m3fn or torch.float8_e5m2 with E8M0 scales (MXFP8)"
)


def fp4_runs_on(device: Any) -> bool:
    """True when an installed variant of the architecture of ``device`` (a torch device)
    takes FP4 operands; False on a CPU device, or where none does (Hopper)."""
    return getattr(device, "type", None) == "cuda" and fp4_runs_on_ordinal(device.index or 0)


def fp4_runs_on_ordinal(ordinal: int) -> bool:
    """fp4_runs_on of CUDA device ``ordinal``: the manifest's data decides."""
    from .driver import device_info
    from .manifest import installed_variants
    from .selection import arch_for_capability

    archs = {entry.key.arch for entry in installed_variants() if entry.key.ab_dtype == FP4_TYPE}
    return bool(archs) and arch_for_capability(device_info(ordinal).capability) in archs


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


def operand_type(name: str, dtype: Any, fp4: bool = False) -> str:
    """The FP8 (or, where ``fp4``: the device runs FP4 operands, FP4) element type of
    operand ``name`` (A, B or b_dtype), or raise saying what the device supports."""
    if _torch_name(dtype) in FP4_TORCH_NAMES:
        if fp4 and _torch_name(dtype) == "float4_e2m1fn_x2":
            return FP4_TYPE
        if fp4:
            raise ValueError(f"{name}: got {dtype}; FP4 operands are torch.float4_e2m1fn_x2 (view uint8 storage as it)")
        raise ValueError(f"{name}: got {dtype}; {_FP4}")
    element = element_type_of(dtype)
    if element is None or element.name not in FP8_TYPES:
        raise ValueError(
            f"{name}: block-scaled operands are torch.float8_e4m3fn or torch.float8_e5m2, got {dtype}"
        )
    return element.name


def check_operands(tensors: Mapping[str, tuple[str, Any]], b_dtype: Any = None, fp4: bool = False) -> str:
    """A (and dense B, or discrete weights' ``b_dtype``) of one FP8 dtype, or (``fp4``:
    the device runs them) of FP4; every scale factor E8M0 (FP8) or E4M3 (FP4). ``tensors``:
    role -> (argument name, tensor or None). Returns A's element type."""
    a_name, a = tensors["a"]
    a_type = operand_type(a_name, a.dtype, fp4)
    b_name, b = tensors.get("b", ("b_dtype", None))
    b_type = operand_type(b_name, b.dtype, fp4) if b is not None else (
        operand_type("b_dtype", b_dtype, fp4) if b_dtype is not None else a_type
    )
    if b_type != a_type:
        raise ValueError(
            f"{b_name}: torch.{ELEMENT_TYPES[b_type].torch_name} differs from {a_name}'s "
            f"torch.{ELEMENT_TYPES[a_type].torch_name}; A and B must share one dtype"
        )
    for role in ("sfa", "sfb", "sfd_row", "sfd_col"):
        name, tensor = tensors.get(role, (role, None))
        if tensor is not None:
            _check_scale_dtype(name, tensor.dtype, a_type == FP4_TYPE)
    return a_type


def _check_scale_dtype(name: str, dtype: Any, fp4: bool = False) -> None:
    element = element_type_of(dtype)
    if fp4:
        if element is None or element.name != FP4_SCALE_TYPE:
            raise ValueError(
                f"{name}: FP4 operands take torch.float8_e4m3fn scale factors, one per 16 elements "
                f"(NVFP4; E8M0 scales per 32 with FP4, MXFP4, are not built), got {dtype}"
            )
        return
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


def check_operand_family(tensors: Mapping[str, tuple[str, Any]], b_dtype: Any = None) -> str:
    """The first check of a block-scaled call: each given tensor of ``tensors`` (role ->
    (argument name, tensor)) is a tensor, A and B (or ``b_dtype``) of one type, FP8, or FP4
    where A's device runs it (else refused whatever else is missing or wrong), the scale
    factors of their recipe. Returns A's element type."""
    import torch

    for name, tensor in tensors.values():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    a = tensors["a"][1]
    fp4 = _torch_name(a.dtype) in FP4_TORCH_NAMES and fp4_runs_on(a.device)
    return check_operands(tensors, b_dtype, fp4)


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
