"""A kernel family's front policy: what the op's front door accepts for the family's
operands, written by the build from the family's declaration into each of its manifest
entries (docs/manifest.md, VARIANT ``front``) and read by the runtime before it selects a
variant, so that every refusal comes first and names the argument. Standard library only.

A policy names the element types of A (and B) the family runs (``operands``), the
operand dtypes no family of its architecture runs with the reason (``refused_operands``,
by torch dtype name), one rule per seed argument it constrains (``arguments``, in check
order), the accepted element types of the dtype arguments (``dtypes``), the named front
checks its operands need (``checks``, dglu.front implements them), the wrapper's
results in their order (``outputs``: the roles of the seed's return tuple) and, optionally,
the options its kernels compile in (``compiled_options``: each names the variant key field
of the same name, so the option's value selects a variant; a family that reads such an
option at run time, or accepts only its default, leaves it out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .errors import ManifestError
from .keys import KEY_FIELDS
from .records import Record

ERRORS: dict[str, type[Exception]] = {"ValueError": ValueError, "NotImplementedError": NotImplementedError}
# The named operand checks a family may ask for (dglu.front.OPERAND_CHECKS implements them).
CHECKS = (
    "dense_b_k_major",  # dense B is K-major (b_major orders discrete weights only)
    "scaled_operands",  # A and B of one type, scale factors E8M0 (before everything else)
    "b_major_from_strides",  # dense B's order is its strides' (b_major may name it)
    "single_group_offsets",  # use_single_group_runtime_offsets: one expert, M a multiple of m_aligned
    "vector_f32_needs_wide_c",  # vector_f32=True refused with an FP8 C
)
_JSON_SCALARS = (type(None), bool, int, float, str)


class ArgumentRule(Record):
    """What the front door accepts for one argument: one of ``accepted`` (compared by type
    and value; None: any value), or, when ``required``, anything but None. ``refusal``
    says why another value is refused; ``error`` is the exception type raised."""

    accepted: tuple[Any, ...] | None
    refusal: str
    required: bool = False
    error: type[Exception] = ValueError
    with_: str | None = None  # required only when this argument is given

    def accepts(self, value: Any) -> bool:
        """True when ``value`` is accepted (None is refused by a required rule only)."""
        if self.required:
            return value is not None
        return self.accepted is None or any(_same(value, v) for v in self.accepted)


class DtypeRule(Record):
    """The element types a dtype argument (a tensor's dtype, or a dtype option) accepts;
    ``refusal``: what it expects, in words (a refusal reads "NAME: expected REFUSAL, got
    X"); ``default``: the element type None stands for (None: None is refused)."""

    dtypes: tuple[str, ...]
    refusal: str
    default: str | None = None


class FrontPolicy(Record):
    """A family's front policy (see the module docstring)."""

    operands: tuple[str, ...]
    refused_operands: Mapping[str, str]
    arguments: Mapping[str, ArgumentRule]
    dtypes: Mapping[str, DtypeRule]
    checks: tuple[str, ...]
    outputs: tuple[str, ...]
    compiled_options: tuple[str, ...] = ()


def _same(value: Any, accepted: Any) -> bool:
    """``value`` equals ``accepted`` as JSON would tell them apart: True is no 1, 16.0 is 16."""
    if accepted is None or isinstance(accepted, bool):
        return value is accepted or (type(value) is bool and value == accepted)
    if isinstance(accepted, int | float):
        return type(value) in (int, float) and value == accepted
    return type(value) is type(accepted) and value == accepted


def _fail(where: str, problem: str) -> ManifestError:
    return ManifestError(f"{where}: field 'front' {problem}")


def _strings(value: Any, where: str, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(where, f"{field} must be a list of names, got {value!r}")
    if len(set(value)) != len(value):
        raise _fail(where, f"{field} repeats a name: {value!r}")
    return tuple(value)


def _text(value: Any, where: str, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{field} must be a non-empty string, got {value!r}")
    return value


def _argument_rule(name: str, data: Any, where: str) -> ArgumentRule:
    field = f"arguments.{name}"
    if not isinstance(data, dict) or not set(data) <= {"accepted", "refusal", "required", "error", "with"}:
        raise _fail(where, f"{field} must be an object of accepted, refusal, required, error, with; got {data!r}")
    error = data.get("error", "ValueError")
    if error not in ERRORS:
        raise _fail(where, f"{field}.error must be one of {sorted(ERRORS)}, got {error!r}")
    refusal = _text(data.get("refusal"), where, f"{field}.refusal")
    required = data.get("required", False)
    if type(required) is not bool or required == ("accepted" in data):
        raise _fail(where, f"{field} takes either accepted (a list of values) or required: true")
    with_ = data.get("with")
    if with_ is not None and (not required or not isinstance(with_, str)):
        raise _fail(where, f"{field}.with names the argument a required rule depends on, got {with_!r}")
    if required:
        return ArgumentRule(None, refusal, True, ERRORS[error], with_)
    accepted = data["accepted"]
    if not isinstance(accepted, list) or not accepted or not all(
        type(v) in _JSON_SCALARS and (type(v) is not float or math.isfinite(v)) for v in accepted
    ):
        raise _fail(where, f"{field}.accepted must be a non-empty list of JSON scalars, got {accepted!r}")
    return ArgumentRule(tuple(accepted), refusal, False, ERRORS[error])


def _dtype_rule(name: str, data: Any, where: str, element_types: Any) -> DtypeRule:
    field = f"dtypes.{name}"
    if not isinstance(data, dict) or not set(data) <= {"dtypes", "refusal", "default"}:
        raise _fail(where, f"{field} must be an object of dtypes, refusal, default, got {data!r}")
    dtypes = _strings(data.get("dtypes"), where, f"{field}.dtypes")
    unknown = [t for t in dtypes if t not in element_types]
    default = data.get("default")
    if default is not None and default not in dtypes:
        unknown.append(default)
    if unknown:
        raise _fail(where, f"{field} names unknown element types {unknown}")
    return DtypeRule(dtypes, _text(data.get("refusal"), where, f"{field}.refusal"), default)


def read_front(data: Any, where: str, element_types: Any) -> FrontPolicy:
    """A ``front`` field (JSON data), checked; errors start with ``where``.
    ``element_types``: the names the manifest knows (dglu.contract.element_types)."""
    fields = ("operands", "refused_operands", "arguments", "dtypes", "checks", "outputs")
    if not isinstance(data, dict) or not set(fields) <= set(data) <= {*fields, "compiled_options"}:
        shown = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise _fail(where, f"must be an object with the fields {list(fields)} (and compiled_options), got {shown}")
    operands = _strings(data["operands"], where, "operands")
    unknown = [t for t in operands if t not in element_types]
    if unknown:
        raise _fail(where, f"operands names unknown element types {unknown}")
    refused = data["refused_operands"]
    if not isinstance(refused, dict) or not all(isinstance(v, str) and v for v in refused.values()):
        raise _fail(where, f"refused_operands must map torch dtype names to reasons, got {refused!r}")
    for field in ("arguments", "dtypes"):
        if not isinstance(data[field], dict):
            raise _fail(where, f"{field} must be an object, got {data[field]!r}")
    checks = _strings(data["checks"], where, "checks")
    if unknown := [c for c in checks if c not in CHECKS]:
        raise _fail(where, f"checks names unknown checks {unknown} (known: {list(CHECKS)})")
    compiled = _strings(data.get("compiled_options", []), where, "compiled_options")
    if unknown := [name for name in compiled if KEY_FIELDS.get(name) is not bool]:
        raise _fail(where, f"compiled_options names no boolean key field: {unknown}")
    return FrontPolicy(
        operands=operands,
        refused_operands=dict(refused),
        arguments={name: _argument_rule(name, rule, where) for name, rule in data["arguments"].items()},
        dtypes={name: _dtype_rule(name, rule, where, element_types) for name, rule in data["dtypes"].items()},
        checks=checks,
        outputs=_strings(data["outputs"], where, "outputs"),
        compiled_options=compiled,
    )


def front_json(front: Mapping[str, Any]) -> dict[str, Any]:
    """A family's declared policy as the manifest writes it (a copy; lists, not tuples)."""
    def plain(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(front)
