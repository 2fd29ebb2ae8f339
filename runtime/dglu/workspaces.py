"""The scratch memory a variant's manifest entry asks for (``workspaces``), reused per
(device, stream).

Each stream keeps its own pooled workspaces and grows them when a call needs more, so a
repeated call allocates nothing. A pooled workspace is a synchronous driver allocation
(cuMemAlloc), made once and kept by dglu, never a torch tensor:
- not cuMemAllocAsync: its first use creates the device's default memory pool, ~11 ms on
  an H200, which torch (whose caching allocator calls cudaMalloc) never does: that would
  be most of a first call's driver time.
- not torch's caching allocator: cudagraph trees (torch.compile's "reduce-overhead") run
  their eager warm-up with torch's allocator routed into the graph's private pool, and
  refuse a live tensor of that pool that is not an output of the graph; a workspace dglu
  keeps alive would be one. Driver memory stays outside torch's caching allocator
  (torch.cuda.memory_allocated does not count it); release_all frees it.
Why this lifetime is safe: cuMemAlloc's memory is usable on every stream once the call
returns, and a pool's workspaces are only used by calls enqueued on the pool's stream,
which run in order (the clear of a new ``zero: by_consumer`` workspace is enqueued on that
stream before the call's kernels). A workspace is freed only after its stream was
synchronized (cuStreamSynchronize, then cuMemFree): when it grows (the new one allocated
first), when a failed call may have left it dirty (``forget_consumed``) and in
release_all; so no kernel that used it is still running. The allocations and frees run in
the relaxed stream-capture mode (cuThreadExchangeStreamCaptureMode), as torch's caching
allocator does around cudaMalloc: a capture another thread runs in the global mode would
otherwise refuse them; they are not enqueued on a stream, so no capture records them.
Workspaces marked ``zero: each_call`` are cleared with cuMemsetD32Async on the call's
stream before its first kernel: calls on one stream run in order, and calls on different
streams never share a workspace. Workspaces marked ``zero: by_consumer`` are cleared once,
when allocated: the kernel that reads them zeroes what it read (the dbias finisher), so a
call leaves them zero for the next one. A call that fails after its first kernel was
enqueued may leave them dirty; its stream's pool then forgets them (``forget_consumed``)
and the next call allocates and clears new ones.

A pool knows when its stream cannot be capturing a CUDA graph: the legacy default stream
(handle 0 or CU_STREAM_LEGACY), torch's default current stream, can never be captured, so
only the calls on other streams ask the driver (cuStreamIsCapturing). With cuda-bindings
told to use per-thread default streams (CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM), handle
0 is the calling thread's per-thread stream, which can be captured: it is asked then.

A stream that is capturing a CUDA graph gets graph-owned workspaces instead: each is
a stream-ordered allocation (cuMemAllocAsync, a graph memory node) captured inside the
graph before the call's clears, and freed (cuMemFreeAsync) after its last kernel, also
inside the graph. The graph then owns the memory: its address is fixed for the graph's lifetime, CUDA backs it only while a replay
runs between the two nodes (never shared with eager calls or with another graph running at
the same time), and it goes with the graph. Workspaces hold nothing from one call to the
next (zeroed each call, or written before read), so an allocation inside the graph loses
nothing.
"""
from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Mapping
from typing import Any

from .contract.records import Record
from .contract.schema import WorkspaceRule
from .driver import checked, cuda_driver, device_context
from .dtypes import ELEMENT_TYPES
from .errors import CudaDriverError, DeviceMemoryError

WORD_BYTES = 4  # cuMemsetD32Async writes 32-bit words


class Workspace(Record):
    """One workspace: its name and rule, device address and size in elements."""

    name: str
    rule: WorkspaceRule
    pointer: int
    elements: int


# Stream handles that cudaStreamBeginCapture refuses: the legacy default stream (0) and
# CU_STREAM_LEGACY (1). The per-thread default stream (2) can be captured.
UNCAPTURABLE_STREAMS = (0, 1)
PER_THREAD_DEFAULT_ENV = "CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM"  # cuda-bindings: 0 is per-thread


def uncapturable(stream: int) -> bool:
    """True for a stream handle that never captures a CUDA graph (see the module docstring)."""
    if stream == 0 and os.environ.get(PER_THREAD_DEFAULT_ENV, "0") not in ("", "0"):
        return False
    return stream in UNCAPTURABLE_STREAMS


_generations = itertools.count()  # a pool's generation: unique in the process


class StreamWorkspaces:
    """The workspaces of one (device, stream); the lock keeps a call's memsets and launches
    together on the stream when several threads share it. ``generation`` changes whenever
    ``workspaces`` does (process-wide unique numbers: a pool made anew after release_all
    shares none with the one before): a plan made for the pool's workspaces serves while
    it holds."""

    def __init__(self, stream: int) -> None:
        from cuda.bindings import driver

        self.lock = threading.Lock()
        self.stream = stream
        self.cu_stream = driver.CUstream(stream)
        self.may_capture = not uncapturable(stream)
        self.workspaces: dict[tuple[str, str, int], Workspace] = {}  # by (name, dtype, align)
        self.generation = next(_generations)

    def capturing(self) -> bool:
        """True while the stream is capturing a CUDA graph (asked only of a stream that can)."""
        return self.may_capture and is_capturing(self.cu_stream)


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
    """True while ``stream`` (a handle or a CUstream) is capturing a CUDA graph (asked on
    every call: no import statement here)."""
    driver = cuda_driver()
    handle = stream if isinstance(stream, driver.CUstream) else driver.CUstream(stream)
    status = checked("cuStreamIsCapturing", handle)
    return status != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _allocate(
    name: str, rule: WorkspaceRule, elements: int, device: int, stream: Any, in_graph: bool = False
) -> Workspace:
    """A new workspace of ``elements`` in the current context (``device``'s): a pooled one
    (cuMemAlloc), or with ``in_graph`` one of the graph ``stream`` (a CUstream) is capturing
    (cuMemAllocAsync); a new ``zero: by_consumer`` one cleared on ``stream``.
    DeviceMemoryError when the device has no room for it."""
    size = max(elements * ELEMENT_TYPES[rule.dtype].size, WORD_BYTES)  # the driver refuses 0 bytes
    try:
        if in_graph:
            pointer = int(checked("cuMemAllocAsync", size, stream))
        else:
            with relaxed_capture():
                pointer = int(checked("cuMemAlloc", size))
    except CudaDriverError as exc:
        if exc.error_name != "CUDA_ERROR_OUT_OF_MEMORY":
            raise
        raise _no_room(name, rule, elements, device, exc) from exc
    workspace = Workspace(name, rule, pointer, elements)
    try:
        if rule.zero == "by_consumer":
            clear(pointer, size, stream)
        return _aligned(workspace)
    except (RuntimeError, CudaDriverError):
        if in_graph:
            checked("cuMemFreeAsync", pointer, stream)
        else:
            _free_pooled(pointer, stream)
        raise


class relaxed_capture:  # noqa: N801 (used like a function: ``with relaxed_capture():``)
    """This thread's stream-capture mode relaxed inside the block, restored after (see the
    module docstring)."""

    __slots__ = ("previous",)

    def __enter__(self) -> None:
        mode = cuda_driver().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        self.previous = checked("cuThreadExchangeStreamCaptureMode", mode)

    def __exit__(self, *exc: object) -> None:
        checked("cuThreadExchangeStreamCaptureMode", self.previous)


def _free_pooled(pointer: int, stream: Any) -> None:
    """Free a pooled workspace once the kernels enqueued on its ``stream`` (a CUstream)
    are done. Be in its device's context."""
    with relaxed_capture():
        checked("cuStreamSynchronize", stream)
        checked("cuMemFree", pointer)


def _aligned(workspace: Workspace) -> Workspace:
    if workspace.pointer % workspace.rule.align:
        raise RuntimeError(
            f"workspace {workspace.name}: allocated at {workspace.pointer:#x}, which is not "
            f"{workspace.rule.align}-byte aligned as the kernels need"
        )
    return workspace


def _no_room(
    name: str, rule: WorkspaceRule, elements: int, device: int, cause: Exception
) -> DeviceMemoryError:
    size = elements * ELEMENT_TYPES[rule.dtype].size
    return DeviceMemoryError(
        f"workspace {name}: no room for {elements} {rule.dtype} elements ({size} bytes) on "
        f"cuda:{device} ({cause}); nothing was enqueued and no argument was written. Free "
        "device memory (drop unused tensors, torch.cuda.empty_cache()) or split the call"
    )


def pool_slot(name: str, rule: WorkspaceRule) -> tuple[str, str, int]:
    """Where a stream's pool keeps the workspace ``name`` of ``rule``."""
    return (name, rule.dtype, rule.align)


def still_pooled(pool: StreamWorkspaces, generation: int | None) -> bool:
    """True when the workspaces a call's plan was made for, at the pool's ``generation``
    (None: it uses none), are still what ``pool`` holds and ``pool``'s stream is not
    capturing a graph (which needs graph-owned workspaces): an earlier call's workspaces
    serve again. Hold ``pool.lock``."""
    if generation is None:
        return True
    return generation == pool.generation and not pool.capturing()


def acquire(
    rules: Mapping[str, WorkspaceRule],
    scalars: Mapping[str, int],
    device: int,
    pool: StreamWorkspaces,
) -> dict[str, Workspace]:
    """The pool's workspaces of ``rules``, grown when smaller than the problem needs (the
    old allocation freed once the pool's stream is done with it). The stream must not be capturing
    (graph_workspaces then). Hold ``pool.lock`` and be in ``device``'s context; a failed
    allocation leaves every slot holding a usable workspace."""
    made = {}
    for name, rule in rules.items():
        elements = rule.count.value(scalars)
        slot = pool_slot(name, rule)
        workspace = old = pool.workspaces.get(slot)
        if old is None or old.elements < elements:
            workspace = pool.workspaces[slot] = _allocate(
                name, rule, elements, device, pool.cu_stream
            )
            pool.generation = next(_generations)
            if old is not None:
                _free_pooled(old.pointer, pool.cu_stream)
        made[name] = workspace
    return made


def graph_workspaces(
    rules: Mapping[str, WorkspaceRule],
    scalars: Mapping[str, int],
    device: int,
    stream: Any,
) -> dict[str, Workspace]:
    """Graph-owned workspaces of ``rules`` (see the module docstring), allocated on the
    capturing ``stream`` (a CUstream) in the device's context; the caller frees them with
    free_graph_workspaces after its kernels. On failure the ones made are freed."""
    made: dict[str, Workspace] = {}
    try:
        for name, rule in rules.items():
            made[name] = _allocate(name, rule, rule.count.value(scalars), device, stream, in_graph=True)
    except BaseException:
        free_graph_workspaces(made, stream)
        raise
    return made


def free_graph_workspaces(workspaces: Mapping[str, Workspace], stream: Any) -> None:
    """Free graph-owned workspaces on the capturing ``stream`` (a CUstream)."""
    for workspace in workspaces.values():
        checked("cuMemFreeAsync", workspace.pointer, stream)


def zeroed_ranges(
    workspaces: Mapping[str, Workspace], scalars: Mapping[str, int], given: bool = False
) -> list[tuple[int, int]]:
    """(pointer, bytes) of the part a problem uses of each ``zero: each_call`` workspace,
    and with ``given`` (memory dglu did not allocate and clear: XLA's) of each ``zero:
    by_consumer`` one too: what a call clears before its kernels."""
    kinds = ("each_call", "by_consumer") if given else ("each_call",)
    return [
        (w.pointer, w.rule.count.value(scalars) * ELEMENT_TYPES[w.rule.dtype].size)
        for w in workspaces.values()
        if w.rule.zero in kinds
    ]


def forget_consumed(pool: StreamWorkspaces) -> None:
    """Drop the pool's ``zero: by_consumer`` workspaces (freed once its stream is done), which
    a failed call may have left dirty: the next call allocates and clears new ones. Hold
    ``pool.lock`` and be in the device's context."""
    for slot, workspace in list(pool.workspaces.items()):
        if workspace.rule.zero == "by_consumer":
            del pool.workspaces[slot]
            pool.generation = next(_generations)
            try:
                _free_pooled(workspace.pointer, pool.cu_stream)
            except CudaDriverError:
                pass  # a broken context: the call's own error says what to do


START_WORDS = {"-inf": 0xFF800000}  # an accumulated output's start (schema.STARTS) as a float32's bits


def clear(pointer: int, size: int, stream: Any, word: int = 0) -> None:
    """Set ``size`` bytes at ``pointer`` to zero on ``stream`` (a CUstream), in 32-bit words
    when the size allows; or fill them with the 32-bit ``word`` (START_WORDS), ``size`` a
    multiple of 4."""
    if word:
        if size % WORD_BYTES:
            raise ValueError(f"filling {size} bytes with a 32-bit word: need a multiple of {WORD_BYTES}")
        checked("cuMemsetD32Async", pointer, word, size // WORD_BYTES, stream)
    elif size % WORD_BYTES:
        checked("cuMemsetD8Async", pointer, 0, size, stream)
    else:
        checked("cuMemsetD32Async", pointer, 0, size // WORD_BYTES, stream)


def release_all() -> None:
    """Free every pooled workspace, each once its pool's stream is done with it, in its
    device's context, and forget the pools."""
    with _pools_lock:
        pools = list(_pools.items())
        _pools.clear()
    for (device, _), pool in pools:
        with pool.lock, device_context(device):
            for workspace in pool.workspaces.values():
                _free_pooled(workspace.pointer, pool.cu_stream)
            pool.workspaces.clear()
