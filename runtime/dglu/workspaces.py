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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .driver import checked
from .dtypes import ELEMENT_TYPES, torch_dtype
from .problem import WORKSPACES
from .streams import torch_stream

WORD_BYTES = 4  # cuMemsetD32Async writes 32-bit words


@dataclass(frozen=True)
class Workspace:
    """One workspace of a call: its address and size, and the tensor that owns it."""

    name: str
    pointer: int
    elements: int
    owner: Any


class StreamWorkspaces:
    """The workspaces of one (device, stream), and the lock that keeps a call's memsets
    and launches together on the stream when several threads share it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tensors: dict[str, Any] = {}


_pools: dict[tuple[int, int], StreamWorkspaces] = {}
_pools_lock = threading.Lock()


def stream_pool(device: int, stream: int) -> StreamWorkspaces:
    """The workspaces of ``stream`` on ``device`` (created empty on first use)."""
    key = (device, stream)
    pool = _pools.get(key)
    if pool is None:
        with _pools_lock:
            pool = _pools.setdefault(key, StreamWorkspaces())
    return pool


def is_capturing(stream: int) -> bool:
    """True while ``stream`` is capturing a CUDA graph."""
    from cuda.bindings import driver

    status = checked("cuStreamIsCapturing", driver.CUstream(stream))
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _allocate(name: str, elements: int, device: int, stream: int) -> Any:
    """A new workspace tensor, allocated on ``stream`` and checked for alignment."""
    import torch

    spec = WORKSPACES[name]
    cuda_device = torch.device("cuda", device)
    with torch.cuda.stream(torch_stream(stream, device)):
        tensor = torch.empty(elements, dtype=torch_dtype(spec.dtype), device=cuda_device)
    if tensor.data_ptr() % spec.align:
        raise RuntimeError(
            f"workspace {name}: torch allocated it at {tensor.data_ptr():#x}, "
            f"which is not {spec.align}-byte aligned as the kernels need"
        )
    return tensor


def acquire(
    names: list[str], scalars: Mapping[str, int], device: int, stream: int, pool: StreamWorkspaces
) -> dict[str, Workspace]:
    """The named workspaces for a problem: the pool's (grown when too small), or fresh
    ones while ``stream`` captures a graph. Call with ``pool.lock`` held."""
    capturing = bool(names) and is_capturing(stream)
    made = {}
    for name in names:
        elements = WORKSPACES[name].count(scalars)
        tensor = None if capturing else pool.tensors.get(name)
        if tensor is None or tensor.numel() < elements:
            tensor = _allocate(name, elements, device, stream)
            if not capturing:
                pool.tensors[name] = tensor
        made[name] = Workspace(name, tensor.data_ptr(), elements, tensor)
    return made


def zero(workspaces: Mapping[str, Workspace], stream: int) -> None:
    """Clear, on ``stream``, the workspaces that dglu.problem.WORKSPACES marks zeroed."""
    from cuda.bindings import driver

    for workspace in workspaces.values():
        spec = WORKSPACES[workspace.name]
        if spec.zeroed:
            words = workspace.elements * ELEMENT_TYPES[spec.dtype].size // WORD_BYTES
            checked(
                "cuMemsetD32Async", workspace.pointer, 0, words, driver.CUstream(stream)
            )


def release_all() -> None:
    """Drop every pooled workspace (their memory returns to torch's allocator)."""
    with _pools_lock:
        _pools.clear()
