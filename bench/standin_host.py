"""Host cost on a CPU-only machine: dglu's real call path over the real cuda-bindings and a
stand-in ``libcuda.so.1`` that answers every entry point with CUDA_SUCCESS and counts its
calls (bench/standin_libcuda.c; build it with
``cc -O2 -shared -fPIC -o DIR/libcuda.so.1 bench/standin_libcuda.c`` and put DIR on
LD_LIBRARY_PATH).

Only what needs a GPU is replaced: the tensors are CPU tensors (device 0 stands for their
device), torch's current stream is the legacy default stream (handle 0, torch's default;
``--side-stream``: another handle), torch's current device is the tensors' (unless
``--context-not-current``) and the device check passes; manifest
reading, selection, validation, planning, TMA encoding (the stand-in's), parameter packing,
workspaces and every driver call run as shipped. Figures: thread CPU time per call, the
minimum over repeats, and the driver calls per call (the stand-in's counters).

    LD_LIBRARY_PATH=DIR python -m bench.standin_host --artifacts ART [--first-call]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import functools
import gc
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

DEFAULT_STREAM, SIDE_STREAM = 0, 0x7  # torch's current stream: the legacy default, or another
PROBLEM = {"n": 64, "k": 64, "expert_rows": (256, 256)}  # bench.tiny_problem.TINY
# Wrapper results held in the plan-miss loop: more output addresses than the call keeps
# plans for (dglu.prepared.OUTPUT_CACHE_CAPACITY), so every call misses, in a steady heap.
KEPT_RESULTS = 64
# Copies of the inputs execute() cycles through in the new-inputs loop: more call
# signatures than an op keeps (dglu.call.CALL_CACHE_CAPACITY), so every call's inputs are
# at addresses it has not seen (a training step's fresh activations).
INPUT_SETS = 300


class FakeCuda:
    """The stand-in libcuda's call counters (ctypes)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        if not hasattr(self.lib, "fakecuda_count"):
            raise SystemExit("libcuda.so.1 on LD_LIBRARY_PATH is not the stand-in (bench/standin_libcuda.c)")
        self.lib.fakecuda_name.restype = ctypes.c_char_p
        self.lib.fakecuda_count.restype = ctypes.c_ulonglong
        self.names = [self.lib.fakecuda_name(i).decode() for i in range(self.lib.fakecuda_n())]

    def counts(self) -> Counter[str]:
        """Calls so far, by entry point."""
        return Counter({n: self.lib.fakecuda_count(i) for i, n in enumerate(self.names)})


def install(stream: int = DEFAULT_STREAM, torch_on_device: bool = True) -> None:
    """Replace the GPU-only parts of the call path (see the module docstring)."""
    from dglu import bound, call, driver, runner, validation

    def on_device_zero(function: Callable[[int], Any]) -> Callable[[Any], Any]:
        return functools.cache(lambda ordinal: function(0 if ordinal is None else ordinal))

    info = on_device_zero(driver.device_info)
    driver.primary_context = on_device_zero(driver.primary_context)
    for module in (driver, call, runner):
        module.device_info = info
    validation._check_devices = lambda args: None
    bound.resolve_stream = lambda current_stream, device: stream
    if torch_on_device:  # torch's current device is the tensors' (None on the CPU)
        driver.torch_current_device = lambda: None
    bound.on_stream = call.on_stream = lambda stream, device: contextlib.nullcontext()


def tensors() -> dict[str, Any]:
    """The wrapper's tensors for PROBLEM (random values, CPU)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    n, k, rows = PROBLEM["n"], PROBLEM["k"], PROBLEM["expert_rows"]
    m, l = sum(rows), len(rows)
    b = torch.randn(l, n, k, generator=generator).bfloat16().permute(1, 2, 0)
    return {
        "a_tensor": torch.randn(m, k, 1, generator=generator).bfloat16(),
        "b_tensor": b,
        "c_tensor": torch.randn(m, 2 * n, 1, generator=generator).bfloat16(),
        "padded_offsets": torch.tensor(rows, dtype=torch.int32).cumsum(0).int(),
        "alpha_tensor": torch.rand(l, generator=generator) + 0.5,
        "beta_tensor": torch.rand(l, generator=generator) + 0.5,
        "prob_tensor": torch.rand(m, 1, 1, generator=generator),
        "dprob_tensor": torch.zeros(m, 1, 1),
    }


def per_call(call: Callable[[], Any], calls: int, repeats: int) -> float:
    """Minimum over ``repeats`` of the thread CPU microseconds per call."""
    for _ in range(100):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(calls):
            call()
        best = min(best, (time.thread_time() - start) / calls)
    return 1e6 * best


def driver_calls(fake: FakeCuda, call: Callable[[], Any], calls: int = 100) -> dict[str, float]:
    """Driver calls per call of ``call``, by name (the stand-in's counters)."""
    before = fake.counts()
    for _ in range(calls):
        call()
    made = fake.counts() - before
    return {name: count / calls for name, count in sorted(made.items())}


def steady(calls: int, repeats: int, stream: int, torch_on_device: bool) -> dict[str, Any]:
    """execute, the wrapper, a plan miss (the wrapper's outputs at new addresses) and
    execute with every input at new addresses."""
    import dglu

    fake = FakeCuda()
    install(stream, torch_on_device)
    t = tensors()
    d_row, dbias = execute_outputs(t)
    op = dglu.GroupedGemmDglu(
        sample_a=t["a_tensor"], sample_c=t["c_tensor"], sample_d_row=d_row,
        sample_padded_offsets=t["padded_offsets"], sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"], sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"], sample_dbias=dbias, sample_b=t["b_tensor"],
        act_func="dswiglu",
    )
    op.compile()
    execute = functools.partial(op.execute, **t, d_row_tensor=d_row, dbias_tensor=dbias)
    wrapper = functools.partial(dglu.grouped_gemm_dglu_wrapper_sm90, **t, act_func="dswiglu",
                                generate_dbias=True)
    kept: collections.deque[Any] = collections.deque(maxlen=KEPT_RESULTS)

    def new_outputs() -> None:  # the last results held: each call's outputs land elsewhere
        kept.append(wrapper())

    figures = {
        "execute_us": per_call(execute, calls, repeats),
        "wrapper_us": per_call(wrapper, calls, repeats),
        "execute_driver_calls": driver_calls(fake, execute),
        "wrapper_driver_calls": driver_calls(fake, wrapper),
    }
    figures["plan_miss_us"] = per_call(new_outputs, max(calls // 20, 50), repeats)
    figures["plan_miss_driver_calls"] = driver_calls(fake, new_outputs)
    copies = [{name: tensor.clone() for name, tensor in t.items()} for _ in range(INPUT_SETS)]
    cycle = itertools.cycle([functools.partial(op.execute, **c, d_row_tensor=d_row, dbias_tensor=dbias) for c in copies])
    new_inputs = lambda: next(cycle)()  # noqa: E731
    figures["execute_new_inputs_us"] = per_call(new_inputs, INPUT_SETS, repeats)
    figures["execute_new_inputs_driver_calls"] = driver_calls(fake, new_inputs)
    return figures


def execute_outputs(t: dict[str, Any]) -> tuple[Any, Any]:
    """The D_row (M, 2N, 1) and dbias (L, 2N, 1) that execute writes into, for ``t``."""
    import torch

    l, n2 = t["b_tensor"].shape[2], t["c_tensor"].shape[1]
    return (torch.zeros(t["c_tensor"].shape, dtype=torch.bfloat16),
            torch.zeros(l, n2, 1, dtype=torch.bfloat16))


def first_call() -> dict[str, Any]:
    """In this (fresh) process: torch and cuda.bindings imported and the inputs made first
    (under torch on a GPU, torch imports cuda.bindings itself), then ``import dglu`` and
    the first wrapper call timed, with the full (generation 2) collections they set off."""
    import torch  # noqa: F401
    from cuda.bindings import driver  # noqa: F401

    t = tensors()
    fake = FakeCuda()
    full: list[float] = []
    started: list[float] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started.append(time.perf_counter())
            else:
                full.append(1e3 * (time.perf_counter() - started.pop()))

    gc.callbacks.append(watch)
    start, start_cpu = time.perf_counter(), time.thread_time()
    import dglu

    install()
    imported, imported_cpu = time.perf_counter(), time.thread_time()
    dglu.grouped_gemm_dglu_wrapper_sm90(**t, act_func="dswiglu", generate_dbias=True)
    done, done_cpu = time.perf_counter(), time.thread_time()
    gc.callbacks.remove(watch)
    return {
        "dglu_import_ms": 1e3 * (imported - start),
        "first_call_ms": 1e3 * (done - imported),
        "beyond_torch_ms": 1e3 * (done - start),
        "dglu_import_cpu_ms": 1e3 * (imported_cpu - start_cpu),
        "first_call_cpu_ms": 1e3 * (done_cpu - imported_cpu),
        "full_collections_ms": full,
        "driver_calls": dict(sorted((+fake.counts()).items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifacts", required=True, help="an artifact directory (DGLU_CUBIN_PATH)")
    parser.add_argument("--first-call", action="store_true", help="time this process's first call")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--context-not-current", action="store_true",
                        help="no context current on the thread, torch on no device")
    parser.add_argument("--side-stream", action="store_true", help="run on a stream other than torch's default")
    args = parser.parse_args()
    os.environ["DGLU_CUBIN_PATH"] = args.artifacts
    os.environ["XDG_CACHE_HOME"] = "/nonexistent-dglu-standin"
    os.environ["FAKECUDA_CTX_CURRENT"] = "0" if args.context_not_current else "1"
    stream = SIDE_STREAM if args.side_stream else DEFAULT_STREAM
    if args.first_call:
        result = first_call()
    else:
        result = steady(args.calls, args.repeats, stream, not args.context_not_current)
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
