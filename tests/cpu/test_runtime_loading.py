"""dglu.runner and dglu.launch over stand-ins for the driver calls and for torch (no GPU).

load_variant: the cubin is verified before cuModuleLoadData, a module is loaded once per
(context, sha256), each kernel's shared-memory attribute is set once, the caller's
context is restored. run_variant: kernels launch in manifest order on the call's stream
with the grids, descriptors, workspaces and parameters the manifest asks for: dense or
discrete weights (b_descriptors first, the b_expert template), static or dynamic
scheduling (tile_counter), clusters of one or two CTAs; nothing at all when M = 0.
Repeated calls reuse their launch plan and their stream's workspaces. dglu.workspaces:
sizes, driver allocations on the pool's stream, reuse, growth and release freeing on the
stream, out of memory, fresh allocations under graph capture, zeroing by memset, and
alignment. prepare_launch / launch_kernel: the cluster launch attribute.
"""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest
import stand_ins
from conftest_runtime import DEFAULT_KEYS, variant_key, write_artifacts
from dglu import driver, launch, runner, workspaces
from dglu.errors import CudaDriverError, DeviceMemoryError, IntegrityError
from dglu.manifest import read_manifest
from dglu.params import KernelArguments
from dglu.problem import Problem, TensorView


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> stand_ins.StandInDriver:
    """The shared stand-in driver and H200, with fresh context caches."""
    driver.initialize.cache_clear()
    driver.primary_context.cache_clear()
    yield stand_ins.install(monkeypatch, (), tmp_path)
    driver.initialize.cache_clear()
    driver.primary_context.cache_clear()


@pytest.fixture
def variants(tmp_path: Path):
    write_artifacts(tmp_path, DEFAULT_KEYS[:2])
    return read_manifest(tmp_path).variants


def test_loads_once_and_sets_shared_memory_once(recorder: stand_ins.StandInDriver, variants) -> None:
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


def test_pushes_the_primary_context_and_pops_it(recorder: stand_ins.StandInDriver, variants) -> None:
    runner.load_variant(variants[0], 0)
    sequence = [name for name, _ in recorder.calls]
    assert sequence.index("cuCtxPushCurrent") < sequence.index("cuModuleLoadData")
    assert sequence.index("cuModuleGetFunction") < sequence.index("cuCtxPopCurrent")
    assert sequence.count("cuCtxPushCurrent") == sequence.count("cuCtxPopCurrent") == 1


def test_keeps_the_context_when_it_is_already_current(recorder: stand_ins.StandInDriver, variants) -> None:
    recorder.current = 0xC0
    runner.load_variant(variants[0], 0)
    assert not recorder.names("cuCtxPushCurrent") and not recorder.names("cuCtxPopCurrent")


def test_tampered_cubin_is_refused_before_loading(recorder: stand_ins.StandInDriver, variants) -> None:
    path = variants[0].cubin_path
    path.write_bytes(path.read_bytes()[::-1])
    with pytest.raises(IntegrityError, match="sha256"):
        runner.load_variant(variants[0], 0)
    assert recorder.names("cuModuleLoadData") == []
    assert len(recorder.names("cuCtxPushCurrent")) == len(recorder.names("cuCtxPopCurrent"))


def test_kernel_needing_more_shared_memory_than_the_device(
    recorder: stand_ins.StandInDriver, variants, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = driver.DeviceInfo(0, "small", (9, 0), 132, 100_000)
    monkeypatch.setattr(runner, "device_info", lambda ordinal: small)
    kernel = variants[0].kernels[0]
    with pytest.raises(CudaDriverError) as error:
        runner.load_variant(variants[0], 0)
    assert f"{kernel.symbol} needs {kernel.dynamic_smem_bytes} bytes" in str(error.value)
    assert "allows 100000" in str(error.value)
    assert recorder.calls == []


@pytest.mark.parametrize(("min_driver", "loads"), [(12080, True), (12090, True), (13000, False)])
def test_a_cubin_needing_a_newer_driver_is_refused(
    recorder: stand_ins.StandInDriver, tmp_path: Path, min_driver: int, loads: bool
) -> None:
    write_artifacts(tmp_path / "v", [variant_key()], min_driver=min_driver)
    (variant,) = read_manifest(tmp_path / "v").variants
    if loads:
        assert len(runner.load_variant(variant, 0).functions) == len(variant.kernels)
        return
    with pytest.raises(CudaDriverError) as error:
        runner.load_variant(variant, 0)
    assert str(error.value) == (
        f"variant {variant.name} needs CUDA driver 13.0 or newer (its cubin's PTX ISA); this "
        "driver is 12.9 (cuDriverGetVersion 12090): update the NVIDIA driver"
    )
    assert recorder.names("cuModuleLoadData") == []


STREAM = 0x5EED


class FakePool:
    """A stream's workspace pool without a driver: the lock, the stream objects and a
    generation that never changes (the fake acquire's workspaces stay)."""

    def __init__(self, device: int, stream: int) -> None:
        self.lock = contextlib.nullcontext()
        self.stream = self.cu_stream = stream
        self.workspaces: dict = {}  # the fake acquire pools nothing
        self.generation = 0

    def capturing(self) -> bool:
        return False


WORKSPACE_POINTERS = {"dbias_ws": 0x9000, "b_desc_ws": 0xA800, "tile_counter": 0xAC00}
B_PTRS = 0xB008  # an int64 array at an 8-byte (not 16-byte) aligned address
N, K, L = 96, 200, 5


def problem_of(m: int, with_dbias: bool, discrete: bool = False) -> Problem:
    views = {
        "a": TensorView(0, 0xA000, (m, K, 1), (K, 1, m * K), "bf16"),
        "c": TensorView(0, 0xC000, (m, 2 * N, 1), (2 * N, 1, 2 * m * N), "bf16"),
        "d_row": TensorView(0, 0xD000, (m, 2 * N, 1), (2 * N, 1, 2 * m * N), "bf16"),
        "dprob": TensorView(0, 0xE000, (m, 1, 1), (1, 1, 1), "fp32"),
    }
    if discrete:
        views["b_ptrs"] = TensorView(0, B_PTRS, (L,), (1,), "i64")
        views["b_expert"] = TensorView(0, B_PTRS - 8, (N, K, 1), (K, 1, N * K), "bf16")
    else:
        views["b"] = TensorView(0, 0xB000, (N, K, L), (K, 1, N * K), "bf16")
    if with_dbias:
        views["dbias"] = TensorView(0, 0xF000, (L, 2 * N, 1), (2 * N, 1, 1), "bf16")
    scalars = {"m": m, "n": N, "k": K, "l": L, "n2": 2 * N, "l_n2": L * 2 * N}
    return Problem(scalars=scalars, origins={}, tensors=views)


def pointer(value: int) -> bytes:
    return value.to_bytes(8, "little")


@pytest.fixture
def launches(recorder: stand_ins.StandInDriver, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Each launch run_variant makes, with its packed parameters; nothing reaches a GPU."""
    records: list[dict] = []
    encoded: list[tuple] = []
    allocated: list[str] = []
    zeroed: list[str] = []

    def acquire(rules, scalars, device, pool):
        allocated.extend(sorted(rules))
        return {
            name: workspaces.Workspace(name, rule, WORKSPACE_POINTERS[name], 10**6)
            for name, rule in rules.items()
        }

    workspace_names = {pointer: name for name, pointer in WORKSPACE_POINTERS.items()}

    def clear(pointer, size, stream):
        zeroed.append(workspace_names.get(pointer, (pointer, size)))

    def encode(rule, view):
        encoded.append((rule, view))
        return view.pointer.to_bytes(8, "little") * 16

    def launch(prepared):
        kernel = prepared.kernel
        records.append(
            {
                "function": prepared.function,
                "symbol": kernel.symbol,
                "cluster": kernel.cluster,
                "grid": prepared.grid,
                "stream": prepared.stream,
                "params": {
                    param.name: bytes(buffer)
                    for param, buffer in zip(
                        kernel.params, prepared.arguments.buffers, strict=True
                    )
                },
                "encoded": list(encoded),
                "allocated": list(allocated),
                "zeroed": list(zeroed),
            }
        )
        encoded.clear()

    monkeypatch.setattr(runner.workspace_pool, "acquire", acquire)
    monkeypatch.setattr(runner.workspace_pool, "stream_pool", FakePool)
    monkeypatch.setattr(runner.workspace_pool, "clear", clear)
    monkeypatch.setattr(runner, "encode_tensor_map", encode)
    monkeypatch.setattr(runner, "launch_kernel", launch)
    return records


def loaded_variant(tmp_path: Path, **key):
    write_artifacts(tmp_path, [variant_key(**key)])
    (variant,) = read_manifest(tmp_path).variants
    return runner.load_variant(variant, 0)


def test_runs_main_then_finish_with_the_workspace(launches, variants) -> None:
    loaded = runner.load_variant(variants[0], 0)  # dswiglu with dbias
    problem = problem_of(m=1380, with_dbias=True)
    runner.run_variant(loaded, problem, STREAM)

    main, finish = launches
    assert [main["symbol"], finish["symbol"]] == [k.symbol for k in variants[0].kernels]
    assert (main["function"], finish["function"]) == loaded.functions
    assert main["grid"] == (11, 1, 1) and finish["grid"] == (4, 1, 1)  # ceil(1380/128); 960/256
    assert main["stream"] == finish["stream"] == STREAM
    assert [view.pointer for _, view in main["encoded"]] == [0xA000, 0xB000]
    assert [rule for rule, _ in main["encoded"]] == [variants[0].tma["a"], variants[0].tma["b"]]
    # dbias_ws is zeroed by dbias_finish (and once when the pool allocates it): no clear
    assert main["allocated"] == ["dbias_ws"] and main["zeroed"] == []
    assert main["params"]["dbias_ws"] == pointer(0x9000)
    assert main["params"]["b_desc_ws"] == main["params"]["tile_counter"] == bytes(8)
    assert [finish["params"]["dbias_ws"], finish["params"]["dbias"]] == [
        pointer(0x9000),
        pointer(0xF000),
    ]


def test_without_dbias_the_optional_workspace_is_null(launches, variants) -> None:
    assert dict(variants[1].workspaces) == {}
    loaded = runner.load_variant(variants[1], 0)  # dswiglu without dbias
    runner.run_variant(loaded, problem_of(m=256, with_dbias=False), STREAM)
    (main,) = launches
    assert main["params"]["dbias_ws"] == bytes(8)


@pytest.mark.parametrize(
    ("key", "discrete"),
    [({}, False), ({"weight_mode": "discrete"}, True), ({"scheduler": "dynamic"}, False)],
)
def test_no_rows_launches_and_allocates_nothing(launches, tmp_path: Path, key, discrete) -> None:
    """M = 0: no tiles, so no kernel of the variant runs (dbias and dprob stay untouched)."""
    loaded = loaded_variant(tmp_path, dbias=True, **key)
    runner.run_variant(loaded, problem_of(m=0, with_dbias=True, discrete=discrete), STREAM)
    assert launches == []


def test_tensors_to_clear_are_zeroed_first_even_without_rows(launches, variants) -> None:
    """The wrapper's new dbias (L * 2N bf16) is cleared before the kernels, and also when
    M = 0 leaves nothing to launch (dbias_ws is zeroed by dbias_finish, never per call)."""
    loaded = runner.load_variant(variants[0], 0)
    runner.run_variant(loaded, problem_of(m=1380, with_dbias=True), STREAM, ("dbias",))
    dbias = (0xF000, L * 2 * N * 2)
    assert len(launches) == 2 and launches[0]["zeroed"] == [dbias]
    runner.run_variant(loaded, problem_of(m=0, with_dbias=True), STREAM, ("dbias",))
    runner.run_variant(loaded, problem_of(m=1380, with_dbias=True), STREAM, ("dbias",))
    assert len(launches) == 4 and launches[2]["zeroed"] == [dbias, dbias, dbias]


@pytest.mark.parametrize("b_major", ["k", "n"])
def test_discrete_weights_build_the_expert_descriptors_first(
    launches, tmp_path: Path, b_major: str
) -> None:
    loaded = loaded_variant(tmp_path, weight_mode="discrete", b_major=b_major, dbias=True)
    assert sorted(loaded.variant.workspaces) == ["b_desc_ws", "dbias_ws"]
    problem = problem_of(m=1380, with_dbias=True, discrete=True)
    runner.run_variant(loaded, problem, STREAM)

    descriptors, main, finish = launches
    assert [d["symbol"] for d in launches] == [k.symbol for k in loaded.variant.kernels]
    assert descriptors["grid"] == (1, 1, 1)  # ceil(L / 128)
    assert descriptors["allocated"] == ["b_desc_ws", "dbias_ws"]  # before the first launch
    # every descriptor of the call is encoded before its first launch, in kernel order
    (rule, template), *main_encoded = descriptors["encoded"]
    assert rule == loaded.variant.tma["b_expert"] and template == problem.tensors["b_expert"]
    assert descriptors["params"]["b_ptrs"] == pointer(B_PTRS)
    assert descriptors["params"]["b_desc_ws"] == main["params"]["b_desc_ws"] == pointer(0xA800)
    assert [view.pointer for _, view in main_encoded] == [0xA000, B_PTRS - 8]
    assert main["params"]["b_expert_extents"] == struct.pack("<ii", N, K)
    assert main["params"]["tile_counter"] == bytes(8)
    assert finish["params"]["dbias_ws"] == pointer(0x9000)


def test_dynamic_scheduling_passes_the_tile_counter(launches, tmp_path: Path) -> None:
    loaded = loaded_variant(tmp_path, scheduler="dynamic", dbias=False)
    assert list(loaded.variant.workspaces) == ["tile_counter"]
    runner.run_variant(loaded, problem_of(m=1380, with_dbias=False), STREAM)
    (main,) = launches
    assert main["params"]["tile_counter"] == pointer(0xAC00)
    assert main["params"]["b_desc_ws"] == main["params"]["dbias_ws"] == bytes(8)
    assert main["grid"] == (11, 1, 1)


@pytest.mark.parametrize(("m", "grid"), [(1380, (12, 1, 1)), (128 * 300, (132, 1, 1))])
def test_a_two_cta_cluster_launches_whole_clusters(launches, tmp_path: Path, m, grid) -> None:
    """11 tiles make 6 clusters of 2 CTAs; many tiles fill the 66 cluster slots of 132 SMs."""
    loaded = loaded_variant(tmp_path, cluster_m=2, dbias=False)
    runner.run_variant(loaded, problem_of(m=m, with_dbias=False), STREAM)
    (main,) = launches
    assert (main["grid"], main["cluster"]) == (grid, (2, 1, 1))


def test_a_repeated_call_reuses_its_plan(launches, variants) -> None:
    """The second identical call encodes nothing, packs nothing and clears nothing (its
    dbias_ws is zeroed by dbias_finish); it launches the same prepared arguments."""
    loaded = runner.load_variant(variants[0], 0)
    problem = problem_of(m=1380, with_dbias=True)
    ready = runner.run_variant(loaded, problem, STREAM)
    assert runner.run_variant(loaded, problem, STREAM, ready=ready) is ready
    first_main, first_finish, main, finish = launches
    assert main["encoded"] == [] and finish["encoded"] == []
    assert main["params"] == first_main["params"] and finish["params"] == first_finish["params"]
    assert main["zeroed"] == []
    runner.run_variant(loaded, problem_of(m=2048, with_dbias=True), STREAM)
    assert launches[4]["encoded"] and launches[4]["grid"] == (16, 1, 1)


SCALARS = {"l": L, "l_n2": L * 2 * N}
NAMES = ["b_desc_ws", "dbias_ws", "tile_counter"]


@pytest.fixture
def rules(tmp_path: Path) -> dict:
    """The workspace rules of a discrete, dbias, dynamic-scheduler variant, by name."""
    key = variant_key(weight_mode="discrete", dbias=True, scheduler="dynamic")
    write_artifacts(tmp_path / "rules", [key])
    (variant,) = read_manifest(tmp_path / "rules").variants
    return {name: variant.workspaces[name] for name in NAMES}


RELAXED = workspaces.cuda_driver().CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED


def _relaxed(*calls: tuple, previous: object = None) -> list[tuple]:
    """``calls`` inside the relaxed stream-capture mode, the ``previous`` mode (what the
    stand-in answered) restored after."""
    return [("cuThreadExchangeStreamCaptureMode", (RELAXED,)), *calls,
            ("cuThreadExchangeStreamCaptureMode", (previous,))]


def test_pooled_workspaces_are_synchronous_driver_allocations_kept_per_stream(recorder, rules) -> None:
    """b_desc_ws: L * 128 bytes; dbias_ws: L * 2N fp32; tile_counter: 16 bytes; allocated
    with cuMemAlloc (never cuMemAllocAsync, whose first use creates the device's default
    memory pool) in the relaxed capture mode once, then reused by the next call; a grown
    workspace is allocated anew and the old one freed after the pool's stream is
    synchronized; release_all frees every pooled one that way, in the device's context.
    dbias_ws (``zero: by_consumer``) is cleared once, when allocated, on the pool's stream."""
    pool = workspaces.stream_pool(0, STREAM)
    made = workspaces.acquire(rules, SCALARS, 0, pool)
    assert recorder.calls == [
        *_relaxed(("cuMemAlloc", (L * 16 * 8,))),
        *_relaxed(("cuMemAlloc", (L * 2 * N * 4,))),
        ("cuMemsetD32Async", (made["dbias_ws"].pointer, 0, L * 2 * N, pool.cu_stream)),
        *_relaxed(("cuMemAlloc", (16,))),
    ]
    assert {n: w.elements for n, w in made.items()} == {
        "b_desc_ws": 16 * L, "dbias_ws": L * 2 * N, "tile_counter": 4
    }
    assert sorted(recorder.allocated) == sorted(w.pointer for w in made.values())
    assert all(w.pointer % w.rule.align == 0 for w in made.values())
    first = len(recorder.calls)
    assert workspaces.acquire(rules, SCALARS, 0, pool) == made
    assert recorder.calls[first:] == []

    bigger = workspaces.acquire({"dbias_ws": rules["dbias_ws"]}, {"l_n2": 4 * L * 2 * N}, 0, pool)
    grown = bigger["dbias_ws"]
    assert recorder.calls[first:] == [
        *_relaxed(("cuMemAlloc", (4 * L * 2 * N * 4,))),
        ("cuMemsetD32Async", (grown.pointer, 0, 4 * L * 2 * N, pool.cu_stream)),
        *_relaxed(("cuStreamSynchronize", (pool.cu_stream,)), ("cuMemFree", (made["dbias_ws"].pointer,))),
    ]
    assert grown.elements == 4 * L * 2 * N and grown.pointer != made["dbias_ws"].pointer
    assert workspaces.acquire(rules, SCALARS, 0, pool)["dbias_ws"] is grown  # big enough

    first = len(recorder.calls)
    workspaces.release_all()
    released = recorder.calls[first:]
    pushed = released.index(("cuCtxPushCurrent", (stand_ins.PRIMARY_CONTEXT,)))
    assert released[pushed + 1:-1] == [
        call for w in (made["b_desc_ws"], grown, made["tile_counter"])
        for call in _relaxed(("cuStreamSynchronize", (pool.cu_stream,)), ("cuMemFree", (w.pointer,)))
    ]
    assert released[-1][0] == "cuCtxPopCurrent" and recorder.pushed == []
    assert recorder.allocated == {} and pool.workspaces == {}
    assert workspaces.stream_pool(0, STREAM) is not pool


def test_no_room_for_a_pooled_workspace_is_a_device_memory_error_and_keeps_the_old_one(
    recorder, rules
) -> None:
    pool = workspaces.stream_pool(0, STREAM)
    dbias_only = {"dbias_ws": rules["dbias_ws"]}
    (old,) = workspaces.acquire(dbias_only, SCALARS, 0, pool).values()
    recorder.fail_next_allocation()
    with pytest.raises(
        DeviceMemoryError,
        match=rf"^workspace dbias_ws: no room for {8 * L * 2 * N} fp32 elements "
        rf"\({8 * L * 2 * N * 4} bytes\) on cuda:0 \(cuMemAlloc failed: "
        r"CUDA_ERROR_OUT_OF_MEMORY.*\); nothing was enqueued and no argument was written",
    ):
        workspaces.acquire(dbias_only, {"l_n2": 8 * L * 2 * N}, 0, pool)
    assert recorder.names("cuMemFree") == [] and old.pointer in recorder.allocated
    assert workspaces.acquire(dbias_only, SCALARS, 0, pool)["dbias_ws"] is old


def test_a_misaligned_allocation_is_freed_and_refused(monkeypatch: pytest.MonkeyPatch, rules) -> None:
    calls = []
    monkeypatch.setattr(
        workspaces, "checked", lambda name, *args: calls.append((name, args)) or 0xA840
    )
    pool = workspaces.StreamWorkspaces(STREAM)
    with pytest.raises(RuntimeError, match="workspace b_desc_ws: .*0xa840.* not 128-byte"):
        workspaces.acquire({"b_desc_ws": rules["b_desc_ws"]}, SCALARS, 0, pool)
    assert calls == [
        *_relaxed(("cuMemAlloc", (L * 16 * 8,)), previous=0xA840),
        *_relaxed(("cuStreamSynchronize", (pool.cu_stream,)), ("cuMemFree", (0xA840,)), previous=0xA840),
    ]
    assert pool.workspaces == {}


def test_graph_workspaces_are_driver_allocations_on_the_stream_and_not_pooled(
    monkeypatch: pytest.MonkeyPatch, rules
) -> None:
    """While capturing: one cuMemAllocAsync per workspace on the stream (bytes of its
    count), dbias_ws (``by_consumer``) cleared after its allocation (inside the graph, so
    on every replay), freed by free_graph_workspaces on the same stream; no pool is
    involved."""
    calls = []
    addresses = iter([0x1000, 0x2000, 0x3000])

    def driver(name: str, *args: object) -> object:
        calls.append((name, args))
        return next(addresses) if name == "cuMemAllocAsync" else None

    monkeypatch.setattr(workspaces, "checked", driver)
    made = workspaces.graph_workspaces(rules, SCALARS, 0, STREAM)
    assert {n: (w.pointer, w.elements) for n, w in made.items()} == {
        "b_desc_ws": (0x1000, 16 * L),
        "dbias_ws": (0x2000, L * 2 * N),
        "tile_counter": (0x3000, 4),
    }
    assert calls == [
        ("cuMemAllocAsync", (16 * L * 8, STREAM)),
        ("cuMemAllocAsync", (L * 2 * N * 4, STREAM)),
        ("cuMemsetD32Async", (0x2000, 0, L * 2 * N, STREAM)),
        ("cuMemAllocAsync", (16, STREAM)),
    ]
    workspaces.free_graph_workspaces(made, STREAM)
    assert calls[4:] == [("cuMemFreeAsync", (p, STREAM)) for p in (0x1000, 0x2000, 0x3000)]


def test_zeroing_clears_what_the_problem_uses_of_the_zeroed_workspaces(rules) -> None:
    """Each call clears tile_counter (``each_call``); dbias_ws (``by_consumer``) only when
    the memory is given (XLA's), not allocated and cleared by dglu."""
    made = {  # workspaces larger than this problem needs: only its part is cleared
        name: workspaces.Workspace(name, rules[name], pointer, 10**6)
        for name, pointer in zip(NAMES, [0xA800, 0x9000, 0xAC00])
    }
    assert workspaces.zeroed_ranges(made, SCALARS) == [(0xAC00, 16)]
    assert workspaces.zeroed_ranges(made, SCALARS, given=True) == [(0x9000, L * 2 * N * 4), (0xAC00, 16)]


def write_variant(tmp_path: Path, **key):
    write_artifacts(tmp_path, [variant_key(**key)])
    (variant,) = read_manifest(tmp_path).variants
    return variant


@pytest.mark.parametrize("cluster", [(1, 1, 1), (2, 1, 1)])
def test_launch_sets_the_cluster_dimension_only_for_clusters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster
) -> None:
    calls = []
    monkeypatch.setattr(launch, "checked", lambda name, *args: calls.append((name, args)))
    kernel = write_variant(tmp_path, cluster_m=cluster[0], dbias=False).kernels[0]
    arguments = KernelArguments([bytes(8)])
    launch.launch_kernel(launch.prepare_launch(0x2000, kernel, (12, 1, 1), STREAM, arguments))
    ((name, (config, function, params, extra)),) = calls
    assert int(config.hStream) == STREAM
    assert (name, function, params, extra) == ("cuLaunchKernelEx", 0x2000, arguments.address, 0)
    assert (config.gridDimX, config.blockDimX, config.sharedMemBytes) == (12, 384, 200_000)
    # a launch of 1x1x1 clusters runs slower than a plain one: no attribute then
    clustered = cluster != (1, 1, 1)
    assert config.numAttrs == int(clustered)
    dims = [(a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z) for a in config.attrs]
    assert dims == ([cluster] if clustered else [])


def test_clear_uses_words_when_the_size_allows(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(workspaces, "checked", lambda name, *args: calls.append((name, args)))
    workspaces.clear(0x9000, 4 * 96, STREAM)
    workspaces.clear(0x9000, 6, STREAM)
    assert calls == [
        ("cuMemsetD32Async", (0x9000, 0, 96, STREAM)),
        ("cuMemsetD8Async", (0x9000, 0, 6, STREAM)),
    ]


def test_a_plan_for_new_output_addresses_repacks_only_what_moved(launches, variants) -> None:
    """A new problem of the same scalars (the wrapper's fresh D_row and dbias) starts from
    the last plan: no descriptor of an unmoved tensor is encoded again and only the moved
    tensors' parameters change; its launches equal those of a plan made from nothing."""
    loaded = runner.load_variant(variants[0], 0)
    first = problem_of(m=1380, with_dbias=True)
    runner.run_variant(loaded, first, STREAM, ("dbias",))
    moved = {**first.tensors, "d_row": first.tensors["d_row"]._replace(pointer=0x7000),
             "dbias": first.tensors["dbias"]._replace(pointer=0x8000)}
    runner.run_variant(loaded, Problem(first.scalars, {}, moved), STREAM, ("dbias",))
    main, finish = launches[2:]
    assert main["encoded"] == finish["encoded"] == []  # A's and B's descriptors serve again
    assert main["zeroed"][-1] == (0x8000, L * 2 * N * 2)  # the new dbias
    changed = {name for name in main["params"] if main["params"][name] != launches[0]["params"][name]}
    assert changed == {"d_row"} and main["params"]["d_row"] == pointer(0x7000)
    assert finish["params"]["dbias"] == pointer(0x8000)
    loaded.last_plans.clear()  # the same call planned from nothing
    runner.run_variant(loaded, Problem(first.scalars, {}, moved), STREAM, ("dbias",))
    assert [launch["params"] for launch in launches[4:]] == [main["params"], finish["params"]]
