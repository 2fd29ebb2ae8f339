"""dglu.runner.load_variant over a recording stand-in for the driver calls (no GPU needed).

Checks the order and the caching of the real code in dglu.driver: the cubin is verified
before cuModuleLoadData, a module is loaded once per (context, sha256), each kernel's
shared-memory attribute is set once, and the caller's context is restored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_runtime import DEFAULT_KEYS, write_artifacts
from dglu import driver, runner
from dglu.errors import CudaDriverError, IntegrityError
from dglu.manifest import read_manifest

H200 = driver.DeviceInfo(0, "NVIDIA H200", (9, 0), 132, 232_448)


class RecordingDriver:
    """Answers the driver calls load_variant makes, and records them in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.current = 0  # no context current on this thread

    def __call__(self, name: str, *args: object) -> object:
        self.calls.append((name, args))
        if name == "cuCtxGetCurrent":
            return self.current
        if name == "cuDevicePrimaryCtxRetain":
            return 0xC0
        if name == "cuModuleLoadData":
            return 0x1000 + len(self.names("cuModuleLoadData"))
        if name == "cuModuleGetFunction":
            return 0x2000 + len(self.names("cuModuleGetFunction"))
        return None

    def names(self, name: str) -> list[tuple]:
        return [args for call, args in self.calls if call == name]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> RecordingDriver:
    fake = RecordingDriver()
    monkeypatch.setattr(driver, "checked", fake)
    monkeypatch.setattr(driver, "_modules", {})
    monkeypatch.setattr(driver, "_functions", {})
    monkeypatch.setattr(runner, "device_info", lambda ordinal: H200)
    driver.initialize.cache_clear()
    driver._primary_context.cache_clear()
    yield fake
    driver.initialize.cache_clear()
    driver._primary_context.cache_clear()


@pytest.fixture
def variants(tmp_path: Path):
    write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    return read_manifest(tmp_path).variants


def test_loads_once_and_sets_shared_memory_once(recorder: RecordingDriver, variants) -> None:
    first = runner.load_variant(variants[0], 0)
    again = runner.load_variant(variants[0], 0)
    other = runner.load_variant(variants[1], 0)

    loads = recorder.names("cuModuleLoadData")
    assert [image for (image,) in loads] == [v.cubin_path.read_bytes() for v in variants]
    assert first.functions == again.functions
    symbols = [args[1] for args in recorder.names("cuModuleGetFunction")]
    assert symbols == [k.symbol.encode() for v in variants for k in v.kernels]
    smem = [args[2] for args in recorder.names("cuFuncSetAttribute")]
    assert smem == [k.dynamic_smem_bytes for v in variants for k in v.kernels]
    assert len(other.functions) == len(variants[1].kernels)


def test_pushes_the_primary_context_and_pops_it(recorder: RecordingDriver, variants) -> None:
    runner.load_variant(variants[0], 0)
    sequence = [name for name, _ in recorder.calls]
    assert sequence.index("cuCtxPushCurrent") < sequence.index("cuModuleLoadData")
    assert sequence.index("cuModuleGetFunction") < sequence.index("cuCtxPopCurrent")
    assert sequence.count("cuCtxPushCurrent") == sequence.count("cuCtxPopCurrent") == 1


def test_keeps_the_context_when_it_is_already_current(recorder: RecordingDriver, variants) -> None:
    recorder.current = 0xC0
    runner.load_variant(variants[0], 0)
    assert not recorder.names("cuCtxPushCurrent") and not recorder.names("cuCtxPopCurrent")


def test_tampered_cubin_is_refused_before_loading(recorder: RecordingDriver, variants) -> None:
    path = variants[0].cubin_path
    path.write_bytes(path.read_bytes()[::-1])
    with pytest.raises(IntegrityError, match="sha256"):
        runner.load_variant(variants[0], 0)
    assert recorder.names("cuModuleLoadData") == []
    assert len(recorder.names("cuCtxPushCurrent")) == len(recorder.names("cuCtxPopCurrent"))


def test_kernel_needing_more_shared_memory_than_the_device(
    recorder: RecordingDriver, variants, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = driver.DeviceInfo(0, "small", (9, 0), 132, 100_000)
    monkeypatch.setattr(runner, "device_info", lambda ordinal: small)
    kernel = variants[0].kernels[0]
    with pytest.raises(CudaDriverError) as error:
        runner.load_variant(variants[0], 0)
    assert f"{kernel.symbol} needs {kernel.dynamic_smem_bytes} bytes" in str(error.value)
    assert "allows 100000" in str(error.value)
    assert recorder.calls == []
