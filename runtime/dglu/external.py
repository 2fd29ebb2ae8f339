"""Run a variant on memory its caller owns (XLA's buffers, for dglu.jax): every tensor and
workspace is a given address, so nothing here allocates, synchronises or reads device
memory.

``plan_call`` makes the call's plan once (grids, TMA descriptors, packed parameters, the
byte ranges to zero: the given accumulated outputs and the ``zero: each_call`` and
``zero: by_consumer`` workspaces, XLA's memory holding anything); ``enqueue`` then only
issues its memsets and launches on the stream, which is all a call captured in a CUDA
graph may do. The torch path's pooled workspaces
(dglu.workspaces' stream pools) are not used.
"""

from __future__ import annotations

from collections.abc import Mapping

from .contract.schema import Variant
from .driver import device_context
from .dtypes import ELEMENT_TYPES
from .launch import launch_kernel
from .problem import Problem
from .runner import CallPlan, LoadedVariant, _launch_grids, _plan
from .workspaces import Workspace, clear


def padded_elements(variant: Variant, scalars: Mapping[str, int]) -> dict[str, int]:
    """Elements to ask the caller for, per workspace of ``variant``: its count for the
    problem, plus room to align the start to the workspace's ``align`` whatever the caller's
    allocator aligns to (``given_workspaces`` rounds the address up)."""
    return {
        name: rule.count.value(scalars) + -(-rule.align // ELEMENT_TYPES[rule.dtype].size)
        for name, rule in variant.workspaces.items()
    }


def given_workspaces(
    variant: Variant, scalars: Mapping[str, int], buffers: Mapping[str, tuple[int, int]]
) -> dict[str, Workspace]:
    """The variant's workspaces in the caller's ``buffers`` (name -> (address, elements)):
    each start rounded up to the rule's alignment; raise naming a workspace that is missing
    or too small for the problem."""
    made = {}
    for name, rule in variant.workspaces.items():
        if name not in buffers:
            raise ValueError(
                f"workspace {name}: variant {variant.name} needs it; the call provides "
                f"{sorted(buffers) or 'none'}"
            )
        address, elements = buffers[name]
        itemsize = ELEMENT_TYPES[rule.dtype].size
        pointer = -(-address // rule.align) * rule.align
        usable = elements - (pointer - address) // itemsize
        needed = rule.count.value(scalars)
        if usable < needed:
            raise ValueError(
                f"workspace {name}: variant {variant.name} needs {needed} {rule.dtype} elements "
                f"{rule.align}-byte aligned; the buffer at {address:#x} holds {usable} from "
                f"{pointer:#x}"
            )
        made[name] = Workspace(name, rule, pointer, usable)
    return made


def plan_call(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    workspaces: Mapping[str, Workspace],
    clear_roles: tuple[str, ...],
) -> CallPlan:
    """The plan of one call on ``stream``: ``clear_roles`` (tensors of ``problem``) and the
    zeroed workspaces cleared, then every kernel launched (nothing when a grid is empty)."""
    grids = _launch_grids(loaded, problem)
    return _plan(loaded, problem, stream, grids, workspaces if grids else {}, clear_roles,
                 given_workspaces=True)


def enqueue(plan: CallPlan, device: int, cu_stream: object) -> None:
    """Issue ``plan``'s memsets and kernel launches on ``cu_stream`` (a CUstream)."""
    with device_context(device):
        for pointer, size in plan.clears:
            clear(pointer, size, cu_stream)
        for pointer, size, word in plan.fills:
            clear(pointer, size, cu_stream, word)
        for launch in plan.launches:
            launch_kernel(launch)
