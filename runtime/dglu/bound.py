"""A bound op: a selected variant, loaded on its device, with the checked configuration that
chose it. The class API holds one after compile(); the wrapper keeps one per request. Both
run a call the same way: bind the call's tensors (checked against the variant, cached by
their signature), allocate the wrapper's outputs, execute.

Pre-bound calls: each way of calling a bound op (a Site: execute(), the wrapper with or
without a caller's act_out tensor) remembers the signature of its last call, the tensors'
addresses, shapes, strides and dtypes, which of the frontend's tensor arguments were None
and the stream argument, with what it resolved to. A call of that very signature is
launched from it after one comparison per tensor attribute (no key is hashed, nothing is
looked up); any difference takes the full path, whose checks and caches it skips only
because they passed for that signature. On the full path, tensors of the last call's
shapes, strides and dtypes at other addresses (a training step's new activations) have
only their addresses checked (alignment, device) and their launch parameters patched
from the last call's (dglu.runner.derive)."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter, itemgetter
from typing import Any

from .arguments import ARGUMENTS, EXECUTE, WRAPPER
from .cache import BoundedCache, tensors_key
from .call import (
    ARGUMENT_NAMES,
    CALL_CACHE_CAPACITY,
    WRAPPER_NAMES,
    WRAPPER_OUTPUTS,
    OpConfig,
    check_offsets,
    named_tensors,
    offsets_check_enabled,
    select,
)
from .front import check_operands, check_single_group
from .contract.schema import Variant
from .prepared import PreparedCall, allocate_outputs
from .runner import LoadedVariant, derive, load_variant, run_variant
from .streams import on_stream, resolve_stream
from .problem import Problem
from .validation import describe_tensors, element_types, moved_views


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


_TENSOR_ATTRIBUTES: list[tuple[Callable[[Any], Any], ...]] = []  # torch.Tensor's, once imported


def signature(tensors: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...] | None:
    """The tensors' addresses, shapes, strides and dtypes (one C loop each); None when one
    of them is no torch tensor (None among them)."""
    if not _TENSOR_ATTRIBUTES:
        from torch import Tensor

        _TENSOR_ATTRIBUTES.append((Tensor.data_ptr, attrgetter("shape"), Tensor.stride, attrgetter("dtype")))
    data_ptr, shape, stride, dtype = _TENSOR_ATTRIBUTES[0]
    try:
        return (tuple(map(data_ptr, tensors)), tuple(map(shape, tensors)), tuple(map(stride, tensors)),
                tuple(map(dtype, tensors)))
    except (TypeError, AttributeError):
        return None


class Site:
    """One way of calling a bound op: the variant's tensor roles it binds, the function
    that takes them from the frontend's tuple of tensor arguments (the function that takes
    the others, which must be None), the outputs it allocates, and its calls: call
    signature -> PreparedCall (bounded), with the last call (a Prebound, or None)
    compared first."""

    __slots__ = ("roles", "tensors", "others", "nones", "outputs", "calls", "last")

    def __init__(self, roles: tuple[str, ...], positions: tuple[int, ...], width: int, outputs: tuple[str, ...]) -> None:
        self.roles, self.outputs = roles, outputs
        self.tensors = _getter(positions)
        others = tuple(i for i in range(width) if i not in positions)
        self.others = _getter(others) if others else lambda given: ()
        self.nones = (None,) * len(others)
        self.calls: BoundedCache[PreparedCall] = BoundedCache(CALL_CACHE_CAPACITY)
        self.last: Prebound | None = None

    def only_its_tensors(self, given: tuple[Any, ...]) -> bool:
        """True when every tensor argument in ``given`` the site does not bind is None
        (compared by identity first: a tensor is never compared with None on a match)."""
        return self.others(given) == self.nones


class Prebound:
    """A site's last call (see the module docstring): its signature, its stream argument
    (compared by identity: None, torch's current stream, is resolved on every call) and
    its prepared call."""

    __slots__ = ("signature", "stream_argument", "call")

    def __init__(self, signature: tuple[tuple[Any, ...], ...], stream_argument: Any, call: PreparedCall) -> None:
        self.signature, self.stream_argument, self.call = signature, stream_argument, call


class Missed:
    """A site's call that is not its last call's signature: the site, its tensors and their
    signature, read once and handed to the full path (BoundOp.call)."""

    __slots__ = ("site", "tensors", "signature")

    def __init__(self, site: Site, tensors: tuple[Any, ...], found: tuple[tuple[Any, ...], ...] | None) -> None:
        self.site, self.tensors, self.signature = site, tensors, found


class BoundOp:
    """A variant loaded on one device for one checked configuration."""

    def __init__(self, config: OpConfig, variant: Variant, loaded: LoadedVariant) -> None:
        self.config = config
        self.variant = variant
        self.loaded = loaded
        # the variant's tensor roles, in its order: bound by the wrapper (all but the
        # outputs it allocates; act_out's when the caller gives it), by execute() (all)
        arguments = tuple(variant.arguments)
        bound = tuple(role for role in arguments if role not in WRAPPER_OUTPUTS)
        self.wrapper_sites = {}
        for given_act_out in (False, True):
            roles = (*bound, "act_out") if given_act_out else bound
            outputs = tuple(r for r in WRAPPER_OUTPUTS if r in arguments and not (given_act_out and r == "act_out"))
            positions = tuple(WRAPPER_TENSORS.index(WRAPPER_NAMES[r]) for r in roles)
            self.wrapper_sites[given_act_out] = Site(roles, positions, len(WRAPPER_TENSORS), outputs)
        # the variant's tensors from execute()'s (a tuple in EXECUTE_TENSORS' order)
        positions = tuple(EXECUTE_TENSORS.index(ARGUMENT_NAMES[role]) for role in arguments)
        self.execute_site = Site(arguments, positions, len(EXECUTE_TENSORS), ())

    @classmethod
    def select(
        cls, config: OpConfig, tensors: dict[str, tuple[str, Any]], sources: dict[str, str]
    ) -> BoundOp:
        """The op of the installed variant serving ``config`` and the tensors' element
        types and device (dglu.call.select), loaded on that device."""
        variant = select(config, tensors, sources)
        return cls(config, variant, load_variant(variant, tensors["a"][1].device.index))

    def run_wrapper(
        self, given: tuple[Any, ...], activation_given: bool, current_stream: Any, missed: Missed | None = None
    ) -> dict[str, Any]:
        """The wrapper's call (``given``: its tensor arguments, WRAPPER_TENSORS' values):
        bind its tensors, allocate the outputs the variant takes (act_out's only when the
        caller gives none), launch; returns the outputs allocated. ``missed``: what this
        op's prebound read of this very call (its signature is then not read again)."""
        site = self.wrapper_sites[activation_given]
        if missed is not None and missed.site is site:
            return self.call(site, given, current_stream, missed)
        made = self.prebound(site, given, current_stream)
        return made if isinstance(made, dict) else self.call(site, given, current_stream, made)

    def prebound(self, site: Site, given: tuple[Any, ...], current_stream: Any) -> dict[str, Any] | Missed | None:
        """Run the call of ``site`` whose tensor arguments are ``given`` (the frontend's
        tuple) from the site's last call if it has that call's signature (see the module
        docstring), returning the outputs allocated; else nothing is done: a Missed with
        the signature read (for BoundOp.call), or None when none was read (no last call,
        another stream argument, a tensor argument the site does not bind)."""
        last = site.last
        if last is None or current_stream is not last.stream_argument or not site.only_its_tensors(given):
            return None
        tensors = site.tensors(given)
        found = signature(tensors)
        if found != last.signature:
            return Missed(site, tensors, found)
        return self._launch(last.call, tensors, site.roles, current_stream)

    def call(
        self, site: Site, given: tuple[Any, ...], current_stream: Any, missed: Missed | None = None
    ) -> dict[str, Any]:
        """Run the call of ``site`` whose tensor arguments, ``given``, passed the frontend's
        checks: its tensors bound (checked once per call signature; at new addresses of the
        site's last call's shapes, strides and dtypes only their addresses are checked), the
        outputs the variant takes allocated (the accumulated ones zeroed on the stream),
        launched. Its signature is kept as the site's last call when it gives each of the
        site's tensors and no other. ``missed``: what prebound read of this very call
        (used when it is this site's), so the signature is read once. Returns the outputs
        allocated."""
        if missed is not None and missed.site is site:
            tensors, found = missed.tensors, missed.signature
        else:
            tensors = site.tensors(given)
            found = signature(tensors)
        key = found if found is not None else tensors_key(tensors)
        call = site.calls.get(key) if key is not None else None
        if call is None:
            last = site.last
            if found is not None and last is not None and found[1:] == last.signature[1:]:
                make = lambda: self._moved(site.roles, tensors, found[0], last)  # noqa: E731
            else:
                make = lambda: self._prepare(dict(zip(site.roles, tensors)), site.outputs)  # noqa: E731
            call = make() if key is None else site.calls.get_or_make(key, make)
        if found is not None and site.only_its_tensors(given):
            site.last = Prebound(found, current_stream, call)
        return self._launch(call, tensors, site.roles, current_stream)

    def _moved(
        self, roles: tuple[str, ...], tensors: tuple[Any, ...], pointers: tuple[int, ...], last: Prebound
    ) -> PreparedCall:
        """The call of ``last`` for tensors of its shapes, strides and dtypes at the
        addresses ``pointers``: the new addresses checked (alignment, device), the views of
        the tensors that moved made anew, and the launches to start from ``last``'s."""
        moved = tuple(role for role, new, old in zip(roles, pointers, last.signature[0], strict=True) if new != old)
        named = named_tensors(False, **dict(zip(roles, tensors)))
        previous = last.call.problem
        views = moved_views(self.variant, previous, named, moved)
        self._check_device(named["a"][1].device.index)
        problem = Problem(previous.scalars, previous.origins, {**previous.tensors, **views})
        return last.call.moved(problem, tuple(views))

    def _launch(
        self, call: PreparedCall, tensors: tuple[Any, ...], roles: tuple[str, ...], current_stream: Any
    ) -> dict[str, Any]:
        """Allocate the call's outputs and launch it on the resolved stream: from its plan
        for these output addresses and stream, else from its last launch's (dglu.runner.derive:
        the outputs, and the inputs that moved, patched), else planned."""
        device = self.loaded.device
        stream = resolve_stream(current_stream, device)
        if offsets_check_enabled() and not self.config.options.single_group:
            check_offsets(tensors[roles.index("padded_offsets")], call.problem, stream,
                          self.variant.m_aligned)
        if not call.outputs:
            made, key = {}, ((), stream)
        else:
            if current_stream is None:  # resolved to torch's current stream: torch allocates on it
                made = allocate_outputs(call.outputs, device)
            else:
                with on_stream(stream, device):
                    made = allocate_outputs(call.outputs, device)
            key = (tuple([tensor.data_ptr() for tensor in made.values()]), stream)
        last = call.last
        planned = last[1] if last is not None and last[0] == key else call.planned(key)
        ready, start = planned.ready, call.start
        if ready is None and start is not None and start[0] == stream:
            ready = derive(self.loaded, start[1], planned.problem, call.cleared, (*start[2], *call.output_roles))
        ready = run_variant(self.loaded, planned.problem, stream, call.cleared, ready)
        if ready is not None:  # None: captured into a graph, nothing to keep
            planned.ready = ready
            call.start = (stream, ready, ())
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
        self._check_device(problem.tensors["a"].device)
        return PreparedCall(problem, variant, outputs)

    def _check_device(self, device: int) -> None:
        """Refuse a call whose tensors are on another device than the op's."""
        if device != self.loaded.device:
            raise ValueError(
                f"a_tensor: on cuda:{device}, but the op was compiled for "
                f"cuda:{self.loaded.device} (its samples' device)"
            )
