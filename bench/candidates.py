"""What the single-shape profiling scripts (bench.ncu_target, bench.kernel_times) call: one
shape's inputs from the bench's own builders, and one call of a candidate on them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

# the fused op (class API, default dispatch, dswiglu with dprob and dbias), the same call
# in deterministic mode, and torch._grouped_mm alone
CANDIDATES = ("fused", "deterministic", "grouped_gemm")


def shape_buffers(shape_name: str, seed: int) -> tuple[Any, Any]:
    """The shape ``shape_name`` (bench.shapes) and one buffer set of it (bench.inputs) on
    the current CUDA device."""
    import torch

    from .inputs import make_buffer_set
    from .shapes import select_shapes

    (shape,) = select_shapes([shape_name])
    device = torch.device("cuda", torch.cuda.current_device())
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return shape, make_buffer_set(shape, device, generator)


def candidate_call(candidate: str, buffers: Any) -> tuple[str, Callable[[], None]]:
    """What ``candidate`` runs on ``buffers``: its name (the dglu variant, once the op is
    built) and one eager call on the current stream."""
    from .baselines import grouped_gemm
    from .fused import build_op, run_fused

    if candidate == "grouped_gemm":
        return "torch._grouped_mm", lambda: grouped_gemm(buffers)
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
