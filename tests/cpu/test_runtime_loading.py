"""dglu.runner over stand-ins for the driver calls and for torch (no GPU needed).

load_variant: the cubin is verified before cuModuleLoadData, a module is loaded once per
(context, sha256), each kernel's shared-memory attribute is set once, the caller's
context is restored. run_variant: kernels launch in manifest order on the call's stream
with the grids, descriptors, workspace and parameters the manifest asks for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_runtime import DEFAULT_KEYS, write_artifacts
from dglu import driver, runner
from dglu.errors import CudaDriverError, IntegrityError
from dglu.manifest import read_manifest
from dglu.problem import Problem, TensorView

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


class FakeWorkspace:
    """What run_variant reads of a workspace tensor."""

    def __init__(self, pointer: int, count: int) -> None:
        self.pointer, self.shape = pointer, (count,)

    def data_ptr(self) -> int:
        return self.pointer

    def stride(self) -> tuple[int, ...]:
        return (1,)


class FakeStream:
    cuda_stream = 0x5EED


def problem_of(m: int, with_dbias: bool) -> Problem:
    n, k, l = 96, 200, 5
    views = {
        "a": TensorView(0, 0xA000, (m, k, 1), (k, 1, m * k), "bf16"),
        "b": TensorView(0, 0xB000, (n, k, l), (k, 1, n * k), "bf16"),
        "c": TensorView(0, 0xC000, (m, 2 * n, 1), (2 * n, 1, 2 * m * n), "bf16"),
        "d_row": TensorView(0, 0xD000, (m, 2 * n, 1), (2 * n, 1, 2 * m * n), "bf16"),
        "dprob": TensorView(0, 0xE000, (m, 1, 1), (1, 1, 1), "fp32"),
    }
    if with_dbias:
        views["dbias"] = TensorView(0, 0xF000, (l, 2 * n, 1), (2 * n, 1, 1), "bf16")
    return Problem(m=m, n=n, k=k, l=l, tensors=views)


@pytest.fixture
def launches(recorder: RecordingDriver, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Each launch run_variant makes, with its packed parameters; nothing reaches a GPU."""
    records: list[dict] = []
    encoded: list[tuple] = []

    def workspaces(loaded, problem, stream):
        return {
            name: FakeWorkspace(0x9000, problem.scalars["l_n2"])
            for name in runner.required_workspaces(loaded.variant)
        }

    def encode(rule, view):
        encoded.append((rule, view))
        return view.pointer.to_bytes(8, "little") * 16

    def launch(function, kernel, grid, stream, arguments):
        records.append(
            {
                "function": function,
                "symbol": kernel.symbol,
                "grid": grid,
                "stream": stream,
                "params": [bytes(buffer) for buffer in arguments.buffers],
                "encoded": list(encoded),
            }
        )

    monkeypatch.setattr(runner, "_workspaces", workspaces)
    monkeypatch.setattr(runner, "encode_tensor_map", encode)
    monkeypatch.setattr(runner, "launch_kernel", launch)
    return records


def test_runs_main_then_finish_with_the_workspace(launches, variants) -> None:
    loaded = runner.load_variant(variants[0], 0)  # dswiglu with dbias
    problem = problem_of(m=1380, with_dbias=True)
    runner.run_variant(loaded, problem, FakeStream())

    main, finish = launches
    assert [main["symbol"], finish["symbol"]] == [k.symbol for k in variants[0].kernels]
    assert (main["function"], finish["function"]) == loaded.functions
    assert main["grid"] == (11, 1, 1) and finish["grid"] == (4, 1, 1)  # ceil(1380/128); 960/256
    assert main["stream"] == finish["stream"] == FakeStream.cuda_stream
    assert [view.pointer for _, view in main["encoded"]] == [0xA000, 0xB000]
    assert [rule for rule, _ in main["encoded"]] == [variants[0].tma["a"], variants[0].tma["b"]]
    assert main["params"][7] == (0x9000).to_bytes(8, "little")  # dbias_ws
    assert main["params"][8] == bytes(8)  # b_desc_ws: discrete weights only
    assert finish["params"][:2] == [(0x9000).to_bytes(8, "little"), (0xF000).to_bytes(8, "little")]


def test_without_dbias_the_optional_workspace_is_null(launches, variants) -> None:
    assert runner.required_workspaces(variants[1]) == []
    loaded = runner.load_variant(variants[1], 0)  # dswiglu without dbias
    runner.run_variant(loaded, problem_of(m=256, with_dbias=False), FakeStream())
    (main,) = launches
    assert main["params"][7] == bytes(8)


def test_no_rows_skips_the_main_kernel(launches, variants) -> None:
    loaded = runner.load_variant(variants[0], 0)
    runner.run_variant(loaded, problem_of(m=0, with_dbias=True), FakeStream())
    assert [launch["symbol"] for launch in launches] == [variants[0].kernels[1].symbol]
    assert launches[0]["encoded"] == []
