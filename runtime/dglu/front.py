"""The front door's family checks: find the installed family that runs a call's operands
on its device, and check the call's arguments against that family's front policy (the
data its manifest entries carry, dglu.contract.front), before anything else is checked,
selected or allocated. Nothing here knows a family: each policy says what its family
accepts, requires and refuses, and names the operand checks it needs (OPERAND_CHECKS).

Stages, in the order the frontends run them (docs/frontends.md): ``front_of_operands`` (A's
dtype on the device's architecture), ``check_operands`` (the policy's operand checks),
``check_values`` (every rule's accepted values, in the policy's order), then, after the
options, ``check_required`` (the tensors the family needs).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from .contract.front import ArgumentRule, DtypeRule, FrontPolicy
from .dtypes import ELEMENT_TYPES, FP8_TYPES, element_type_of
from .errors import VariantNotFoundError
from .tuple_dict import TupleDict
from .validation import element_type_name

Given = Mapping[str, Any]  # seed argument name -> value


def _torch_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_names(types: Any) -> str:
    return ", ".join(f"torch.{ELEMENT_TYPES[t].torch_name}" for t in types)


def front_of_operands(name: str, dtype: Any, arch: str | None, fronts: Mapping[str, FrontPolicy]) -> FrontPolicy:
    """The front policy of the family of ``arch`` that runs operands of ``dtype`` (argument
    ``name``'s) among ``fronts`` (A/B element type -> policy: the installed families',
    dglu.call.installed_fronts); else refuse, with the reason a family of the architecture
    gives for that dtype (e.g. no FP4 tensor cores on Hopper) or the families installed."""
    element = element_type_of(dtype)
    if element is not None and element.name in fronts:
        return fronts[element.name]
    for front in fronts.values():
        if (why := front.refused_operands.get(_torch_name(dtype))) is not None:
            raise ValueError(f"{name}: got {dtype}; {why}")
    element_type_name(name, dtype)  # a dtype dglu names no element type for: refused as such
    where = f"on {arch}" if arch else "installed"
    runs = _torch_names(fronts) if fronts else "no operands"
    build = f" --arch {arch}" if arch else ""
    raise VariantNotFoundError(
        f"{name}: dtype {dtype}: no family {where} runs it (the installed families run {runs}); "
        f"`dglu-build add{build} --ab-dtype {element.name if element else '...'} ...` builds the "
        "variants of a family that does, where dglu_build has one"
    )


def require(arguments: Mapping[str, Any], needed_by: str) -> None:
    """Each of ``arguments`` (name -> value) is given: ``needed_by`` needs them."""
    for name, value in arguments.items():
        if value is None:
            raise ValueError(f"{name}: required with {needed_by}, got None")


def shown(value: Any) -> str:
    """A refused value in a message: repr for scalars, else its type (a frontend's tensor
    type may say how it is named: ``shown_as``)."""
    if value is None or isinstance(value, str | int | float | bool):
        return repr(value)
    return f"a {getattr(type(value), 'shown_as', type(value).__name__)}"


def _refuse(name: str, rule: ArgumentRule, value: Any) -> Exception:
    if rule.required:
        return rule.error(f"{name}: required with {rule.refusal}, got None")
    return rule.error(f"{name}: got {shown(value)}; {rule.refusal}")


def check_values(policy: FrontPolicy, given: Given, names: Mapping[str, str] | None = None) -> None:
    """Each argument of ``given`` that a value rule of ``policy`` constrains takes an
    accepted value (in the policy's order). ``names``: seed name -> the frontend's name
    (the class API's sample_*), for the messages."""
    for name, rule in policy.arguments.items():
        if not rule.required and name in given and not rule.accepts(given[name]):
            raise _refuse((names or {}).get(name, name), rule, given[name])


def check_required(policy: FrontPolicy, given: Given, names: Mapping[str, str] | None = None) -> None:
    """Each argument of ``given`` that ``policy`` requires is given (a rule ``with_`` an
    argument only when that argument is given)."""
    for name, rule in policy.arguments.items():
        if rule.required and name in given and given[name] is None and (
            rule.with_ is None or given.get(rule.with_) is not None
        ):
            raise _refuse((names or {}).get(name, name), rule, None)


def dtype_name(policy: FrontPolicy, name: str, dtype: Any, shown_name: str | None = None) -> str:
    """The element type of dtype argument ``name`` (a dtype, or None: the rule's default)
    that ``policy`` accepts; else refuse naming the accepted ones."""
    rule: DtypeRule = policy.dtypes[name]
    element = element_type_of(dtype) if dtype is not None else None
    if dtype is None and rule.default is not None:
        return rule.default
    if element is None or element.name not in rule.dtypes:
        raise ValueError(f"{shown_name or name}: expected {rule.refusal}, got {dtype!r}")
    return element.name


def tensor_dtype(policy: FrontPolicy, role_name: str, rule_name: str, tensor: Any) -> str:
    """The element type of a tensor whose dtype ``policy`` constrains (rule ``rule_name``,
    e.g. c_tensor), else refuse as the op's contract says it."""
    rule = policy.dtypes[rule_name]
    element = element_type_of(tensor.dtype)
    if element is None or element.name not in rule.dtypes:
        raise ValueError(
            f"{role_name}: dtype {tensor.dtype} is not accepted; expected one of {_torch_names(rule.dtypes)}"
        )
    return element.name


def operand_type(policy: FrontPolicy, name: str, dtype: Any) -> str:
    """The element type of operand ``name`` (A, B or b_dtype) that ``policy`` runs, else
    refuse with the policy's reason for that dtype or the types it runs."""
    if (why := policy.refused_operands.get(_torch_name(dtype))) is not None:
        raise ValueError(f"{name}: got {dtype}; {why}")
    element = element_type_of(dtype)
    if element is None or element.name not in policy.operands:
        raise ValueError(f"{name}: expected one of {_torch_names(policy.operands)}, got {dtype}")
    return element.name


def _is_tensor(value: Any) -> bool:
    """A tensor whose dtype is a torch dtype: a torch.Tensor, or a frontend's view of one
    (dglu.jax's ArraySpec of a JAX array)."""
    return str(getattr(value, "dtype", "")).startswith("torch.") and hasattr(value, "shape")


# The named operand checks a policy may ask for (dglu.contract.front.CHECKS), each given the
# policy and the call's tensors by role: role -> (argument name, tensor); ``b_dtype``.
def _scaled_operands(policy: FrontPolicy, tensors: Mapping[str, tuple[str, Any]], b_dtype: Any) -> None:
    """A and B (or discrete weights' ``b_dtype``) of one operand type; the scale factors of
    the policy's ``scale_factors`` dtypes."""
    for name, tensor in tensors.values():
        if not _is_tensor(tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    a_name, a = tensors["a"]
    a_type = operand_type(policy, a_name, a.dtype)
    b_name, b = tensors.get("b", ("b_dtype", None))
    if b is not None:
        b_type = operand_type(policy, b_name, b.dtype)
    else:
        b_type = operand_type(policy, "b_dtype", b_dtype) if b_dtype is not None else a_type
    if b_type != a_type:
        raise ValueError(
            f"{b_name}: torch.{ELEMENT_TYPES[b_type].torch_name} differs from {a_name}'s "
            f"torch.{ELEMENT_TYPES[a_type].torch_name}; A and B must share one dtype"
        )
    for role in ("sfa", "sfb", "sfd_row", "sfd_col"):
        name, tensor = tensors.get(role, (role, None))
        if tensor is not None:
            dtype_name(policy, "scale_factors", tensor.dtype, name)


OPERAND_CHECKS: dict[str, Callable[[FrontPolicy, Mapping[str, tuple[str, Any]], Any], None]] = {
    "scaled_operands": _scaled_operands,
}


def check_operands(policy: FrontPolicy, tensors: Mapping[str, tuple[str, Any]], b_dtype: Any = None) -> None:
    """The policy's operand checks (the first checks after the family's: before options)."""
    for check in policy.checks:
        if check in OPERAND_CHECKS:
            OPERAND_CHECKS[check](policy, tensors, b_dtype)


def vector_f32_needs_wide_c(policy: FrontPolicy, vector_f32: Any, c_name: str, c_dtype: Any) -> None:
    """The seed refuses FP8 C with vector_f32=True (its packed-f32 path reads 16/32-bit C)."""
    element = element_type_of(c_dtype)
    if "vector_f32_needs_wide_c" in policy.checks and vector_f32 is True and element is not None and (
        element.name in FP8_TYPES
    ):
        raise ValueError(
            f"vector_f32: True is refused with FP8 C ({c_name} is {c_dtype}); pass vector_f32=False"
        )


def check_single_group(
    policy: FrontPolicy, single_group: bool, offsets_name: str, padded_offsets: Any, m: int, m_aligned: int
) -> None:
    """use_single_group_runtime_offsets (check ``single_group_offsets``): one expert
    (padded_offsets an int32 (1,) tensor, never read) whose rows are A's M, a multiple of
    m_aligned. A shape check: run by the selection step (the expert count is in the key)
    and again when the call's tensors are bound."""
    if not single_group or "single_group_offsets" not in policy.checks:
        return
    length = padded_offsets.shape[0] if getattr(padded_offsets, "dim", lambda: 0)() == 1 else None
    if length != 1:
        raise ValueError(
            f"use_single_group_runtime_offsets: needs exactly one expert (L = 1, {offsets_name} "
            f"an int32 (1,) tensor), got {offsets_name} of shape {tuple(padded_offsets.shape)}"
        )
    if m % m_aligned:
        raise ValueError(
            f"use_single_group_runtime_offsets: the single expert's rows are A's M = {m}, which must "
            f"be a multiple of m_aligned = {m_aligned}"
        )


def outputs(policy: FrontPolicy, made: Mapping[str, Any]) -> TupleDict:
    """The wrapper's results in the policy's order, by argument name: each role's tensor in
    ``made`` (the outputs allocated and the caller's accumulated ones), else None."""
    names, roles = _output_names(policy.outputs)
    return TupleDict(zip(names, map(made.get, roles)))


@functools.cache
def _output_names(roles: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The results' argument names and their roles."""
    return tuple(f"{role}_tensor" for role in roles), roles
