"""The runtime's scratch memory (dglu.problem.WORKSPACES), reused per (device, stream).

Each stream keeps its own workspaces and grows them when a call needs more, so a repeated
call allocates nothing. Zeroed workspaces are cleared with cuMemsetD32Async on the call's
stream before its first kernel: calls on one stream run in order, and calls on different
streams never share a workspace. A stream that is capturing a CUDA graph gets fresh
allocations instead (from the graph's private pool, as torch does for anything allocated
during capture), so a replay never shares memory with eager calls or other graphs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .driver import checked
from .dtypes import ELEMENT_TYPES, torch_dtype
from .problem import WORKSPACES
from .streams import on_stream

WORD_BYTES = 4  # cuMemsetD32Async writes 32-bit words


class Workspace(NamedTuple):
    """One workspace: its address, its size in elements, and the tensor that owns it."""

    name: str
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
        self.workspaces: dict[str, Workspace] = {}


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


def _allocate(name: str, elements: int, device: int, stream: int) -> Workspace:
    """A new workspace, allocated on ``stream`` and checked for alignment."""
    import torch

    spec = WORKSPACES[name]
    cuda_device = torch.device("cuda", device)
    with on_stream(stream, device):
        tensor = torch.empty(elements, dtype=torch_dtype(spec.dtype), device=cuda_device)
    if tensor.data_ptr() % spec.align:
        raise RuntimeError(
            f"workspace {name}: torch allocated it at {tensor.data_ptr():#x}, "
            f"which is not {spec.align}-byte aligned as the kernels need"
        )
    return Workspace(name, tensor.data_ptr(), elements, tensor)


def acquire(
    names: Sequence[str], scalars: Mapping[str, int], device: int, pool: StreamWorkspaces
) -> dict[str, Workspace]:
    """The named workspaces, at least as large as the problem needs: the pool's (grown
    when too small), or fresh ones while the stream captures a graph. Hold ``pool.lock``."""
    if not names:
        return {}
    capturing = is_capturing(pool.cu_stream)
    made = {}
    for name in names:
        elements = WORKSPACES[name].count(scalars)
        workspace = None if capturing else pool.workspaces.get(name)
        if workspace is None or workspace.elements < elements:
            workspace = _allocate(name, elements, device, pool.stream)
            if not capturing:
                pool.workspaces[name] = workspace
        made[name] = workspace
    return made


def zeroed_ranges(
    workspaces: Mapping[str, Workspace], scalars: Mapping[str, int]
) -> list[tuple[int, int]]:
    """(pointer, bytes) of the part a problem uses of each workspace that
    dglu.problem.WORKSPACES marks zeroed: what a call clears before its kernels."""
    return [
        (workspace.pointer, spec.count(scalars) * ELEMENT_TYPES[spec.dtype].size)
        for workspace in workspaces.values()
        if (spec := WORKSPACES[workspace.name]).zeroed
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
