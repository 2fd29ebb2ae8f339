"""Real faults on the device leave nothing half-done (the CPU tests drive every fault
through a stand-in driver: tests/cpu/test_runtime_faults.py).

- No room for the wrapper's D_row (the device filled up to less than D_row needs): a
  DeviceMemoryError naming the output, the caller's dprob untouched; once memory is free
  again the same call is correct, every element (harness.check_outputs).
- A stream of another CUDA context of the same device (cuCtxCreate), and a stream of another
  device (two GPUs): a StreamDeviceError before anything is allocated or enqueued; the next
  call on a good stream is correct.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import BF16, WIDE, Config  # noqa: E402
from harness import Case, case_inputs, check_outputs, run_wrapper  # noqa: E402
from inputs import Shape, initial_dprob  # noqa: E402

from dglu.errors import DeviceMemoryError, StreamDeviceError  # noqa: E402

pytestmark = pytest.mark.gpu

CONFIG = Config("dswiglu", BF16, BF16, True, WIDE)
SMALL = Shape(n=96, k=200, expert_rows=(256, 0, 512, 768), extra_rows=100)
# D_row of BIG is 1 GiB (262144 x 2048 bf16): a large allocation of its own.
BIG = Shape(n=1024, k=64, expert_rows=(65536,) * 4)
SEED = 11


def wrapper_case_is_correct(shape: Shape, stream=None) -> None:
    """Run the wrapper on ``shape`` (on ``stream``) and check every output element."""
    case = Case(CONFIG, shape, SEED, api="wrapper")
    x = case_inputs(case)
    dprob_before = initial_dprob(shape.m, SEED)
    dprob = dprob_before.clone()
    out = run_wrapper(CONFIG, x, dprob, CONFIG.tile, stream=stream)
    torch.cuda.synchronize()
    dbias = out["dbias_tensor"]
    check_outputs(case, x, out["d_row_tensor"], dprob, dprob_before, dbias, torch.zeros_like(dbias))


def test_no_room_for_d_row_writes_nothing_and_the_next_call_is_correct() -> None:
    wrapper_case_is_correct(SMALL)  # the variant is loaded, the stream's workspaces pooled
    case = Case(CONFIG, BIG, SEED, api="wrapper")
    x = case_inputs(case)
    dprob_before = initial_dprob(BIG.m, SEED)
    dprob = dprob_before.clone()
    d_row_bytes = BIG.m * 2 * BIG.n * 2
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    filler = torch.empty(free - d_row_bytes // 2, dtype=torch.uint8, device="cuda")
    try:
        with pytest.raises(
            DeviceMemoryError, match=r"d_row_tensor: no room for the output .*nothing was enqueued"
        ):
            run_wrapper(CONFIG, x, dprob, CONFIG.tile)
    finally:
        del filler
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    assert torch.equal(dprob, dprob_before), "dprob was written by a call that failed"
    out = run_wrapper(CONFIG, x, dprob, CONFIG.tile)
    torch.cuda.synchronize()
    dbias = out["dbias_tensor"]
    check_outputs(case, x, out["d_row_tensor"], dprob, dprob_before, dbias, torch.zeros_like(dbias))


def _created_context(device: int):
    """A new CUDA context of ``device`` (not its primary one) and a stream in it; the
    caller's context is current again on return. Skips when the driver refuses."""
    from cuda.bindings import driver

    error, handle = driver.cuDeviceGet(device)
    assert error == driver.CUresult.CUDA_SUCCESS, error
    try:  # cuda-bindings 13: (params, flags, device); 12: (flags, device)
        error, context = driver.cuCtxCreate(None, 0, handle)
    except TypeError:
        error, context = driver.cuCtxCreate(0, handle)
    if error != driver.CUresult.CUDA_SUCCESS:
        pytest.skip(f"cuCtxCreate: {error.name}")
    error, stream = driver.cuStreamCreate(0)
    assert error == driver.CUresult.CUDA_SUCCESS, error
    (error,) = driver.cuCtxPopCurrent()[:1]
    assert error == driver.CUresult.CUDA_SUCCESS, error
    return context, stream


def test_a_stream_of_another_context_is_refused_and_the_next_call_is_correct() -> None:
    from cuda.bindings import driver

    wrapper_case_is_correct(SMALL)
    context, stream = _created_context(torch.cuda.current_device())
    try:
        case = Case(CONFIG, SMALL, SEED, api="wrapper")
        x = case_inputs(case)
        dprob_before = initial_dprob(SMALL.m, SEED)
        dprob = dprob_before.clone()
        with pytest.raises(StreamDeviceError, match="other than its primary context"):
            run_wrapper(CONFIG, x, dprob, CONFIG.tile, stream=int(stream))
        torch.cuda.synchronize()
        assert torch.equal(dprob, dprob_before)
    finally:
        driver.cuCtxPushCurrent(context)
        driver.cuStreamDestroy(stream)
        driver.cuCtxPopCurrent()
        driver.cuCtxDestroy(context)
    # a raw handle of the primary context passes the same check
    wrapper_case_is_correct(SMALL, stream=torch.cuda.current_stream().cuda_stream)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_stream_of_another_device_is_refused_and_the_next_call_is_correct() -> None:
    other = torch.cuda.Stream(device=1)
    case = Case(CONFIG, SMALL, SEED, api="wrapper")
    x = case_inputs(case)  # on cuda:0
    dprob_before = initial_dprob(SMALL.m, SEED)
    dprob = dprob_before.clone()
    for stream in (other, other.cuda_stream):  # a torch stream and a raw handle
        with pytest.raises(StreamDeviceError, match="to cuda:1, but the tensors are on cuda:0"):
            run_wrapper(CONFIG, x, dprob, CONFIG.tile, stream=stream)
    torch.cuda.synchronize()
    assert torch.equal(dprob, dprob_before)
    wrapper_case_is_correct(SMALL)
