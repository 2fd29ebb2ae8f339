"""Real faults on the device leave nothing half-done (the CPU tests drive every fault
through a stand-in driver: tests/cpu/test_runtime_faults.py).

- No room for the wrapper's D_row (a call whose fp32 D_row, 136 GiB, cannot fit beside its
  68 GiB bf16 C on any H200): a DeviceMemoryError naming the output, nothing enqueued, the
  caller's dprob untouched; once the huge inputs are freed, a call of the same variant and
  one of another are correct, every element (harness.check_outputs).
- A stream of another CUDA context of the same device (cuCtxCreate), and a stream of another
  device (two GPUs): a StreamDeviceError before anything is allocated or enqueued; the next
  call on a good stream is correct.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import BF16, FP32, NARROW, WIDE, Config  # noqa: E402
from harness import Case, case_inputs, check_outputs, run_wrapper  # noqa: E402
from inputs import Inputs, Shape, initial_dprob  # noqa: E402

from dglu.errors import DeviceMemoryError, StreamDeviceError  # noqa: E402

pytestmark = pytest.mark.gpu

CONFIG = Config("dswiglu", BF16, BF16, True, WIDE)
SMALL = Shape(n=96, k=200, expert_rows=(256, 0, 512, 768), extra_rows=100)
# The shipped bf16 C -> fp32 D variant; HUGE's C is 68 GiB (2^20 x 34816 bf16) and its
# D_row 136 GiB (fp32): no H200 (about 139 GiB) holds both.
FP32_D = Config("dswiglu", BF16, FP32, True, NARROW)
HUGE = Shape(n=17408, k=64, expert_rows=(262144,) * 4)
SEED = 11


def wrapper_case_is_correct(shape: Shape, stream=None, config: Config = CONFIG) -> None:
    """Run the wrapper of ``config`` on ``shape`` (on ``stream``) and check every output
    element."""
    case = Case(config, shape, SEED, api="wrapper")
    x = case_inputs(case)
    dprob_before = initial_dprob(shape.m, SEED)
    dprob = dprob_before.clone()
    out = run_wrapper(config, x, dprob, config.tile, stream=stream)
    torch.cuda.synchronize()
    dbias = out["dbias_tensor"]
    check_outputs(case, x, out["d_row_tensor"], dprob, dprob_before, dbias, torch.zeros_like(dbias))


def huge_inputs(shape: Shape) -> Inputs:
    """Inputs of ``shape`` that a call only describes (it fails before computing): C left
    uninitialised, the rest zeros or ones."""
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    return Inputs(
        a=torch.zeros(m, k, 1, dtype=BF16, device="cuda"),
        b=torch.zeros(l, n, k, dtype=BF16, device="cuda").permute(1, 2, 0),
        c=torch.empty(m, 2 * n, 1, dtype=FP32_D.c_dtype, device="cuda"),
        padded_offsets=torch.tensor(shape.ends, dtype=torch.int32, device="cuda"),
        alpha=torch.ones(l, device="cuda"),
        beta=torch.ones(l, device="cuda"),
        prob=torch.zeros(m, 1, 1, device="cuda"),
    )


def test_no_room_for_d_row_writes_nothing_and_the_next_call_is_correct() -> None:
    allocated_before = torch.cuda.memory_allocated()
    x = huge_inputs(HUGE)
    dprob = initial_dprob(HUGE.m, SEED)
    dprob_before = dprob.clone()
    d_row = rf"\({HUGE.m}, {2 * HUGE.n}, 1\) torch.float32 \({HUGE.m * 2 * HUGE.n * 4} bytes\)"
    with pytest.raises(
        DeviceMemoryError,
        match=rf"(?s)^d_row_tensor: no room for the output {d_row} .*nothing was enqueued",
    ):
        run_wrapper(FP32_D, x, dprob, FP32_D.tile)
    torch.cuda.synchronize()
    assert torch.equal(dprob, dprob_before), "dprob was written by a call that failed"
    del x, dprob, dprob_before
    torch.cuda.empty_cache()
    kept = torch.cuda.memory_allocated() - allocated_before
    assert kept < 1 << 20, f"{kept} bytes of the failed call are still allocated"
    wrapper_case_is_correct(SMALL, config=FP32_D)  # the variant of the failed call
    wrapper_case_is_correct(SMALL)


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
