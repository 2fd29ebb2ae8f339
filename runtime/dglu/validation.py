"""Check the op's tensors against the chosen variant's ARGUMENT rules and describe the call.

Order of the checks, all before anything is allocated or launched:
1. (``element_types``, before the selection) each argument is a torch.Tensor of an element
   type dglu names;
2. (``describe_tensors``, against the variant) each argument's rank and dtype; its shape
   binds the scalars it names first (after those the call gives itself: discrete weights'
   n, k, l); the derived scalars; the variant's limits, naming the argument a scalar came
   from; every shape, stride (dimensions of size > 1) and data pointer alignment;
3. every tensor lives on the same CUDA device.
``check_offset_values`` checks padded_offsets' values once they are on the host. Every
rule comes from the manifest (docs/manifest.md): nothing here knows the kernels.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .contract.expressions import Expr
from .contract.schema import Argument, Variant, ViewRule
from .dtypes import ELEMENT_TYPES, element_type_of
from .problem import Problem, TensorView

TensorArgs = Mapping[str, tuple[str, Any]]  # role -> (argument name, tensor)
GivenScalars = Mapping[str, tuple[int, str]]  # scalar -> (value, the argument that gave it)


def _torch_names(dtypes: Sequence[str]) -> str:
    return ", ".join(f"torch.{ELEMENT_TYPES[t].torch_name}" for t in dtypes)


def shape_text(exprs: Sequence[Expr]) -> str:
    """A rule's shape for messages, e.g. ``(M, 2N, 1)``."""
    return "(" + ", ".join(e.text() for e in exprs) + (",)" if len(exprs) == 1 else ")")


def element_types(args: TensorArgs) -> dict[str, str]:
    """Role -> element type name of each argument; refuse non-tensors and unknown dtypes."""
    import torch

    types = {}
    for role, (name, tensor) in args.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        types[role] = element_type_name(name, tensor.dtype)
    return types


def element_type_name(name: str, dtype: Any) -> str:
    """The element type name of argument ``name``'s dtype (a torch dtype, or anything that
    prints as one, e.g. "torch.bfloat16"); refuse dtypes dglu names no element type for."""
    element = element_type_of(dtype)
    if element is None:
        raise ValueError(
            f"{name}: dtype {dtype} is not accepted; expected one of "
            f"{_torch_names(list(ELEMENT_TYPES))}"
        )
    return element.name


def _seed_shape(tensor: Any, rule: Argument) -> tuple[int, ...]:
    """The tensor's shape at the rule's rank (a dropped trailing 1 put back)."""
    shape = tuple(tensor.shape)
    return shape + (1,) if rule.rank_drop and len(shape) + 1 == len(rule.shape) else shape


def _check_rank_and_dtype(name: str, tensor: Any, rule: Argument, variant: Variant) -> None:
    ranks = (len(rule.shape) - 1, len(rule.shape)) if rule.rank_drop else (len(rule.shape),)
    if tensor.dim() not in ranks:
        raise ValueError(
            f"{name}: expected shape {shape_text(rule.shape)}, got rank {tensor.dim()} "
            f"shape {tuple(tensor.shape)}"
        )
    if element_type_of(tensor.dtype).name not in rule.dtypes:
        raise ValueError(
            f"{name}: dtype {tensor.dtype} is not accepted; expected one of "
            f"{_torch_names(rule.dtypes)} (variant {variant.name})"
        )


def _bind(name: str, tensor: Any, rule: Argument, variant: Variant, scalars: dict, origins: dict) -> None:
    """Bind every unbound base scalar the rule's shape names bare, from this tensor."""
    for size, expr in zip(_seed_shape(tensor, rule), rule.shape, strict=True):
        if expr.factor == 1 and len(expr.names) == 1:
            scalar = expr.names[0]
            if scalar not in scalars and scalar not in variant.scalars:
                scalars[scalar] = size
                origins[scalar] = name


def _derive(variant: Variant, scalars: dict[str, int]) -> None:
    for name, expr in variant.scalars.items():
        unbound = [n for n in expr.names if n not in scalars]
        if unbound:
            raise ValueError(
                f"variant {variant.name}: scalar {name} = {expr.text()} needs {unbound}, which "
                "no argument of the call gives"
            )
        scalars[name] = expr.value(scalars)


def _check_limits(variant: Variant, scalars: Mapping[str, int], origins: Mapping[str, str]) -> None:
    for scalar, limit in variant.limits.items():
        if scalar not in scalars:
            continue
        value = scalars[scalar]
        problems = [
            f"must be at least {limit.min}" if limit.min is not None and value < limit.min else "",
            f"must be at most {limit.max}" if limit.max is not None and value > limit.max else "",
            f"must be a multiple of {limit.multiple_of}"
            if limit.multiple_of is not None and value % limit.multiple_of
            else "",
        ]
        problems = [p for p in problems if p]
        if problems:
            source = origins.get(scalar, f"variant {variant.name}'s scalars")
            raise ValueError(
                f"{source}: {scalar.upper()} = {value} {' and '.join(problems)} ({limit.why})"
            )


def _check_layout(name: str, tensor: Any, rule: Argument, problem: Problem) -> None:
    expected = tuple(e.value(problem.scalars) for e in rule.shape)
    actual = tuple(tensor.shape)
    if _seed_shape(tensor, rule) != expected:
        raise ValueError(
            f"{name}: shape {actual} does not match {shape_text(rule.shape)} = {expected} "
            f"with {problem.explain()}" + (f"; allocate it as {rule.allocation}" if rule.allocation else "")
        )
    strides = tuple(e.value(problem.scalars) for e in rule.strides)
    for axis, (size, stride) in enumerate(zip(actual, tensor.stride(), strict=False)):
        if size > 1 and stride != strides[axis]:
            remedy = rule.allocation or "a contiguous tensor in the seed layout"
            raise ValueError(
                f"{name}: strides {tuple(tensor.stride())} differ from the required "
                f"{strides[:len(actual)]} (dimension {axis}); pass {remedy}"
            )
    _check_alignment(name, tensor, rule)


def _check_alignment(name: str, tensor: Any, rule: Argument) -> None:
    if tensor.data_ptr() % rule.align:
        raise ValueError(
            f"{name}: data pointer {tensor.data_ptr():#x} is not {rule.align}-byte aligned"
        )


def moved_views(
    variant: Variant, problem: Problem, args: TensorArgs, moved: Collection[str]
) -> dict[str, TensorView]:
    """The views of the arguments ``moved`` (roles of ``args``) and of the views derived from
    them, for tensors with the shapes, strides and dtypes ``problem`` was described with at
    other addresses: what describe_tensors checks of an address checked (alignment, every
    tensor of ``args`` on one CUDA device)."""
    for role in moved:
        _check_alignment(*args[role], variant.arguments[role])
    _check_devices(args)
    views = {role: problem.tensors[role]._replace(pointer=args[role][1].data_ptr()) for role in moved}
    views.update(derived_views(variant, views, problem.scalars))
    return views


def _check_devices(args: TensorArgs) -> None:
    first_name, first = next(iter(args.values()))
    if first.device.type != "cuda":
        raise ValueError(f"{first_name}: expected a CUDA tensor, got one on {first.device}")
    for name, tensor in args.values():
        if tensor.device != first.device:
            raise ValueError(
                f"{name}: on {tensor.device}, but {first_name} is on {first.device}; "
                "all tensors must share one CUDA device"
            )


def describe_tensors(
    variant: Variant,
    args: TensorArgs,
    given: GivenScalars | None = None,
    later: Collection[str] = (),
    flags: Mapping[str, int] | None = None,
) -> Problem:
    """Check ``args`` against ``variant``'s arguments (see the module docstring) and return
    the call's Problem. ``given``: scalars the call fixes itself; ``later``: arguments the
    runtime allocates after the checks (the wrapper's outputs); ``flags``: the values of
    the variant's flags (docs/manifest.md), from the call's options."""
    unknown = [name for role, (name, _) in args.items() if role not in variant.arguments]
    if unknown:
        raise ValueError(f"{unknown[0]}: variant {variant.name} takes no such argument")
    missing = [r for r in variant.arguments if r not in args and r not in later]
    if missing:
        raise ValueError(f"{missing[0]}: required by variant {variant.name}, got None")
    scalars = {name: value for name, (value, _) in (given or {}).items()}
    origins = {name: source for name, (_, source) in (given or {}).items()}
    missing_flags = [flag for flag in variant.flags if flag not in (flags or {})]
    if missing_flags:
        raise ValueError(f"{missing_flags[0]}: variant {variant.name} needs this option's value")
    scalars.update({flag: int((flags or {})[flag]) for flag in variant.flags})
    checked = [(args[role], rule) for role, rule in variant.arguments.items() if role in args]
    for (name, tensor), rule in checked:
        _check_rank_and_dtype(name, tensor, rule, variant)
        _bind(name, tensor, rule, variant, scalars, origins)
    _derive(variant, scalars)
    _check_limits(variant, scalars, origins)
    problem = Problem(scalars=scalars, origins=origins, tensors={})
    for (name, tensor), rule in checked:
        _check_layout(name, tensor, rule, problem)
    _check_devices(args)
    views = {
        role: view_of(args[role][1], rule, scalars)
        for role, rule in variant.arguments.items()
        if role in args
    }
    views.update(derived_views(variant, views, scalars))
    return Problem(scalars=scalars, origins=origins, tensors=views)


def view_of(tensor: Any, rule: Argument, scalars: Mapping[str, int]) -> TensorView:
    """A tensor as the kernels see it: the rule's seed-rank shape and strides."""
    return TensorView(
        device=tensor.device.index,
        pointer=tensor.data_ptr(),
        shape=tuple(e.value(scalars) for e in rule.shape),
        strides=tuple(e.value(scalars) for e in rule.strides),
        dtype=element_type_of(tensor.dtype).name,
    )


def _derived_view(rule: ViewRule, of: TensorView, scalars: Mapping[str, int]) -> TensorView:
    return TensorView(
        device=of.device,
        pointer=of.pointer - of.pointer % rule.address_align_down,
        shape=tuple(e.value(scalars) for e in rule.shape),
        strides=tuple(e.value(scalars) for e in rule.strides),
        dtype=rule.dtype,
    )


def derived_views(
    variant: Variant, views: Mapping[str, TensorView], scalars: Mapping[str, int]
) -> dict[str, TensorView]:
    """The variant's VIEWs of the tensors in ``views``, the call's arguments (docs/manifest.md,
    VIEW_RULE)."""
    return {
        name: _derived_view(rule, views[rule.of], scalars)
        for name, rule in variant.views.items()
        if rule.of in views
    }


def check_offset_values(name: str, values: Sequence[int], m: int, m_aligned: int) -> int:
    """Check cumulative expert end offsets against M; return valid_m (the last one)."""
    previous = 0
    for index, value in enumerate(values):
        if value % m_aligned:
            raise ValueError(f"{name}: entry {index} = {value} is not a multiple of {m_aligned}")
        if value < previous:
            before = f"entry {index - 1} = {previous}" if index else "0"
            raise ValueError(
                f"{name}: entry {index} = {value} is smaller than {before}; "
                "offsets are cumulative expert ends and never decrease"
            )
        previous = value
    if previous > m:
        raise ValueError(
            f"{name}: the last entry (valid_m = {previous}) exceeds M = {m}, "
            "the number of rows of A"
        )
    return previous
