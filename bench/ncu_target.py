"""The process bench/ncu.sh profiles: one shape's inputs, then a few calls of one candidate.

``python -m bench.ncu_target --shape NAME --candidate fused|grouped_gemm --calls N`` builds
one buffer set of the shape with the harness's own builders (bench.inputs), then calls
dglu's fused op (bench.fused: class API, default dispatch, dswiglu with dprob and dbias)
or torch._grouped_mm (bench.baselines) N times, eagerly, on the current stream. Nothing
else runs after the inputs are built, so ncu's kernel-name filter and launch skip select
the candidate's kernel and skip its warm-up calls. Prints one JSON line: what ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .baselines import grouped_gemm
from .fused import build_op, run_fused
from .inputs import make_buffer_set
from .shapes import SHAPE_NAMES, select_shapes

CANDIDATES = ("fused", "grouped_gemm")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ncu_target", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--shape", required=True, choices=SHAPE_NAMES, help="the shape to build")
    parser.add_argument("--candidate", required=True, choices=CANDIDATES, help="what to call")
    parser.add_argument("--calls", type=int, default=6, help="calls in all (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.calls <= 0:
        parser.error(f"--calls: got {args.calls}, need a positive count")
    return args


def run(shape_name: str, candidate: str, calls: int, seed: int) -> dict[str, Any]:
    """Build ``shape_name``'s inputs on the current CUDA device and call ``candidate``
    ``calls`` times; what ran (the dglu variant for the fused op)."""
    import torch

    (shape,) = select_shapes([shape_name])
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    buffers = make_buffer_set(shape, device, generator)
    ran: dict[str, Any] = {"shape": shape.describe(), "candidate": candidate, "calls": calls}
    if candidate == "fused":
        op = build_op(buffers)
        ran["variant"] = op.variant_name
        torch.cuda.synchronize()  # the op's set-up work is done before the first call
        for _ in range(calls):
            run_fused(op, buffers)
    else:
        torch.cuda.synchronize()
        for _ in range(calls):
            grouped_gemm(buffers)
    torch.cuda.synchronize()
    return ran


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps(run(args.shape, args.candidate, args.calls, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
