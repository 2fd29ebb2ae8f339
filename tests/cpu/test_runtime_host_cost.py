"""What a repeated call costs the host, counted instead of timed: a repeat of the last
call (its tensors' signature) is launched from it (dglu.bound's pre-bound call): the
wrapper and execute() bind nothing (no tensor key), validate nothing, encode no new TMA
descriptor and make only the driver calls that enqueue work: the launches, and the memset
of the wrapper's new dbias (dbias_ws is zeroed by dbias_finish, the kernel that reads it).
A first call allocates its pooled workspace with cuMemAlloc, never cuMemAllocAsync.
The capture query and the context query are made only where the stream's or the context's
state is not known. Tensors at new addresses (the same shapes, strides and dtypes) have
only their addresses checked and patched.

Stand-ins: tests/cpu/stand_ins.py (the driver's answers, the device), a hand-written
manifest, CPU tensors; everything else is the real call path, cuStreamIsCapturing and
cuCtxGetCurrent included.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts  # noqa: E402
from dglu import api, bound, driver, runner  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402

M, N, K, L = 1024, 96, 256, 4
TORCH_DEFAULT_STREAM, SIDE_STREAM = 0, stand_ins.STREAM
LAUNCHES = Counter({"cuLaunchKernelEx": 2})  # main, dbias_finish
NEW_DBIAS = Counter({"cuMemsetD32Async": 1})  # the wrapper's new dbias is zeroed
CAPTURE_QUERY = Counter({"cuStreamIsCapturing": 1})
CONTEXT_SWITCH = Counter({"cuCtxGetCurrent": 1, "cuCtxPushCurrent": 1, "cuCtxPopCurrent": 1})
TILE_COUNTER = Counter({"cuMemsetD32Async": 1})  # the dynamic scheduler's counter


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Counter]:
    write_artifacts(tmp_path, [variant_key()])
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    counts = {"driver": fake.counts, "other": Counter()}
    for module, name in [(bound, "describe_tensors"), (bound, "moved_views"), (runner, "encode_tensor_map")]:
        original = getattr(module, name)

        def counting(*args, _original=original, _name=name):
            counts["other"][_name] += 1
            return _original(*args)

        # the real encode_tensor_map caches descriptors (an LRU): count only its misses
        cached = functools.lru_cache(maxsize=None)(counting) if module is runner else counting
        monkeypatch.setattr(module, name, cached)
    return counts


def torch_state(monkeypatch: pytest.MonkeyPatch, stream: int, torch_on_device: bool) -> None:
    """torch's current stream is ``stream``; with ``torch_on_device``, torch's current
    device is the call's (the CPU tensors' None) and its primary context is current, as
    after torch's own work on it; else no context is current and torch knows no device."""
    monkeypatch.setattr(bound, "resolve_stream", lambda current_stream, device: stream)
    if torch_on_device:
        monkeypatch.setattr(driver, "torch_current_device", lambda: None)
        fake = driver.checked  # the stand-in driver stand_ins.install put in place
        fake.current = stand_ins.PRIMARY_CONTEXT


def inputs() -> dict[str, torch.Tensor]:
    return stand_ins.dense_call_tensors(M, N, K, L)


def calls_of_a_second(counted: dict[str, Counter], first, second) -> tuple[list, Counter, Counter]:
    """Both calls' results (the first's still held during the second), and the driver and
    other calls the second made."""
    results = [first()]
    for counter in counted.values():
        counter.clear()
    results.append(second())
    return results, +counted["driver"], +counted["other"]


def calls_of_a_repeat(counted: dict[str, Counter], call) -> tuple[Counter, Counter]:
    _, driver_calls, other_calls = calls_of_a_second(counted, call, call)
    return driver_calls, other_calls


def class_op(t: dict[str, torch.Tensor], **options):
    """A compiled class-API op's execute for the call tensors ``t``."""
    op, arguments = stand_ins.compiled_class_op(t, **options)
    return lambda: op.execute(**arguments)


SCENARIOS = {  # (torch's current stream, torch on the call's device) -> extra driver calls
    "torch-default-stream": (TORCH_DEFAULT_STREAM, True, Counter()),
    "side-stream": (SIDE_STREAM, True, CAPTURE_QUERY),
    "context-not-current": (TORCH_DEFAULT_STREAM, False, CONTEXT_SWITCH),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_repeated_execute_only_launches(counted, monkeypatch, scenario: str) -> None:
    stream, on_device, extra = SCENARIOS[scenario]
    torch_state(monkeypatch, stream, on_device)
    driver_calls, other = calls_of_a_repeat(counted, class_op(inputs()))
    assert other == Counter() and driver_calls == LAUNCHES + extra, (driver_calls, other)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_repeated_wrapper_call_only_allocates_and_enqueues(counted, monkeypatch, scenario: str) -> None:
    stream, on_device, extra = SCENARIOS[scenario]
    torch_state(monkeypatch, stream, on_device)
    t = inputs()
    driver_calls, other = calls_of_a_repeat(counted, lambda: api.grouped_gemm_dglu(**t, generate_dbias=True))
    assert other == Counter() and driver_calls == LAUNCHES + NEW_DBIAS + extra, (driver_calls, other)


def test_the_dynamic_scheduler_adds_only_its_counter_memset(tmp_path: Path, monkeypatch) -> None:
    write_artifacts(tmp_path, [variant_key(scheduler="dynamic")])
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    torch_state(monkeypatch, TORCH_DEFAULT_STREAM, True)
    execute = class_op(inputs(), use_dynamic_sched=True)
    execute()
    fake.counts.clear()
    execute()
    assert +fake.counts == LAUNCHES + TILE_COUNTER


def test_a_first_call_validates_and_encodes(counted) -> None:
    """A first call validates, encodes its two descriptors and allocates its pooled
    workspace synchronously (cuMemAlloc, in the relaxed capture mode): never cuMemAllocAsync, whose first use creates the device's default
    memory pool (~11 ms on the H200)."""
    api.grouped_gemm_dglu(**inputs(), generate_dbias=True)
    assert counted["other"] == Counter({"describe_tensors": 1, "encode_tensor_map": 2})
    allocations = {name: counted["driver"][name] for name in ("cuMemAlloc", "cuMemAllocAsync")}
    assert allocations == {"cuMemAlloc": 1, "cuMemAllocAsync": 0}
    assert counted["driver"]["cuThreadExchangeStreamCaptureMode"] == 2


def test_inputs_at_new_addresses_check_only_their_addresses(counted, monkeypatch) -> None:
    """A call of the last call's shapes, strides and dtypes with A elsewhere: A's address
    checked (moved_views), its descriptor encoded anew, nothing else validated; the driver
    calls of a repeat."""
    torch_state(monkeypatch, TORCH_DEFAULT_STREAM, True)
    t = inputs()
    _, driver_calls, other_calls = calls_of_a_second(
        counted, lambda: api.grouped_gemm_dglu(**t, generate_dbias=True),
        lambda: api.grouped_gemm_dglu(**{**t, "a_tensor": t["a_tensor"].clone()}, generate_dbias=True),
    )
    assert driver_calls == LAUNCHES + NEW_DBIAS
    assert other_calls == Counter({"moved_views": 1, "encode_tensor_map": 1})


def test_wrapper_outputs_at_new_addresses_only_patch_their_addresses(counted, monkeypatch) -> None:
    """The last plan's launches with D_row's and dbias's addresses patched (this manifest's
    kernels take both by address: no TMA descriptor to encode): no check, the same driver
    calls as a repeat."""
    torch_state(monkeypatch, TORCH_DEFAULT_STREAM, True)
    t = inputs()
    call = lambda: api.grouped_gemm_dglu(**t, generate_dbias=True)  # noqa: E731
    kept, driver_calls, other_calls = calls_of_a_second(counted, call, call)  # the first results still held
    assert kept[0]["d_row_tensor"].data_ptr() != kept[1]["d_row_tensor"].data_ptr()
    assert driver_calls == LAUNCHES + NEW_DBIAS
    assert other_calls == Counter()


def test_with_per_thread_default_streams_the_default_stream_is_asked_whether_it_captures(
    counted, monkeypatch
) -> None:
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    torch_state(monkeypatch, TORCH_DEFAULT_STREAM, True)
    driver_calls, _ = calls_of_a_repeat(counted, class_op(inputs()))
    assert driver_calls == LAUNCHES + CAPTURE_QUERY
