"""The process bench/ncu.sh profiles: one shape's inputs, then a few calls of one candidate.

``python -m bench.ncu_target --shape NAME --candidate fused|deterministic|grouped_gemm|mxfp8 --calls N``
builds one buffer set of the shape with the harness's own builders, then calls one
candidate of bench.candidates (dglu's fused op: class API, default dispatch, dswiglu with
dprob and dbias; the same in deterministic mode; torch._grouped_mm; or the MXFP8 op on an
MXFP8 set of the shape) N times, eagerly, on the current stream. Nothing else runs after the inputs are built, so ncu's kernel-name
filter and launch skip select the candidate's kernel and skip its warm-up calls. Prints one
JSON line: what ran.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .candidates import CANDIDATES, add_call_options, candidate_call, shape_buffers
from .shapes import SHAPE_NAMES


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ncu_target", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--shape", required=True, choices=SHAPE_NAMES, help="the shape to build")
    parser.add_argument("--candidate", required=True, choices=CANDIDATES, help="what to call")
    add_call_options(parser, 6, "calls in all")
    return parser.parse_args(argv)


def run(shape_name: str, candidate: str, calls: int, seed: int) -> dict[str, Any]:
    """Build ``shape_name``'s inputs on the current CUDA device and call ``candidate``
    ``calls`` times; what ran (the dglu variant for the fused op)."""
    import torch

    inputs = shape_buffers(shape_name, seed)
    variant, call = candidate_call(candidate, inputs)
    torch.cuda.synchronize()  # the op's set-up work is done before the first call
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    ran = {"shape": inputs.shape.describe(), "candidate": candidate, "calls": calls}
    return ran if candidate == "grouped_gemm" else {**ran, "variant": variant}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps(run(args.shape, args.candidate, args.calls, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
