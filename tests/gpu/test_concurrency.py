"""The runtime under concurrency and on several GPUs, every output checked (harness.py).

Threads: several Python threads, each on its own stream, calling the wrapper and one shared
class op at once (the per-stream workspaces, the shared caches). Several GPUs: one process
driving two devices from two threads, and two processes with one GPU each (skipped, with the
reason, on fewer than two GPUs). Also: CUDA graphs captured between eager calls on the same
stream, CuPy arrays as inputs, device violations refused with nothing written, and
malformed padded_offsets (unchecked by default, refused with DGLU_CHECK_OFFSETS=1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import dglu  # noqa: E402
from checks import check_untouched  # noqa: E402
from configs import BF16, WIDE, Config  # noqa: E402
from harness import Case, case_inputs, check_outputs, class_op, execute, execute_arguments, run_case  # noqa: E402
from inputs import Shape, initial_dbias, initial_dprob, poisoned_d  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPE = Shape(n=96, k=200, expert_rows=(256, 0, 512, 768, 256), extra_rows=100)
CONFIGS = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dswiglu", BF16, BF16, True, WIDE, scheduler="dynamic"),
    Config("dgeglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major="k"),
]
THREADS = 4
ROUNDS = 3
TWO_GPUS = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs 2 GPUs, torch sees {torch.cuda.device_count()}",
)


def run_in_threads(work: Callable[[int], None], count: int) -> None:
    """Run ``work(index)`` in ``count`` threads started together; re-raise the first error."""
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def body(index: int) -> None:
        try:
            start.wait()
            work(index)
        except BaseException as error:  # noqa: BLE001 (re-raised in the main thread)
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("api", ["wrapper", "class"])
def test_threads_on_their_own_streams(config: Config, api: str, seed: int) -> None:
    """Each thread runs its own cases (own inputs) ROUNDS times on its own stream."""

    def work(index: int) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for round_ in range(ROUNDS):
                run_case(Case(config, SHAPE, seed + 1000 * index + round_, api=api))

    run_in_threads(work, THREADS)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_one_class_op_shared_by_threads(config: Config, seed: int) -> None:
    """One compiled op, executed at once from several threads on their own streams with
    their own inputs and outputs (its caches and the per-stream workspaces are shared)."""
    samples = case_inputs(Case(config, SHAPE, seed))
    d_row = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
    dprob = torch.zeros(SHAPE.m, 1, 1, device="cuda")
    dbias = torch.zeros(SHAPE.l, 2 * SHAPE.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(config, samples, d_row, dprob, dbias, config.tile)
    torch.cuda.synchronize()

    def work(index: int) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for round_ in range(ROUNDS):
                case = Case(config, SHAPE, seed + 1000 * (index + 1) + round_)
                x = case_inputs(case)
                dprob_before = initial_dprob(SHAPE.m, case.seed)
                dbias_before = initial_dbias(SHAPE.l, SHAPE.n, case.seed)
                d = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
                p, b = dprob_before.clone(), dbias_before.clone()
                execute(op, x, d, p, b, stream=stream)
                stream.synchronize()
                check_outputs(case, x, d, p, dprob_before, b, dbias_before)

    run_in_threads(work, THREADS)


@TWO_GPUS
@pytest.mark.parametrize("api", ["wrapper", "class"])
def test_one_process_two_devices(api: str, seed: int) -> None:
    """Two threads, one per device, each making its device current and running its cases
    (on that device's current stream) at the same time."""

    def work(device: int) -> None:
        torch.cuda.set_device(device)
        for config in CONFIGS:
            for round_ in range(ROUNDS):
                run_case(Case(config, SHAPE, seed + 1000 * device + round_, api=api))

    run_in_threads(work, 2)


WORKER = """
import sys
import torch
from harness import Case, run_case
from test_concurrency import CONFIGS, SHAPE
device, seed = int(sys.argv[1]), int(sys.argv[2])
torch.cuda.set_device(device)
for api in ("wrapper", "class"):
    for config in CONFIGS:
        run_case(Case(config, SHAPE, seed + device, api=api))
print(f"device {device}: ok ({torch.cuda.get_device_name(device)})")
"""


@TWO_GPUS
def test_two_processes_one_gpu_each(seed: int) -> None:
    """Two fresh processes started together, each running the configs on its own GPU."""
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(device), str(seed)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for device in (0, 1)
    ]
    for device, process in enumerate(processes):
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, f"device {device} (seed {seed}):\n{output}"
        assert f"device {device}: ok" in output


def test_graph_captured_between_eager_calls_on_one_stream(seed: int) -> None:
    """Eager calls before and after a capture, on the graph's replay stream, and replays in
    between: each result is right (the graph's workspaces are its own)."""
    config = CONFIGS[1]  # dynamic scheduler: a zeroed tile counter and dbias workspace
    case = Case(config, SHAPE, seed)
    x = case_inputs(case)
    d_row = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
    dprob = torch.zeros(SHAPE.m, 1, 1, device="cuda")
    dbias = torch.zeros(SHAPE.l, 2 * SHAPE.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(config, x, d_row, dprob, dbias, config.tile)

    def fresh_eager_call() -> None:
        d = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
        p, b = torch.zeros_like(dprob), torch.zeros_like(dbias)
        execute(op, x, d, p, b)
        torch.cuda.synchronize()
        check_outputs(case, x, d, p, torch.zeros_like(p), b, torch.zeros_like(b))

    fresh_eager_call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        execute(op, x, d_row, dprob, dbias)
    for _ in range(2):
        d_row.fill_(float("nan"))
        dprob.zero_()
        dbias.zero_()
        graph.replay()
        fresh_eager_call()
        check_outputs(case, x, d_row, dprob, torch.zeros_like(dprob), dbias, torch.zeros_like(dbias))


def test_cupy_arrays_are_taken_without_copies(seed: int) -> None:
    """CuPy arrays (over the test's own tensors' memory) for every argument CuPy can hold:
    it has no bfloat16, so A, B and C stay torch tensors. dprob accumulates in place."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    config = CONFIGS[0]
    case = Case(config, SHAPE, seed, api="wrapper")
    x = case_inputs(case)
    dprob_before = initial_dprob(SHAPE.m, seed)
    dprob = dprob_before.clone()
    as_cupy = {
        name: cupy.from_dlpack(tensor)
        for name, tensor in {
            "padded_offsets": x.padded_offsets,
            "alpha_tensor": x.alpha,
            "beta_tensor": x.beta,
            "prob_tensor": x.prob,
            "dprob_tensor": dprob,
        }.items()
    }
    assert as_cupy["dprob_tensor"].data.ptr == dprob.data_ptr()
    out = dglu.grouped_gemm_dglu(
        a_tensor=x.a, b_tensor=x.b, c_tensor=x.c, **as_cupy, generate_dbias=True
    )
    torch.cuda.synchronize()
    assert out["dprob_tensor"] is as_cupy["dprob_tensor"]
    dbias = out["dbias_tensor"]
    check_outputs(case, x, out["d_row_tensor"], dprob, dprob_before, dbias, torch.zeros_like(dbias))


def _device_violations() -> dict[str, tuple[Callable, str]]:
    """Case -> (changes to execute()'s arguments, message start)."""
    cases = {
        "c on the host": (
            lambda x, **_: {"c_tensor": x.c.cpu()},
            "c_tensor: on cpu, but a_tensor is on cuda:0",
        ),
        "a on the host": (
            lambda x, **_: {"a_tensor": x.a.cpu()},
            "a_tensor: expected a CUDA tensor, got one on cpu",
        ),
        "dbias on the host": (
            lambda x, dbias, **_: {"dbias_tensor": dbias.cpu()},
            "dbias_tensor: on cpu, but a_tensor is on cuda:0",
        ),
    }
    if torch.cuda.device_count() >= 2:
        cases["prob on another GPU"] = (
            lambda x, **_: {"prob_tensor": x.prob.to("cuda:1")},
            "prob_tensor: on cuda:1, but a_tensor is on cuda:0",
        )
        cases["stream of another GPU"] = (
            lambda x, **_: {"current_stream": torch.cuda.Stream(device=1)},
            "current_stream: belongs to cuda:1, but the tensors are on cuda:0",
        )
    return cases


@pytest.mark.parametrize("name", sorted(_device_violations()))
def test_device_violations_write_nothing(name: str, seed: int) -> None:
    changes, message = _device_violations()[name]
    config = CONFIGS[0]
    x = case_inputs(Case(config, SHAPE, seed))
    d_row = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
    dprob, dbias = initial_dprob(SHAPE.m, seed), initial_dbias(SHAPE.l, SHAPE.n, seed)
    before = dprob.clone(), dbias.clone()
    op = class_op(config, x, d_row, dprob, dbias, config.tile)
    with pytest.raises(ValueError) as raised:
        op.execute(**{**execute_arguments(x, d_row, dprob, dbias), "b_tensor": x.b, **changes(x=x, dbias=dbias)})
    assert str(raised.value).startswith(message), str(raised.value)
    torch.cuda.synchronize()
    check_untouched("d_row", d_row, poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype), name)
    check_untouched("dprob", dprob, before[0], name)
    check_untouched("dbias", dbias, before[1], name)


def test_malformed_offsets_run_unchecked_and_are_refused_when_asked(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default the kernels clamp malformed offsets (wrong numbers, no fault); with
    DGLU_CHECK_OFFSETS=1 the call reads them back and refuses them before launching."""
    config = CONFIGS[0]
    x = case_inputs(Case(config, SHAPE, seed))
    bad = x.padded_offsets.clone()
    bad[1] = bad[1] + 128
    bad[-1] = SHAPE.m + 4096
    call = dict(
        a_tensor=x.a,
        c_tensor=x.c,
        padded_offsets=bad,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        b_tensor=x.b,
        generate_dbias=True,
    )
    monkeypatch.delenv("DGLU_CHECK_OFFSETS", raising=False)
    dglu.grouped_gemm_dglu(**call, dprob_tensor=torch.zeros(SHAPE.m, 1, 1, device="cuda"))
    torch.cuda.synchronize()  # a fault would surface here
    monkeypatch.setenv("DGLU_CHECK_OFFSETS", "1")
    dprob = torch.zeros(SHAPE.m, 1, 1, device="cuda")
    with pytest.raises(ValueError, match="^padded_offsets: entry 1 = .* is not a multiple of 256"):
        dglu.grouped_gemm_dglu(**call, dprob_tensor=dprob)
    assert not dprob.any()
