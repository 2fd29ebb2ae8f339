"""The checks of a JAX call: the torch wrapper's, in its order, through its code.

``check_config`` checks the call's arguments the way dglu.api's wrapper does before it
selects (the family that runs A's dtype and its front policy, the policy's operand checks,
option values, weights, options, D's dtype, the required tensors; dglu.front, dglu.weights,
dglu.options), JAX dtypes spelled as torch's first; ``describe_call`` runs the wrapper's
selection step (dglu.call.select_call) and checks every array against its argument rules
(dglu.validation.describe_tensors), the same code and messages as the torch path. The
trace runs both on abstract arrays (addresses unknown); the FFI handler runs
``describe_call`` again on XLA's buffers, for its device's architecture, before the first
launch with those addresses.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from typing import Any

from ..arguments import WRAPPER
from ..call import (
    CHECKED_OPTIONS,
    OPERAND_ROLES,
    WRAPPER_SOURCES,
    check_request,
    installed_fronts,
    required,
    select_call,
)
from ..contract.front import FrontPolicy
from ..contract.records import Record
from ..contract.schema import Variant
from ..front import dtype_name, front_of_operands, require
from ..options import check_options
from ..problem import Problem
from ..validation import describe_tensors, element_type_name
from ..weights import DISCRETE, variant_b_major, weight_mode, wrapper_discrete
from .arrays import ArraySpec, operand_spelling, torch_spelling
from .config import CallConfig

# The tensors every call needs (the wrapper's, in its order) but dprob: zeros when not given.
REQUIRED = tuple(name for name in required(WRAPPER) if name != "dprob_tensor")

Arrays = Mapping[str, tuple[str, ArraySpec]]  # role -> (argument name, spec)


class DescribedCall(Record):
    """A call's variant and its Problem (scalars, views) for the arrays checked."""

    variant: Variant
    problem: Problem


def family_policy(a_name: str, a_dtype: Any, arch: str | None) -> FrontPolicy:
    """The front policy of the installed family of ``arch`` (None: any) that runs A's
    dtype (torch's spelling), refused as the torch path refuses it (dglu.front)."""
    return front_of_operands(a_name, a_dtype, arch, installed_fronts(arch))


def check_config(given: Mapping[str, Any], arrays: Arrays, arch: str | None) -> tuple[CallConfig, FrontPolicy]:
    """The torch wrapper's checks before its selection (dglu.call.check_request: its order
    and messages) of the seed-named ``given`` arguments (the arrays as their specs, the
    options as given) and ``arrays`` (role -> (name, spec) of the given ones); returns the
    configuration and the front policy of the family that runs A on ``arch``."""
    if given["a_tensor"] is None:
        require({"a_tensor": None}, "every call (the op's operands)")
    policy = family_policy("a_tensor", arrays["a"][1].dtype, arch)
    b_dtype = operand_spelling("b_dtype", given["b_dtype"])
    operands = {role: arrays[role] for role in OPERAND_ROLES if role in arrays}
    c_dtype = arrays["c"][1].dtype if "c" in arrays else None
    configure = functools.partial(_config, b_dtype=b_dtype)
    return check_request(policy, given, operands, b_dtype, c_dtype, configure, REQUIRED, "call"), policy


def _config(policy: FrontPolicy, given: Mapping[str, Any], b_dtype: Any) -> CallConfig:
    """Weights, options, dense B's order, D_row's dtype and dbias (api._wrapper_config's)."""
    n = given["n"]
    discrete_args = {"b_ptrs": True if given["b_ptrs"] is not None else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if given["b_tensor"] is not None else None, discrete_args)
    discrete = wrapper_discrete(n, b_dtype, policy) if mode == DISCRETE else None
    checked = check_options(
        acc_dtype=torch_spelling(given["acc_dtype"]),
        **{name: given[name] for name in CHECKED_OPTIONS if name != "acc_dtype"},
        policy=policy,
    )
    # a JAX array has no strides: dense B's row-major shape follows b_major (dglu.jax.arrays)
    checked = checked._replace(b_major=variant_b_major(policy, mode, checked.b_major, checked.b_major))
    d_dtype = dtype_name(policy, "d_dtype", torch_spelling(given["d_dtype"]))
    if not isinstance(given["generate_dbias"], bool):
        raise ValueError(f"generate_dbias: expected a bool, got {given['generate_dbias']!r}")
    return CallConfig(mode, discrete, checked, d_dtype, given["generate_dbias"])


def describe_call(
    config: CallConfig,
    policy: FrontPolicy,
    arrays: Arrays,
    arch: str | None,
    arch_source: str,
    later: Collection[str],
) -> DescribedCall:
    """The selection step (dglu.call.select_call) for ``config`` with ``policy`` (the
    family's), the arrays' element types and ``arch`` (None: any installed architecture;
    ``arch_source`` names it), then check ``arrays`` (role -> (argument name, spec))
    against the variant; ``later``: the outputs the custom call creates."""
    types = {role: element_type_name(name, spec.dtype) for role, (name, spec) in arrays.items()}
    sources = {**WRAPPER_SOURCES, "arch": arch_source}
    variant = select_call(config.op_config(policy), types, arrays, arch, sources)
    problem = describe_tensors(variant, arrays, config.given_scalars(), later, config.options.flags())
    return DescribedCall(variant, problem)
