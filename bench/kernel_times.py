"""Device time per kernel of dglu's fused op, its deterministic variant, the grouped GEMM and
the MXFP8 op on the same shape.

``python -m bench.kernel_times SHAPE [SHAPE ...]`` (on the GPU machine, dglu installed as
bench/run.sh installs it) builds each shape's inputs with the bench's own builders, calls
each candidate a few times to warm up, then records CALLS calls under torch.profiler and
prints one JSON line per shape and candidate: the variant that ran and each kernel's
device microseconds per call. It answers what the bench's end-to-end ratios cannot: how
much of a call is the main kernel and how much its finisher or preparation kernels.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from .candidates import CANDIDATES, add_call_options, candidate_call, shape_buffers
from .shapes import SHAPE_NAMES

WARMUP_CALLS = 5
NAME_CHARS = 120  # CUTLASS's kernel names run to kilobytes; the start tells them apart


def per_call_us(events: Iterable[Any], calls: int) -> dict[str, float]:
    """Each kernel's device microseconds per call, from torch.profiler's key averages
    (``key`` and ``self_device_time_total`` in microseconds), longest first."""
    totals: dict[str, float] = {}
    for event in events:
        device_us = getattr(event, "self_device_time_total", 0.0)
        if device_us > 0:
            name = event.key[:NAME_CHARS]
            totals[name] = totals.get(name, 0.0) + device_us / calls
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def profile_shape(shape_name: str, calls: int, seed: int) -> list[dict[str, Any]]:
    """One record per candidate: shape, candidate, variant, kernels' us per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    inputs = shape_buffers(shape_name, seed)
    records = []
    for candidate in CANDIDATES:
        variant, call = candidate_call(candidate, inputs)
        for _ in range(WARMUP_CALLS):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as recorded:
            for _ in range(calls):
                call()
            torch.cuda.synchronize()
        records.append({"shape": shape_name, "candidate": candidate, "variant": variant,
                        "kernels_us_per_call": per_call_us(recorded.key_averages(), calls)})
    return records


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_times", description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+", choices=SHAPE_NAMES, metavar="SHAPE",
                        help=f"shapes of bench/shapes.py: {', '.join(SHAPE_NAMES)}")
    add_call_options(parser, 20, "profiled calls per candidate")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for shape_name in args.shapes:
        for record in profile_shape(shape_name, args.calls, args.seed):
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
