"""The one stand-in for the CUDA driver and device in the CPU tests.

``StandInDriver`` answers every ``dglu.driver.checked`` call with success (handles for the
calls that return one), records the calls in order, and fails a chosen call when told to
(``fail``: the driver's error, ``fail_next_allocation``: a pooled workspace's out-of-memory);
it keeps a context stack (push, pop, current) and the context of each stream handle, and
hands out addresses (``ALLOCATION_ALIGN``-aligned, one after the other: cuMemAlloc's from
WORKSPACE_ADDRESS, cuMemAllocAsync's while ``capturing`` from GRAPH_ADDRESS;
cuStreamIsCapturing answers by ``capturing`` too), recording which are still allocated
(``allocated``: address -> (bytes, stream), None for cuMemAlloc's). ``install`` puts it,
an H200's facts and recording TMA encoding in place of the GPU parts, so the rest of the
runtime runs its real code on CPU tensors.
"""

from __future__ import annotations

import contextlib
import struct
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dglu import api, bound, call, driver, launch, runner, streams, validation, workspaces
from dglu.contract.dispatch import read_dispatch
from dglu.contract.schema import Variant
from dglu.errors import CudaDriverError
from dglu.manifest import SearchEntry

H200 = driver.DeviceInfo(0, "NVIDIA H200", (9, 0), 132, 232_448)
DRIVER_VERSION = 12090
WORKSPACE_ADDRESS = 0x10000  # where the pooled workspaces' allocations start
GRAPH_ADDRESS = 0x1_0000_0000  # where the allocations made while capturing start
ALLOCATION_ALIGN = 512  # what the allocations' addresses are aligned to
PRIMARY_CONTEXT = 0xC0  # device 0's primary context
STREAM = 7


class StandInDriver:
    """Answers driver calls, and records them in order (``counts`` by name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.current = 0  # no context current on this thread
        self.counts: Counter[str] = Counter()
        self.pushed: list[int] = []  # contexts pushed by cuCtxPushCurrent, innermost last
        self.stream_contexts: dict[int, int] = {}  # stream handle -> context (else primary)
        self.context_devices: dict[int, int] = {PRIMARY_CONTEXT: 0}
        self._failures: dict[str, list] = {}  # name -> [calls to let pass, error name]
        self.capturing = False  # what cuStreamIsCapturing says of every stream
        self.allocated: dict[int, tuple[int, object]] = {}  # address -> (bytes, stream or None)
        self._next = {False: WORKSPACE_ADDRESS, True: GRAPH_ADDRESS}  # by in_graph

    def fail(self, name: str, error: str, after: int = 0) -> None:
        """Make the call of ``name`` after ``after`` successful ones fail with ``error``."""
        self._failures[name] = [after, error]

    def fail_next_allocation(self) -> None:
        """Make the next pooled workspace's allocation (cuMemAlloc) fail with
        CUDA_ERROR_OUT_OF_MEMORY."""
        self.fail("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY")

    def __call__(self, name: str, *args: object) -> object:
        self.calls.append((name, args))
        self.counts[name] += 1
        failure = self._failures.get(name)
        if failure is not None:
            if failure[0] == 0:
                del self._failures[name]
                raise CudaDriverError(f"{name} failed: {failure[1]} (stand-in)", failure[1])
            failure[0] -= 1
        if name == "cuCtxPushCurrent":
            self.pushed.append(int(args[0]))
        elif name == "cuCtxPopCurrent":
            self.pushed.pop()
        current = self.pushed[-1] if self.pushed else self.current
        answers = {
            "cuCtxGetCurrent": current,
            "cuCtxGetDevice": self.context_devices.get(current),
            "cuDevicePrimaryCtxRetain": PRIMARY_CONTEXT,
            "cuDriverGetVersion": DRIVER_VERSION,
            "cuModuleLoadData": 0x1000 + self.counts[name],
            "cuModuleGetFunction": 0x2000 + self.counts[name],
            "cuStreamIsCapturing": self._capture_status(),
        }
        if name == "cuStreamGetCtx":
            return self.stream_contexts.get(int(args[0]), PRIMARY_CONTEXT)
        if name == "cuMemAllocAsync":
            return self._allocate(*args, in_graph=self.capturing)
        if name == "cuMemAlloc":
            return self._allocate(args[0], None, in_graph=False)
        if name in ("cuMemFreeAsync", "cuMemFree"):
            del self.allocated[int(args[0])]
        return answers.get(name)

    def _capture_status(self) -> object:
        status = driver.cuda_driver().CUstreamCaptureStatus
        return status.CU_STREAM_CAPTURE_STATUS_ACTIVE if self.capturing else status.CU_STREAM_CAPTURE_STATUS_NONE

    def _allocate(self, size: int, stream: object, in_graph: bool) -> int:
        address = self._next[in_graph]
        self._next[in_graph] = -(-(address + size) // ALLOCATION_ALIGN) * ALLOCATION_ALIGN
        self.allocated[address] = (size, stream)
        return address

    def allocations(self) -> int:
        """Device allocations made so far: pooled (cuMemAlloc) and graph-owned (cuMemAllocAsync)."""
        return self.counts["cuMemAlloc"] + self.counts["cuMemAllocAsync"]

    def names(self, name: str) -> list[tuple]:
        return [args for call, args in self.calls if call == name]

    def enqueued(self) -> list[str]:
        """The names of the memset and launch calls made, in order."""
        kinds = ("cuMemsetD32Async", "cuMemsetD8Async", "cuLaunchKernelEx")
        return [name for name, _ in self.calls if name in kinds]


def of_arch(variants: Sequence[Variant], arch: str | None) -> tuple[Variant, ...]:
    """``variants`` of ``arch`` (None: all), as dglu.manifest.installed_variants answers."""
    return tuple(v for v in variants if arch in (None, v.key.arch))


def fake_tensor_map(rule: Any, view: Any) -> bytes:
    """128 bytes that show which view was encoded: its pointer and shape."""
    data = struct.pack("<Q", view.pointer) + struct.pack(f"<{len(view.shape)}q", *view.shape)
    return data.ljust(128, b"\0")


def install(
    monkeypatch: pytest.MonkeyPatch, variants: Sequence[Variant], directory: Path
) -> StandInDriver:
    """Replace the GPU parts (see the module docstring); returns the recording driver."""
    fake = StandInDriver()
    for module, name, value in [
        (driver, "checked", fake),
        (launch, "checked", fake),
        (workspaces, "checked", fake),
        (streams, "checked", fake),
        (driver, "_modules", {}),
        (driver, "_functions", {}),
        (driver, "device_info", lambda ordinal: H200),
        (call, "device_info", lambda ordinal: H200),
        (runner, "device_info", lambda ordinal: H200),
        (runner, "driver_version", lambda: DRIVER_VERSION),
        (call, "installed_variants", lambda arch=None: of_arch(variants, arch)),
        (call, "search_path", lambda: [SearchEntry(directory, "test", True)]),
        (call, "installed_dispatch", lambda: read_dispatch(directory)),
        (validation, "_check_devices", lambda args: None),
        (bound, "resolve_stream", lambda stream, device: STREAM),
        (bound, "on_stream", lambda stream, device: contextlib.nullcontext()),
        (call, "on_stream", lambda stream, device: contextlib.nullcontext()),
        (runner, "encode_tensor_map", fake_tensor_map),
        (workspaces.StreamWorkspaces, "__init__", _pool_init),
        (workspaces, "_pools", {}),  # this test's pools, allocated by this stand-in
        (driver, "_seen", threading.local()),  # no context seen current yet
        (driver, "_already_current", {}),  # nor a block made for one
    ]:
        monkeypatch.setattr(module, name, value)
    api.clear_caches()
    return fake


def _pool_init(self: workspaces.StreamWorkspaces, stream: int) -> None:
    self.lock = threading.Lock()
    self.stream = stream
    self.cu_stream = stream
    self.may_capture = not workspaces.uncapturable(stream)
    self.workspaces = {}
    self.generation = next(workspaces._generations)


def dense_call_tensors(m: int, n: int, k: int, l: int, dprob: float = 0.0) -> dict[str, Any]:
    """A wrapper call's tensors for dense weights on the CPU (the stand-ins never read
    them): zero A, C and B, four experts' offsets over M, unit alpha, beta and prob, dprob
    filled with ``dprob``."""
    import torch

    return dict(
        a_tensor=torch.zeros(m, k, 1, dtype=torch.bfloat16),
        c_tensor=torch.zeros(m, 2 * n, 1, dtype=torch.bfloat16),
        padded_offsets=torch.tensor([256, 256, 768, 1024], dtype=torch.int32),
        alpha_tensor=torch.ones(l),
        beta_tensor=torch.ones(l),
        prob_tensor=torch.ones(m, 1, 1),
        dprob_tensor=torch.full((m, 1, 1), dprob),
        b_tensor=torch.zeros(l, n, k, dtype=torch.bfloat16).permute(1, 2, 0),
    )


def compiled_class_op(call_tensors: dict[str, Any], **options: Any) -> tuple[Any, dict[str, Any]]:
    """A compiled GroupedGemmDglu (dbias on) for ``call_tensors`` (dense_call_tensors'),
    and its execute() arguments: those tensors plus a zeroed D_row and dbias."""
    import torch

    a, b = call_tensors["a_tensor"], call_tensors["b_tensor"]
    (m, _, _), (n, _, l) = a.shape, b.shape
    d_row = torch.zeros(m, 2 * n, 1, dtype=torch.bfloat16)
    dbias = torch.zeros(l, 2 * n, 1, dtype=torch.bfloat16)
    op = api.GroupedGemmDglu(
        sample_a=a, sample_c=call_tensors["c_tensor"], sample_d_row=d_row,
        sample_padded_offsets=call_tensors["padded_offsets"], sample_alpha=call_tensors["alpha_tensor"],
        sample_beta=call_tensors["beta_tensor"], sample_prob=call_tensors["prob_tensor"],
        sample_dprob=call_tensors["dprob_tensor"], sample_dbias=dbias, sample_b=b, **options,
    )
    op.compile()
    return op, {**call_tensors, "d_row_tensor": d_row, "dbias_tensor": dbias}
