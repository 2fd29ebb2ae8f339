"""Faults leave nothing half-done: each driver or allocation failure of a call raises an
error naming what failed and what to do, enqueues no memset or launch when it happens
before the first kernel, leaves no context pushed, and the next good call runs.

Stand-ins: tests/cpu/stand_ins.py (a driver that fails a chosen call, an H200, workspaces
at a fixed address), a hand-written manifest of the dense dbias variant (kernels main and
dbias_finish, workspace dbias_ws), CPU tensors; the rest is the real call path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts  # noqa: E402
from dglu import api, bound, streams, workspaces  # noqa: E402
from dglu.errors import (  # noqa: E402
    CudaDriverError,
    DeviceMemoryError,
    KernelLaunchError,
    KernelLoadError,
    StreamDeviceError,
)
from dglu.manifest import read_manifest  # noqa: E402

CUstream = pytest.importorskip("cuda.bindings.driver").CUstream

M, N, K, L = 1024, 96, 256, 4
MEMSET, LAUNCH = "cuMemsetD32Async", "cuLaunchKernelEx"
# A good wrapper call enqueues: clear its new dbias, main, dbias_finish (which leaves
# dbias_ws zero: it is cleared once, when allocated).
WRAPPER_ENQUEUES = [MEMSET, LAUNCH, LAUNCH]
EXECUTE_ENQUEUES = [LAUNCH, LAUNCH]  # execute() accumulates into the caller's dbias
# A call that allocates dbias_ws (the stream's first, or one after a failed call) clears it.
FIRST_WRAPPER_ENQUEUES, FIRST_EXECUTE_ENQUEUES = [MEMSET, *WRAPPER_ENQUEUES], [MEMSET, *EXECUTE_ENQUEUES]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> stand_ins.StandInDriver:
    write_artifacts(tmp_path, [variant_key()])
    return stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)


def inputs() -> dict[str, torch.Tensor]:
    return stand_ins.dense_call_tensors(M, N, K, L, dprob=2.0)


def wrapper_call(t: dict[str, torch.Tensor], **changes: object):
    return api.grouped_gemm_dglu(**t, generate_dbias=True, **changes)


def class_op(t: dict[str, torch.Tensor]) -> tuple[api.GroupedGemmDglu, dict[str, torch.Tensor]]:
    """An op with dbias over ``t`` and execute()'s output arguments (non-zero, to see writes)."""
    outputs = dict(
        d_row_tensor=torch.full((M, 2 * N, 1), 3.0, dtype=torch.bfloat16),
        dbias_tensor=torch.full((L, 2 * N, 1), 5.0, dtype=torch.bfloat16),
    )
    op = api.GroupedGemmDglu(
        sample_a=t["a_tensor"], sample_c=t["c_tensor"], sample_d_row=outputs["d_row_tensor"],
        sample_padded_offsets=t["padded_offsets"], sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"], sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"], sample_dbias=outputs["dbias_tensor"],
        sample_b=t["b_tensor"],
    )
    return op, outputs


def enqueued_by(fake: stand_ins.StandInDriver, call) -> list[str]:
    """The memsets and launches ``call`` enqueues (it must succeed)."""
    before = len(fake.enqueued())
    call()
    assert fake.pushed == [], "a context was left pushed"
    return fake.enqueued()[before:]


def assert_refused(fake: stand_ins.StandInDriver, call, error: type, match: str) -> None:
    """``call`` raises ``error`` matching ``match``, enqueues nothing, pops its context."""
    before = len(fake.enqueued())
    with pytest.raises(error, match=match):
        call()
    assert fake.enqueued()[before:] == [], "work was enqueued before the failure"
    assert fake.pushed == [], "a context was left pushed"


@pytest.mark.parametrize(
    ("failing", "error", "remedy"),
    [
        ("cuModuleLoadData", "CUDA_ERROR_INVALID_IMAGE", "rebuild it or reinstall dglu"),
        ("cuModuleLoadData", "CUDA_ERROR_OUT_OF_MEMORY", "Free device memory"),
        ("cuFuncSetAttribute", "CUDA_ERROR_INVALID_VALUE", "a retry tries the load again"),
    ],
)
def test_a_failed_cubin_load_names_the_variant_and_the_next_call_loads_it(
    fake, failing: str, error: str, remedy: str
) -> None:
    t = inputs()
    fake.fail(failing, error)
    assert_refused(
        fake,
        lambda: wrapper_call(t),
        KernelLoadError,
        rf"variant \S+: cannot load \S+\.cubin on cuda:\S+ \({failing} failed: {error}.*\); "
        rf"nothing was launched\. .*{remedy}",
    )
    assert enqueued_by(fake, lambda: wrapper_call(t)) == FIRST_WRAPPER_ENQUEUES
    assert fake.counts["cuModuleLoadData"] == 1 + (failing == "cuModuleLoadData")


def test_a_failed_compile_leaves_the_op_uncompiled_and_it_compiles_again(fake) -> None:
    t = inputs()
    op, outputs = class_op(t)
    fake.fail("cuModuleLoadData", "CUDA_ERROR_NO_BINARY_FOR_GPU")
    with pytest.raises(KernelLoadError, match="CUDA_ERROR_NO_BINARY_FOR_GPU"):
        op.compile()
    assert op._bound is None
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == FIRST_EXECUTE_ENQUEUES


def test_no_room_for_an_output_allocates_nothing_else_and_enqueues_nothing(
    fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = inputs()
    empty_strided = torch.empty_strided  # what the wrapper allocates its outputs with
    failures = [(M, 2 * N, 1)]  # D_row's shape: fail it once

    def empty_or_out_of_memory(*args, **kwargs):
        if failures and args and tuple(args[0]) == failures[0]:
            failures.pop()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 384.00 KiB")
        return empty_strided(*args, **kwargs)

    monkeypatch.setattr(torch, "empty_strided", empty_or_out_of_memory)
    assert_refused(
        fake,
        lambda: wrapper_call(t),
        DeviceMemoryError,
        rf"d_row_tensor: no room for the output \({M}, {2 * N}, 1\) torch.bfloat16 "
        rf"\({M * 2 * N * 2} bytes\) on cuda:None \(CUDA out of memory.*\); nothing was "
        r"enqueued and no argument was written\. Free device memory",
    )
    assert fake.allocations() == 0 and torch.equal(t["dprob_tensor"], inputs()["dprob_tensor"])
    assert enqueued_by(fake, lambda: wrapper_call(t)) == FIRST_WRAPPER_ENQUEUES


def test_no_room_for_a_workspace_enqueues_nothing_and_the_next_call_allocates_it(fake) -> None:
    t = inputs()
    op, outputs = class_op(t)
    op.compile()
    fake.fail_next_allocation()
    assert_refused(
        fake,
        lambda: op.execute(**t, **outputs),
        MemoryError,  # DeviceMemoryError is one
        rf"workspace dbias_ws: no room for {L * 2 * N} fp32 elements \({L * 2 * N * 4} bytes\) "
        r"on cuda:None \(cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY.*\); nothing was enqueued",
    )
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == FIRST_EXECUTE_ENQUEUES
    memset = fake.names(MEMSET)[-1]  # the new workspace's one clear
    assert memset[:3] == (stand_ins.WORKSPACE_ADDRESS, 0, L * 2 * N)


def test_a_failed_first_launch_wrote_nothing_of_the_callers_and_the_next_call_runs(fake) -> None:
    t = inputs()
    op, outputs = class_op(t)
    op.compile()
    fake.fail(LAUNCH, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
    before = len(fake.enqueued())
    with pytest.raises(
        KernelLaunchError,
        match=r"variant \S+: launching kernel main \(1 of 2, grid \(\d+, 1, 1\)\) on cuda:None "
        r"failed \(cuLaunchKernelEx failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES.*\); no kernel "
        r"was launched, so no argument was written\. If the error comes from an earlier",
    ) as raised:
        op.execute(**t, **outputs)
    assert raised.value.error_name == "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
    # only the new workspace was cleared (dglu's memory); the launch failed
    assert fake.enqueued()[before:] == [MEMSET, LAUNCH]
    assert fake.names(MEMSET)[-1][0] == stand_ins.WORKSPACE_ADDRESS
    assert fake.pushed == []
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == FIRST_EXECUTE_ENQUEUES


def test_a_failed_later_launch_says_the_outputs_may_be_written(fake) -> None:
    t = inputs()
    fake.fail(LAUNCH, "CUDA_ERROR_INVALID_VALUE", after=1)
    with pytest.raises(
        KernelLaunchError,
        match=r"launching kernel dbias_finish \(2 of 2.*kernel\(s\) main were already enqueued "
        r"and may have written the outputs .*discard them, or restore dprob and dbias",
    ):
        wrapper_call(t)
    assert fake.pushed == []
    # main may have added into dbias_ws, which dbias_finish did not zero: it was freed, and
    # the next call allocates and clears a new one
    assert fake.allocated == {} and fake.counts["cuMemFree"] == 1
    assert enqueued_by(fake, lambda: wrapper_call(t)) == FIRST_WRAPPER_ENQUEUES
    assert enqueued_by(fake, lambda: wrapper_call(t)) == WRAPPER_ENQUEUES


def test_a_failed_launch_after_b_descriptors_says_no_argument_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_artifacts(tmp_path, [variant_key(weight_mode="discrete")])
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    t = inputs()
    del t["b_tensor"]
    b_ptrs = torch.arange(1, L + 1, dtype=torch.int64) << 20
    fake.fail(LAUNCH, "CUDA_ERROR_INVALID_VALUE", after=1)  # b_descriptors' launch passes
    with pytest.raises(
        KernelLaunchError,
        match=r"launching kernel main \(2 of 3.*\); kernel\(s\) b_descriptors were enqueued but write "
        r"only dglu's workspaces, so no argument was written\. If the error",
    ):
        wrapper_call(t, b_ptrs=b_ptrs, n=N, b_dtype=torch.bfloat16)
    assert fake.pushed == []


def test_a_failed_clear_launches_nothing(fake) -> None:
    t = inputs()
    fake.fail(MEMSET, "CUDA_ERROR_INVALID_VALUE", after=1)  # the new dbias_ws's clear passes
    before = len(fake.enqueued())
    with pytest.raises(KernelLaunchError, match=r"clearing \d+ bytes at 0x\w+ .*no kernel was launched"):
        wrapper_call(t)
    assert fake.enqueued()[before:] == [MEMSET, MEMSET]
    assert enqueued_by(fake, lambda: wrapper_call(t)) == FIRST_WRAPPER_ENQUEUES


def test_a_failed_clear_of_a_new_workspace_frees_it_and_launches_nothing(fake) -> None:
    t = inputs()
    fake.fail(MEMSET, "CUDA_ERROR_INVALID_VALUE")
    with pytest.raises(CudaDriverError, match="cuMemsetD32Async failed: CUDA_ERROR_INVALID_VALUE"):
        wrapper_call(t)
    assert fake.enqueued() == [MEMSET] and fake.allocated == {}
    assert enqueued_by(fake, lambda: wrapper_call(t)) == FIRST_WRAPPER_ENQUEUES


OTHER_STREAM, GOOD_STREAM = 0x5000, 0x6000


@pytest.mark.parametrize(
    ("context", "device", "match"),
    [
        (0xD1, 1, r"current_stream: stream 0x5000 belongs to cuda:1, but the tensors are on "
                  r"cuda:0; pass a stream of cuda:0"),
        (0xD0, 0, r"current_stream: stream 0x5000 belongs to a CUDA context of cuda:0 other "
                  r"than its primary context.*create the stream in the primary context"),
    ],
    ids=["another-device", "another-context"],
)
def test_a_stream_of_another_device_or_context_is_refused_before_anything(
    fake, monkeypatch: pytest.MonkeyPatch, context: int, device: int, match: str
) -> None:
    monkeypatch.setattr(bound, "resolve_stream", lambda stream, _: streams.resolve_stream(stream, 0))
    fake.stream_contexts[OTHER_STREAM] = context
    fake.context_devices[context] = device
    t = inputs()
    wrapper_call(t, current_stream=GOOD_STREAM)  # loaded and cached: only the stream differs
    allocations = fake.allocations()
    for stream in (OTHER_STREAM, CUstream(OTHER_STREAM)):
        assert_refused(fake, lambda: wrapper_call(t, current_stream=stream), StreamDeviceError, match)
    assert fake.allocations() == allocations
    assert enqueued_by(fake, lambda: wrapper_call(t, current_stream=GOOD_STREAM)) == WRAPPER_ENQUEUES


def test_a_dead_stream_handle_is_refused_by_name(fake) -> None:
    fake.fail("cuStreamGetCtx", "CUDA_ERROR_INVALID_HANDLE")
    with pytest.raises(StreamDeviceError, match="current_stream: 0x5000 is not a usable stream handle"):
        streams.resolve_stream(OTHER_STREAM, 0)
    assert streams.resolve_stream(OTHER_STREAM, 0) == OTHER_STREAM


def test_a_capturing_stream_gets_graph_owned_workspaces_freed_after_its_kernels(fake) -> None:
    t = inputs()
    op, outputs = class_op(t)
    op.execute(**t, **outputs)  # eager: the pooled workspace and a kept plan
    fake.capturing = True
    first = len(fake.calls)
    op.execute(**t, **outputs)
    captured = [(name, args) for name, args in fake.calls[first:]
                if name in ("cuMemAllocAsync", "cuMemFreeAsync", MEMSET, LAUNCH)]
    assert [name for name, _ in captured] == ["cuMemAllocAsync", MEMSET, LAUNCH, LAUNCH, "cuMemFreeAsync"]
    assert captured[0][1][0] == L * 2 * N * 4
    assert captured[1][1][0] == captured[4][1][0] == stand_ins.GRAPH_ADDRESS
    op.execute(**t, **outputs)  # a second capture allocates its own
    assert fake.counts["cuMemAllocAsync"] == 2 and fake.counts["cuMemAlloc"] == 1  # one per capture, the pooled one
    fake.capturing = False
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == EXECUTE_ENQUEUES
    assert fake.allocations() == 3  # the pooled one serves again


def test_a_call_after_its_pool_changed_uses_the_pools_workspaces(fake) -> None:
    """A repeated call's plan serves while its stream's pool holds the workspaces it was
    made for: after release_all (the pool made anew, its workspaces freed) the next call
    allocates and clears a new dbias workspace and launches with it, not with the freed one."""
    t = inputs()
    op, outputs = class_op(t)
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == FIRST_EXECUTE_ENQUEUES
    (old,) = fake.allocated
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == EXECUTE_ENQUEUES
    workspaces.release_all()
    assert fake.allocated == {}
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == FIRST_EXECUTE_ENQUEUES
    (new,) = fake.allocated
    assert new != old and fake.names(MEMSET)[-1][0] == new
    assert enqueued_by(fake, lambda: op.execute(**t, **outputs)) == EXECUTE_ENQUEUES


def test_a_failed_launch_while_capturing_still_frees_the_graph_workspaces(fake) -> None:
    t = inputs()
    fake.capturing = True
    fake.fail(LAUNCH, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
    with pytest.raises(KernelLaunchError, match="CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"):
        wrapper_call(t)
    freed = [args[0] for args in fake.names("cuMemFreeAsync")]
    assert freed == [stand_ins.GRAPH_ADDRESS] and fake.pushed == []
