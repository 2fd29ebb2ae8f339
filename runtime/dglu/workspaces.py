"""The scratch memory a variant's manifest entry asks for (``workspaces``), reused per
(device, stream).

Each stream keeps its own workspaces and grows them when a call needs more, so a repeated
call allocates nothing. Workspaces marked ``zero: each_call`` are cleared with cuMemsetD32Async on the call's
stream before its first kernel: calls on one stream run in order, and calls on different
streams never share a workspace. A stream that is capturing a CUDA graph gets fresh
allocations instead (from the graph's private pool, as torch does for anything allocated
during capture), so a replay never shares memory with eager calls or other graphs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from .driver import checked
from .dtypes import ELEMENT_TYPES, torch_dtype
from .contract.schema import WorkspaceRule
from .streams import on_stream

WORD_BYTES = 4  # cuMemsetD32Async writes 32-bit words


class Workspace(NamedTuple):
    """One workspace: its name and rule, address, size in elements, and owning tensor."""

    name: str
    rule: WorkspaceRule
    pointer: int
    elements: int
    owner: Any


class StreamWorkspaces:
    """The workspaces of one (device, stream); the lock keeps a call's memsets and launches
    together on the stream when several threads share it."""

    def __init__(self, stream: int) -> None:
        from cuda.bindings import driver

        self.lock = threading.Lock()
        self.stream = stream
        self.cu_stream = driver.CUstream(stream)
        self.workspaces: dict[tuple[str, str, int], Workspace] = {}  # by (name, dtype, align)


_pools: dict[tuple[int, int], StreamWorkspaces] = {}
_pools_lock = threading.Lock()


def stream_pool(device: int, stream: int) -> StreamWorkspaces:
    """The workspaces of ``stream`` on ``device`` (created empty on first use)."""
    pool = _pools.get((device, stream))
    if pool is None:
        with _pools_lock:
            pool = _pools.setdefault((device, stream), StreamWorkspaces(stream))
    return pool


def is_capturing(stream: Any) -> bool:
    """True while ``stream`` (a handle or a CUstream) is capturing a CUDA graph."""
    from cuda.bindings import driver

    handle = stream if isinstance(stream, driver.CUstream) else driver.CUstream(stream)
    status = checked("cuStreamIsCapturing", handle)
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _allocate(
    name: str, rule: WorkspaceRule, elements: int, device: int, stream: int
) -> Workspace:
    """A new workspace, allocated on ``stream`` and checked for alignment."""
    import torch

    cuda_device = torch.device("cuda", device)
    with on_stream(stream, device):
        tensor = torch.empty(elements, dtype=torch_dtype(rule.dtype), device=cuda_device)
    if tensor.data_ptr() % rule.align:
        raise RuntimeError(
            f"workspace {name}: torch allocated it at {tensor.data_ptr():#x}, "
            f"which is not {rule.align}-byte aligned as the kernels need"
        )
    return Workspace(name, rule, tensor.data_ptr(), elements, tensor)


def pool_slot(name: str, rule: WorkspaceRule) -> tuple[str, str, int]:
    """Where a stream's pool keeps the workspace ``name`` of ``rule``."""
    return (name, rule.dtype, rule.align)


def still_pooled(pool: StreamWorkspaces, pooled: tuple[tuple[tuple, Workspace], ...]) -> bool:
    """True when every (slot, workspace) of ``pooled`` is still what ``pool`` holds there
    and ``pool``'s stream is not capturing a graph: an earlier call's workspaces serve
    again. Hold ``pool.lock``."""
    if not pooled:
        return True
    if is_capturing(pool.cu_stream):
        return False
    held = pool.workspaces
    return all(held.get(slot) is workspace for slot, workspace in pooled)


def acquire(
    rules: Mapping[str, WorkspaceRule],
    scalars: Mapping[str, int],
    device: int,
    pool: StreamWorkspaces,
) -> dict[str, Workspace]:
    """The workspaces of ``rules``, at least as large as the problem needs: the pool's
    (grown when too small), or fresh ones while the stream captures a graph. Hold
    ``pool.lock``."""
    if not rules:
        return {}
    capturing = is_capturing(pool.cu_stream)
    made = {}
    for name, rule in rules.items():
        elements = rule.count.value(scalars)
        slot = pool_slot(name, rule)
        workspace = None if capturing else pool.workspaces.get(slot)
        if workspace is None or workspace.elements < elements:
            workspace = _allocate(name, rule, elements, device, pool.stream)
            if not capturing:
                pool.workspaces[slot] = workspace
        made[name] = workspace
    return made


def zeroed_ranges(
    workspaces: Mapping[str, Workspace], scalars: Mapping[str, int]
) -> list[tuple[int, int]]:
    """(pointer, bytes) of the part a problem uses of each ``zero: each_call`` workspace:
    what a call clears before its kernels."""
    return [
        (w.pointer, w.rule.count.value(scalars) * ELEMENT_TYPES[w.rule.dtype].size)
        for w in workspaces.values()
        if w.rule.zero == "each_call"
    ]


def clear(pointer: int, size: int, stream: Any) -> None:
    """Set ``size`` bytes at ``pointer`` to zero on ``stream`` (a CUstream), in 32-bit words
    when the size allows."""
    if size % WORD_BYTES:
        checked("cuMemsetD8Async", pointer, 0, size, stream)
    else:
        checked("cuMemsetD32Async", pointer, 0, size // WORD_BYTES, stream)


def release_all() -> None:
    """Drop every pooled workspace (their memory returns to torch's allocator)."""
    with _pools_lock:
        _pools.clear()
