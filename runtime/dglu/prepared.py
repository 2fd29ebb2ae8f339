"""A call's tensors resolved against its bound op's variant (dglu.bound keeps one per call
signature): the checked problem, the outputs the wrapper allocates (their rules and the
allocation), and the call's plans per output addresses and stream (dglu.runner.ReadyCall),
with where a new plan starts from."""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

from .arrays import torch_module
from .cache import BoundedCache
from .contract.schema import Variant
from .dtypes import torch_dtype
from .errors import DeviceMemoryError
from .problem import Problem, TensorView

# Output addresses kept per wrapper call: torch's allocator hands a repeated call's outputs
# the few addresses the previous results freed.
OUTPUT_CACHE_CAPACITY = 16


class OutputRule:
    """An output the wrapper allocates: its role, shape, strides (the variant's: e.g. the
    scale factors' permuted layout), torch dtype, whether the kernels accumulate into it
    (then it is zeroed on the call's stream), its view with a null address (the kernels'
    view of it, once allocated, is that view at the tensor's address) and the strides it is
    allocated with (allocation_strides)."""

    __slots__ = ("role", "shape", "strides", "dtype", "accumulate", "view", "allocated_strides")

    def __init__(
        self, role: str, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, accumulate: bool,
        view: TensorView,
    ) -> None:
        self.role, self.shape, self.strides, self.dtype = role, shape, strides, dtype
        self.accumulate, self.view = accumulate, view
        self.allocated_strides = allocation_strides(shape, strides)


def allocation_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The strides an output of ``shape`` and ``strides`` is allocated with: torch.empty's
    (a plain contiguous tensor, as callers expect: e.g. ``.view(torch.uint8)`` works) when
    a contiguous tensor has ``strides`` along its dimensions of size > 1, else ``strides``
    (the scale factors' permuted layout)."""
    contiguous, expected = [], 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != expected:
            return strides
        contiguous.append(expected)
        expected *= max(size, 1)
    return tuple(reversed(contiguous))


def allocate_outputs(rules: tuple[OutputRule, ...], device: int | None) -> dict[str, Any]:
    """The wrapper's new outputs on cuda:``device`` (the CPU when None); DeviceMemoryError,
    before anything is enqueued, when the device has no room for one. (torch.empty_strided:
    it parses its arguments faster than torch.empty.)"""
    torch = torch_module()
    torch_device = _torch_device(device)
    made = {}
    for rule in rules:
        try:
            made[rule.role] = torch.empty_strided(
                rule.shape, rule.allocated_strides, dtype=rule.dtype, device=torch_device
            )
        except torch.OutOfMemoryError as exc:
            size = math.prod(rule.shape) * rule.dtype.itemsize
            raise DeviceMemoryError(
                f"{rule.role}_tensor: no room for the output {tuple(rule.shape)} {rule.dtype} "
                f"({size} bytes) on cuda:{device} ({exc}); nothing was enqueued and no "
                "argument was written. Free device memory (drop unused tensors, "
                "torch.cuda.empty_cache()) or split the call into fewer rows"
            ) from exc
    return made


@functools.cache
def _torch_device(device: int | None) -> Any:
    """torch.device("cuda", device), or None (the CPU) when ``device`` is None."""
    import torch

    return torch.device("cuda", device) if device is not None else None


class Planned:
    """A call's problem with one set of output addresses and, once planned, its ReadyCall
    on one stream (dglu.runner)."""

    __slots__ = ("problem", "ready")

    def __init__(self, problem: Problem) -> None:
        self.problem, self.ready = problem, None


class PreparedCall:
    """What a call's tensors resolve to, kept per call signature (dglu.bound): the problem,
    the outputs the wrapper allocates, its plans (per output addresses and stream: the
    problem with those outputs and its ReadyCall) and where a new plan starts from."""

    def __init__(self, problem: Problem, variant: Variant, outputs: tuple[str, ...]) -> None:
        self.problem = problem
        self.outputs = tuple(_output_rule(role, variant.arguments[role], problem) for role in outputs)
        self.output_roles = tuple(rule.role for rule in self.outputs)
        self.cleared = tuple(rule.role for rule in self.outputs if rule.accumulate)
        self.plans: BoundedCache[Planned] = BoundedCache(OUTPUT_CACHE_CAPACITY)
        self.last: tuple[tuple[tuple[int, ...], int], Planned] | None = None  # the last plan's key and plan
        # where the next plan starts from: the stream and ReadyCall of the last launch and
        # the views of this call's problem that differ from that launch's (besides the
        # outputs); one attribute, so that threads read the three together
        self.start: tuple[int, Any, tuple[str, ...]] | None = None

    def moved(self, problem: Problem, views: tuple[str, ...]) -> PreparedCall:
        """This call for ``problem``, whose ``views`` (of inputs, and the views derived from
        them) differ from this call's problem's: the same outputs, no plans, its first
        plan to start from this call's last launch."""
        call = copy.copy(self)
        call.problem, call.plans, call.last = problem, BoundedCache(OUTPUT_CACHE_CAPACITY), None
        start = self.start
        call.start = (start[0], start[1], views) if start is not None and not start[2] else None
        return call

    def planned(self, key: tuple[tuple[int, ...], int]) -> Planned:
        """The plan of ``key``: the outputs' addresses (in self.outputs' order) and the
        stream; kept as the last plan (compared first by the caller)."""
        found = self.plans.get(key)
        if found is None:
            found = self.plans.get_or_make(key, lambda: Planned(self._with_outputs(key[0])))
        self.last = (key, found)
        return found

    def _with_outputs(self, pointers: tuple[int, ...]) -> Problem:
        """This call's problem with the outputs' views at ``pointers`` (itself without outputs)."""
        problem = self.problem
        if not self.outputs:
            return problem
        views = dict(problem.tensors)
        for rule, pointer in zip(self.outputs, pointers, strict=True):
            view = rule.view
            views[rule.role] = TensorView(view.device, pointer, view.shape, view.strides, view.dtype)
        return Problem(problem.scalars, problem.origins, views)


def _output_rule(role: str, argument: Any, problem: Problem) -> OutputRule:
    """The OutputRule of output ``role`` (its ARGUMENT rule) for ``problem``."""
    shape = tuple(e.value(problem.scalars) for e in argument.shape)
    strides = tuple(e.value(problem.scalars) for e in argument.strides)
    dtype = argument.dtypes[0]
    view = TensorView(problem.tensors["a"].device, 0, shape, strides, dtype)
    return OutputRule(role, shape, strides, torch_dtype(dtype), argument.io == "accumulate", view)
