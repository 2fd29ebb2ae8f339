"""The one stand-in for the CUDA driver and device in the CPU tests.

``StandInDriver`` answers every ``dglu.driver.checked`` call with success (handles for the
calls that return one) and records the calls in order; ``install`` puts it, an H200's
facts, a fixed workspace address and recording TMA encoding in place of the GPU parts, so
the rest of the runtime runs its real code on CPU tensors.
"""

from __future__ import annotations

import contextlib
import struct
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dglu import api, driver, launch, runner, validation, workspaces
from dglu.contract.schema import Variant
from dglu.manifest import SearchEntry

H200 = driver.DeviceInfo(0, "NVIDIA H200", (9, 0), 132, 232_448)
DRIVER_VERSION = 12090
WORKSPACE_ADDRESS = 0x10000
STREAM = 7


class StandInDriver:
    """Answers driver calls, and records them in order (``counts`` by name)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.current = 0  # no context current on this thread
        self.counts: Counter[str] = Counter()

    def __call__(self, name: str, *args: object) -> object:
        self.calls.append((name, args))
        self.counts[name] += 1
        answers = {
            "cuCtxGetCurrent": self.current,
            "cuDevicePrimaryCtxRetain": 0xC0,
            "cuDriverGetVersion": DRIVER_VERSION,
            "cuModuleLoadData": 0x1000 + self.counts[name],
            "cuModuleGetFunction": 0x2000 + self.counts[name],
            "cuStreamIsCapturing": None,
        }
        return answers.get(name)

    def names(self, name: str) -> list[tuple]:
        return [args for call, args in self.calls if call == name]


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
        (driver, "_modules", {}),
        (driver, "_functions", {}),
        (driver, "device_info", lambda ordinal: H200),
        (api, "device_info", lambda ordinal: H200),
        (runner, "device_info", lambda ordinal: H200),
        (runner, "driver_version", lambda: DRIVER_VERSION),
        (api, "installed_variants", lambda: tuple(variants)),
        (api, "search_path", lambda: [SearchEntry(directory, "test", True)]),
        (validation, "_check_devices", lambda args: None),
        (api, "resolve_stream", lambda stream, device: STREAM),
        (api, "on_stream", lambda stream, device: contextlib.nullcontext()),
        (workspaces, "is_capturing", lambda stream: False),
        (api, "is_capturing", lambda stream: False),
        (
            workspaces,
            "_allocate",
            lambda name, rule, n, device, stream: workspaces.Workspace(
                name, rule, WORKSPACE_ADDRESS, n, None
            ),
        ),
        (runner, "encode_tensor_map", fake_tensor_map),
        (workspaces.StreamWorkspaces, "__init__", _pool_init),
    ]:
        monkeypatch.setattr(module, name, value)
    api.clear_caches()
    return fake


def _pool_init(self: workspaces.StreamWorkspaces, stream: int) -> None:
    import threading

    self.lock = threading.Lock()
    self.stream = stream
    self.cu_stream = stream
    self.workspaces = {}
