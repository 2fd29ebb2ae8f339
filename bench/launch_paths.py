"""Host cost of one kernel enqueue by each driver path, on the launches of a real call.

``python -m bench.launch_paths [--launches 4000]`` (GPU machine, dglu installed): records
the prepared launches of one steady ``execute`` on the bench's tiny problem (the fused
kernel and, with dbias, its finisher), then enqueues each of them again and again by:

- ``dglu``: dglu.launch.launch_kernel (cuda-bindings' cuLaunchKernelEx through
  dglu.driver.checked), as a call does;
- ``bindings_ex``: cuda-bindings' cuLaunchKernelEx, the result unchecked;
- ``bindings_plain``: cuda-bindings' cuLaunchKernel (launches with no attributes only);
- ``ctypes_ex`` / ``ctypes_plain``: the same two entry points of libcuda through ctypes,
  with the bindings' launch configuration passed by address.

Host CPU microseconds per enqueue (thread time): per round the median over batches of 100
(the stream synchronized between batches, untimed, so the launch queue never fills), and
the minimum over ``--rounds`` rounds that take the paths in turn. Prints one JSON line per
kernel and a last line starting with "LAUNCH PATHS:".
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

BATCH = 100


def recorded_launches() -> list[Any]:
    """The dglu.launch.Launch objects one steady execute on TINY enqueues."""
    import torch

    import dglu.runner

    from .fused import build_op, run_fused
    from .inputs import make_buffer_set
    from .tiny_problem import TINY

    generator = torch.Generator(device="cuda")
    generator.manual_seed(1)
    buffers = make_buffer_set(TINY, torch.device("cuda"), generator)
    op = build_op(buffers)
    for _ in range(3):
        run_fused(op, buffers)
    seen: list[Any] = []
    original = dglu.runner.launch_kernel

    def recording(launch: Any) -> None:
        seen.append(launch)
        original(launch)

    dglu.runner.launch_kernel = recording
    try:
        run_fused(op, buffers)
    finally:
        dglu.runner.launch_kernel = original
    torch.cuda.synchronize()
    if not seen:
        raise SystemExit("no launch recorded: dglu.runner no longer launches through launch_kernel")
    return seen


def paths(launch: Any) -> dict[str, Callable[[], Any]]:
    """Each way to enqueue ``launch`` (those that can: a plain launch has no attributes)."""
    from cuda.bindings import driver

    from dglu.launch import launch_kernel

    libcuda = ctypes.CDLL("libcuda.so.1")
    config, function, params = launch.config, launch.function, launch.arguments.address
    grid, block = tuple(launch.grid), tuple(launch.kernel.block)
    smem, stream = launch.kernel.dynamic_smem_bytes, launch.stream
    function_handle, config_address = int(function), int(config.getPtr())
    ex = libcuda.cuLaunchKernelEx
    ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    plain = libcuda.cuLaunchKernel
    plain.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    chosen = {
        "dglu": lambda: launch_kernel(launch),
        "bindings_ex": lambda: driver.cuLaunchKernelEx(config, function, params, 0),
        "ctypes_ex": lambda: ex(config_address, function_handle, params, None),
    }
    if not launch.kernel.attributes:
        cu_stream = driver.CUstream(stream)
        chosen["bindings_plain"] = lambda: driver.cuLaunchKernel(
            function, *grid, *block, smem, cu_stream, params, 0
        )
        chosen["ctypes_plain"] = lambda: plain(function_handle, *grid, *block, smem, stream, params, None)
    return chosen


def per_enqueue_us(enqueue: Callable[[], Any], launches: int) -> float:
    """Median thread-CPU microseconds of one ``enqueue`` over batches of BATCH."""
    import torch

    batches = []
    for _ in range(max(1, launches // BATCH)):
        torch.cuda.synchronize()
        start = time.thread_time_ns()
        for _ in range(BATCH):
            enqueue()
        batches.append((time.thread_time_ns() - start) / 1e3 / BATCH)
    torch.cuda.synchronize()
    return statistics.median(batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=4000, help="enqueues per path and kernel")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the paths, in turn")
    args = parser.parse_args()
    summary = []
    for launch in recorded_launches():
        chosen = paths(launch)
        for enqueue in chosen.values():  # warm every path
            per_enqueue_us(enqueue, BATCH)
        times: dict[str, list[float]] = {name: [] for name in chosen}
        for _ in range(args.rounds):
            for name, enqueue in chosen.items():
                times[name].append(per_enqueue_us(enqueue, args.launches))
        figures = {name: round(min(ts), 3) for name, ts in times.items()}
        record = {
            "kernel": launch.kernel.symbol,
            "attributes": sorted(launch.kernel.attributes),
            "param_bytes": launch.arguments.offsets[-1] + launch.arguments.sizes[-1],
            "params": len(launch.arguments.sizes),
            "us_per_enqueue": figures,
            "rounds_us": {name: [round(t, 3) for t in ts] for name, ts in times.items()},
        }
        print(json.dumps(record), flush=True)
        summary.append(f"{launch.kernel.symbol.rsplit('_', 2)[-2]}: " + ", ".join(
            f"{name} {us:.2f}" for name, us in figures.items()
        ))
    print("LAUNCH PATHS: us per enqueue; " + "; ".join(summary))


if __name__ == "__main__":
    main()
