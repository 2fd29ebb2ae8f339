"""What the single-shape profiling scripts (bench.ncu_target, bench.kernel_times) call: one
shape's inputs from the bench's own builders, and one call of a candidate on them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NamedTuple

# the fused op (class API, default dispatch, dswiglu with dprob and dbias), the same call
# in deterministic mode, torch._grouped_mm alone, and the MXFP8 op on the same shape
# (bench.mxfp8_problem's call: the wrapper, e4m3 A, B and D, default dispatch)
CANDIDATES = ("fused", "deterministic", "grouped_gemm", "mxfp8")


class ShapeInputs(NamedTuple):
    """One shape's BF16 buffer set on a CUDA device, and the generator that made it (an
    MXFP8 set of the same buffers draws its block scales from it, as bench.mxfp8's first
    set does)."""

    shape: Any  # bench.shapes.Shape
    buffers: Any  # bench.inputs.BufferSet
    generator: Any  # torch.Generator


def shape_buffers(shape_name: str, seed: int) -> ShapeInputs:
    """The shape ``shape_name`` (bench.shapes) and one buffer set of it (bench.inputs) on
    the current CUDA device."""
    import torch

    from .inputs import make_buffer_set
    from .shapes import select_shapes

    (shape,) = select_shapes([shape_name])
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return ShapeInputs(shape, make_buffer_set(shape, device, generator), generator)


def candidate_call(candidate: str, inputs: ShapeInputs) -> tuple[str, Callable[[], None]]:
    """What ``candidate`` runs on ``inputs``: its name (the dglu variant, once the op is
    built) and one eager call on the current stream. The MXFP8 op runs on the MXFP8 set of
    the same buffers (bench.mxfp8_problem.mxfp8_set_of)."""
    from . import mxfp8_problem
    from .baselines import grouped_gemm
    from .fused import build_op, run_fused

    buffers = inputs.buffers
    if candidate == "grouped_gemm":
        return "torch._grouped_mm", lambda: grouped_gemm(buffers)
    if candidate == "mxfp8":
        s = mxfp8_problem.mxfp8_set_of(buffers, inputs.shape, inputs.generator)
        return mxfp8_problem.selected_variant(s)["name"], lambda: mxfp8_problem.run_mxfp8(s)
    op = build_op(buffers, deterministic=candidate == "deterministic")
    return op.variant_name, lambda: run_fused(op, buffers)


def add_call_options(parser: argparse.ArgumentParser, calls: int, calls_help: str) -> None:
    """``--calls`` (a positive count, default ``calls``) and ``--seed`` (the inputs')."""
    parser.add_argument("--calls", type=_positive_count, default=calls, help=f"{calls_help} (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default: %(default)s)")


def _positive_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count <= 0:
        raise argparse.ArgumentTypeError(f"got {text}, need a positive count")
    return count
