"""Host-side costs of dglu: import, first call, steady-state launch path, CUDA graphs.

Import time and the first call are measured in fresh processes (medians over a few);
the steady state in this process on a tiny problem, where the launch path dominates.
"""

from __future__ import annotations

import cProfile
import importlib
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from dglu_build.atomic_write import write_atomic

from .fused import build_op, relative_l2, run_fused
from .inputs import BufferSet, make_buffer_set
from .timing import time_calls
from .tiny_problem import GRAPH_CHECK, TINY, wrapper_arguments

REPO_ROOT = Path(__file__).resolve().parent.parent
IMPORT_PROBE = (
    "import sys, time; start = time.perf_counter(); import dglu; "
    "print(1e3 * (time.perf_counter() - start), 'torch' in sys.modules)"
)
WARMUP_CALLS = 50
PROFILE_CALLS = 500
PROFILE_LINES = 25
GRAPH_TOLERANCE = 1e-2  # dprob, dbias: atomics add in a different order on each run
# dglu's modules that call the driver through dglu.driver.checked (each binds it by name)
DRIVER_CALLERS = ("dglu.driver", "dglu.launch", "dglu.workspaces", "dglu.streams")
DRIVER_COUNT_CALLS = 100


def _fresh_process(args: list[str]) -> str:
    """Stdout's last line of ``python args`` run from the repo root (this environment)."""
    done = subprocess.run(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def import_time(runs: int) -> dict[str, Any]:
    """Milliseconds to ``import dglu`` in fresh processes, and whether it imported torch."""
    lines = [_fresh_process(["-c", IMPORT_PROBE]).split() for _ in range(runs)]
    samples = [float(ms) for ms, _ in lines]
    return {
        "median_ms": statistics.median(samples),
        "runs_ms": samples,
        "imports_torch": any(flag == "True" for _, flag in lines),
    }


def first_call(runs: int) -> dict[str, Any]:
    """Medians over fresh processes of bench.first_call_probe's figures, plus their sum
    beyond torch (dglu import + first call), which the target applies to."""
    probes = [json.loads(_fresh_process(["-m", "bench.first_call_probe"])) for _ in range(runs)]
    medians = {name: statistics.median(p[name] for p in probes) for name in probes[0]}
    beyond = [p["dglu_import_ms"] + p["first_call_ms"] for p in probes]
    return {**medians, "beyond_torch_ms": statistics.median(beyond), "runs": probes}


def _per_call(call: Callable[[], Any], calls: int) -> dict[str, float]:
    """Wall and CPU (this thread) microseconds per call of ``call``, launches per second."""
    import torch

    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        call()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    torch.cuda.synchronize()
    return {
        "wall_us": 1e6 * wall / calls,
        "cpu_us": 1e6 * cpu / calls,
        "launches_per_s": calls / wall,
    }


def driver_calls(call: Callable[[], Any], calls: int = DRIVER_COUNT_CALLS) -> dict[str, Any]:
    """Driver calls per call of ``call`` (warm), by name, and the wall microseconds per call
    spent in them (cuda-bindings and the driver, through dglu.driver.checked; less the
    timer's own cost): every call dglu makes goes through dglu.driver.checked, counted and
    timed here in each module that binds it. What is left of a call's host time is dglu's
    own Python and torch's."""
    import torch

    counts: Counter[str] = Counter()
    spent = [0]
    clock = time.perf_counter_ns
    originals = {}
    for name in DRIVER_CALLERS:
        module = importlib.import_module(name)
        original = originals[module] = module.checked

        def counting(function_name: str, *args: Any, _original: Callable = original) -> Any:
            counts[function_name] += 1
            start = clock()
            try:
                return _original(function_name, *args)
            finally:
                spent[0] += clock() - start

        module.checked = counting
    try:
        for _ in range(calls):
            call()
    finally:
        for module, original in originals.items():
            module.checked = original
    torch.cuda.synchronize()
    timer = min(-clock() + clock() for _ in range(1000))  # one timed region's own cost, ns
    made = sum(counts.values())
    return {
        "per_call": {name: count / calls for name, count in sorted(counts.items())},
        "driver_us": max(spent[0] - made * timer, 0) / calls / 1e3,
    }


def torch_op_us(device: Any, calls: int) -> float:
    """Host CPU microseconds of one small torch CUDA op (``torch.add`` into a given output):
    the machine's yardstick for a launch from Python."""
    import torch

    x = torch.ones(256, device=device)
    out = torch.empty_like(x)
    return _per_call(partial(torch.add, x, x, out=out), calls)["cpu_us"]


def _profile(call: Callable[[], Any]) -> str:
    """cProfile's top functions by cumulative time over PROFILE_CALLS calls."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_CALLS):
        call()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(PROFILE_LINES)
    return text.getvalue()


def steady_state(device: Any, calls: int, budget_ms: float, profile_path: Path) -> dict[str, Any]:
    """Per-call host cost of the wrapper and of the class API's execute on TINY (time,
    driver calls and the time spent in them), a small torch op's for comparison, and the
    tiny call's device time; writes a cProfile of execute to ``profile_path``."""
    import dglu
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(1)
    buffers = make_buffer_set(TINY, device, generator)
    op = build_op(buffers)
    execute = partial(run_fused, op, buffers)
    wrapper = partial(dglu.grouped_gemm_dglu_wrapper_sm90, **wrapper_arguments(buffers))
    figures = {
        "problem": TINY.describe(),
        "calls": calls,
        "wrapper": _per_call(wrapper, calls),
        "execute": _per_call(execute, calls),
        "torch_op_us": torch_op_us(device, calls),
    }
    for name, call in (("wrapper", wrapper), ("execute", execute)):
        counted = driver_calls(call)
        figures[f"{name}_driver_calls"] = counted["per_call"]
        figures[f"{name}_driver_us"] = counted["driver_us"]
    figures |= {
        "device_us": 1e3 * time_calls([execute], budget_ms).median_ms,
        "profile": profile_path.name,
    }
    write_atomic(profile_path, _profile(execute).encode())
    return figures


def _copy_inputs(into: BufferSet, source: BufferSet) -> None:
    """Overwrite ``into``'s inputs in place with ``source``'s values; zero its dprob."""
    for name in ("a", "b_experts", "c", "alpha", "beta", "prob"):
        getattr(into, name).copy_(getattr(source, name))
    into.dprob.zero_()


def graph_replay(device: Any, trials: int = 2) -> dict[str, Any]:
    """Capture one wrapper call in a CUDA graph, then per trial put new random inputs in
    the captured buffers, replay, and compare with an eager call on the same values.

    ok when every replay's D equals the eager D exactly, dprob and dbias agree within
    GRAPH_TOLERANCE, and each replay's D differs from the previous one's (new inputs used).
    """
    import dglu
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(2)
    captured = make_buffer_set(GRAPH_CHECK, device, generator)
    call = partial(dglu.grouped_gemm_dglu_wrapper_sm90, **wrapper_arguments(captured))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    results, previous_d = [], None
    for _ in range(trials):
        fresh = make_buffer_set(GRAPH_CHECK, device, generator)
        _copy_inputs(captured, fresh)
        graph.replay()
        expected = dglu.grouped_gemm_dglu_wrapper_sm90(**wrapper_arguments(fresh))
        torch.cuda.synchronize()
        replayed_d = out["d_row_tensor"].clone()
        results.append(
            {
                "d_equal": bool(torch.equal(replayed_d, expected["d_row_tensor"])),
                "dprob_rel_l2": relative_l2(captured.dprob, fresh.dprob),
                "dbias_rel_l2": relative_l2(out["dbias_tensor"], expected["dbias_tensor"]),
                "d_changed": previous_d is None or not torch.equal(replayed_d, previous_d),
            }
        )
        previous_d = replayed_d
    ok = all(
        r["d_equal"]
        and r["d_changed"]
        and r["dprob_rel_l2"] <= GRAPH_TOLERANCE
        and r["dbias_rel_l2"] <= GRAPH_TOLERANCE
        for r in results
    )
    return {"problem": GRAPH_CHECK.describe(), "trials": results, "ok": ok}
