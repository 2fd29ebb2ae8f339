"""A bound op: a selected variant, loaded on its device, with the checked configuration that
chose it. The class API holds one after compile(); the wrapper keeps one per request. Both
run a call the same way: bind the call's tensors (checked against the variant, cached by
their signature), allocate the wrapper's outputs, execute."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from operator import itemgetter
from typing import Any

from .arguments import ARGUMENTS, EXECUTE, WRAPPER
from .cache import BoundedCache, tensors_key
from .call import (
    ARGUMENT_NAMES,
    CALL_CACHE_CAPACITY,
    WRAPPER_OUTPUTS,
    OpConfig,
    PreparedCall,
    allocate_outputs,
    check_offsets,
    named_tensors,
    offsets_check_enabled,
    select,
)
from .front import check_operands, check_single_group
from .contract.schema import Variant
from .runner import LoadedVariant, load_variant, run_variant
from .streams import on_stream, resolve_stream
from .validation import describe_tensors, element_types


def _getter(names: Any) -> Callable[[Any], tuple[Any, ...]]:
    """A function of a mapping (or tuple) that returns its items ``names`` (or indices), in
    order, as a tuple (one C call)."""
    names = tuple(names)
    get = itemgetter(*names)
    return get if len(names) > 1 else lambda given: (get(given),)


# execute()'s tensor arguments, in its order: the tuple the class API hands to a bound op.
EXECUTE_TENSORS = tuple(name for name in EXECUTE if ARGUMENTS[name].role in ("tensor", "output"))
# The wrapper's tensor arguments, in its order: the tuple it hands to a bound op.
WRAPPER_TENSORS = tuple(name for name in WRAPPER if ARGUMENTS[name].role in ("tensor", "output"))
# Tensor role -> the wrapper's argument name (cuDNN FE's activation_tensor for act_out).
_WRAPPER_NAMES = {**ARGUMENT_NAMES, "act_out": "activation_tensor"}


class BoundOp:
    """A variant loaded on one device for one checked configuration."""

    def __init__(self, config: OpConfig, variant: Variant, loaded: LoadedVariant) -> None:
        self.config = config
        self.variant = variant
        self.loaded = loaded
        self._calls: BoundedCache[PreparedCall] = BoundedCache(CALL_CACHE_CAPACITY)
        # the variant's tensor roles, in its order: bound by the wrapper (all but the
        # outputs it allocates; act_out's when the caller gives it), by execute() (all)
        arguments = tuple(variant.arguments)
        bound = tuple(role for role in arguments if role not in WRAPPER_OUTPUTS)
        self._wrapper_roles = {}
        for given_act_out in (False, True):
            roles = (*bound, "act_out") if given_act_out else bound
            outputs = tuple(r for r in WRAPPER_OUTPUTS if r in arguments and not (given_act_out and r == "act_out"))
            tensors = _getter(WRAPPER_TENSORS.index(_WRAPPER_NAMES[r]) for r in roles)
            self._wrapper_roles[given_act_out] = (roles, tensors, outputs)
        self.execute_roles = arguments
        # the variant's tensors from execute()'s (a tuple in EXECUTE_TENSORS' order)
        self.execute_tensors = _getter(EXECUTE_TENSORS.index(ARGUMENT_NAMES[role]) for role in arguments)

    @classmethod
    def select(
        cls, config: OpConfig, tensors: dict[str, tuple[str, Any]], sources: dict[str, str]
    ) -> BoundOp:
        """The op of the installed variant serving ``config`` and the tensors' element
        types and device (dglu.call.select), loaded on that device."""
        variant = select(config, tensors, sources)
        return cls(config, variant, load_variant(variant, tensors["a"][1].device.index))

    def run_wrapper(self, given: tuple[Any, ...], activation_given: bool, current_stream: Any) -> dict[str, Any]:
        """The wrapper's call (``given``: its tensor arguments, WRAPPER_TENSORS' values):
        bind its tensors, allocate the outputs the variant takes (act_out's only when the
        caller gives none), launch; returns the outputs allocated."""
        roles, tensors, outputs = self._wrapper_roles[activation_given]
        return self.run(roles, tensors(given), current_stream, outputs)

    def run(
        self,
        roles: tuple[str, ...],
        tensors: tuple[Any, ...],
        current_stream: Any,
        outputs: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Bind ``tensors`` (of ``roles``; checked once per call signature), allocate the
        ``outputs`` the variant takes (zeroing the accumulated ones on the stream), launch.
        Returns the outputs allocated."""
        key = tensors_key(tensors)
        call = self._calls.get((roles, outputs, key)) if key is not None else None
        if call is None:
            make = lambda: self._prepare(dict(zip(roles, tensors)), outputs)  # noqa: E731
            call = make() if key is None else self._calls.get_or_make((roles, outputs, key), make)
        device = self.loaded.device
        stream = resolve_stream(current_stream, device)
        if offsets_check_enabled() and not self.config.options.single_group:
            check_offsets(tensors[roles.index("padded_offsets")], call.problem, stream,
                          self.variant.m_aligned)
        if not call.outputs:
            run_variant(self.loaded, call.problem, stream)
            return {}
        # None resolved to torch's current stream: torch allocates on it already
        with on_stream(stream, device) if current_stream is not None else nullcontext():
            made = allocate_outputs(call.outputs, device)
        run_variant(self.loaded, call.with_outputs(made), stream, call.cleared)
        return made

    def _prepare(self, tensors: dict[str, Any], outputs: tuple[str, ...]) -> PreparedCall:
        """Check the call's tensors against the family's operand rules (their dtypes: once
        per call signature, which holds them), the variant and the device."""
        variant = self.variant
        outputs = tuple(role for role in outputs if role in variant.arguments)
        named = named_tensors(False, **tensors)
        policy = self.config.policy
        check_operands(policy, {role: named[role] for role in ("a", "b", "sfa", "sfb") if role in named})
        element_types(named)
        options = self.config.options
        check_single_group(self.config.policy, options.single_group, named["padded_offsets"][0],
                           named["padded_offsets"][1], named["a"][1].shape[0], options.m_aligned)
        problem = describe_tensors(variant, named, self.config.given_scalars(), outputs, options.flags())
        device = problem.tensors["a"].device
        if device != self.loaded.device:
            raise ValueError(
                f"a_tensor: on cuda:{device}, but the op was compiled for "
                f"cuda:{self.loaded.device} (its samples' device)"
            )
        return PreparedCall(problem, variant, outputs)
