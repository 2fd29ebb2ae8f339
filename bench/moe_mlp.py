"""Forward + backward of the MoE expert MLP: dglu's fused backward vs the unfused one.

For the qwen3-moe-like and dsv3-like shapes (bench/shapes.py: L experts, M grouped rows,
N intermediate, K hidden), three MLPs of the same math (dglu.torch.mlp's docstring):

- ``dglu``: dglu.torch.expert_mlp (backward: one fused dglu call + torch._grouped_mm);
- ``unfused``: torch._grouped_mm and an eager epilogue, differentiated by autograd;
- ``compiled``: torch.compile of ``unfused``.

Each is timed with CUDA events (median of --iters after --warmup): forward alone, and
forward + backward (backward = the difference); the peak memory of one forward + backward
above what the inputs hold is reported.

The cost of A = prob * GLU(H) for dW2 (``act_out``): the dglu backward's fused call with the
kernel writing A (``act_out=True``) against the same call without it followed by the eager
recompute the backward falls back to (dglu.torch.mlp's ``_glu``), both timed as above; the
ratio is recompute / kernel. The two calls are timed directly because the MLP has no switch
between the paths; it takes the kernel's A when an act_out variant is installed, and the
comparison is skipped ("served": false) where none is. Usage (on a GPU):
    python -m bench.moe_mlp [--shapes qwen3-moe-like,dsv3-like] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch

from bench.shapes import select_shapes
from dglu.torch import SWIGLU, expert_mlp, grouped_gemm_dglu, split_blocked
from dglu.torch.mlp import _act_out_served, _glu

DEFAULT_SHAPES = "qwen3-moe-like,dsv3-like"


def unfused_mlp(x, prob, offsets, w1, w2):
    """The same MLP with autograd's backward: torch._grouped_mm, eager dSwiGLU."""
    h = torch._grouped_mm(x, w1.transpose(1, 2), offs=offsets)
    gate, up = split_blocked(h.float())
    a = (prob[:, None] * SWIGLU.forward(gate, up)).to(x.dtype)
    return torch._grouped_mm(a, w2, offs=offsets)


def dglu_mlp(x, prob, offsets, w1, w2):
    return expert_mlp(x, prob, offsets, w1, w2, activation=SWIGLU)


def problem(shape, device: str = "cuda") -> tuple[list[torch.Tensor], torch.Tensor]:
    """Leaves (x, prob, offsets, W1, W2) for ``shape`` and the output gradient."""
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    x = torch.randn(m, k, device=device).bfloat16().requires_grad_(True)
    prob = torch.rand(m, device=device).requires_grad_(True)
    offsets = torch.tensor(shape.ends, dtype=torch.int32, device=device)
    w1 = (torch.randn(l, 2 * n, k, device=device) * k**-0.5).bfloat16().requires_grad_(True)
    w2 = (torch.randn(l, n, k, device=device) * n**-0.5).bfloat16().requires_grad_(True)
    return [x, prob, offsets, w1, w2], torch.randn(m, k, device=device).bfloat16()


def dw2_activation_calls(leaves: list[torch.Tensor], dy: torch.Tensor
                         ) -> dict[str, Callable[[], torch.Tensor]]:
    """The dglu backward's fused call on ``leaves``' H, two ways of also getting A for dW2,
    each returning A (M, N): ``kernel`` (act_out=True) and ``recompute`` (the call, then
    ``_glu`` in eager torch), as dglu.torch.mlp's backward makes them."""
    x, prob, offsets, w1, w2 = (leaf.detach() for leaf in leaves)
    h = torch._grouped_mm(x, w1.transpose(1, 2), offs=offsets)
    rows = x.shape[0]
    ones = torch.ones(w1.shape[0], dtype=torch.float32, device=x.device)

    def fused(act_out: bool):
        return grouped_gemm_dglu(
            dy.unsqueeze(-1), h.unsqueeze(-1), padded_offsets=offsets, alpha_tensor=ones,
            beta_tensor=ones, prob_tensor=prob.view(rows, 1, 1),
            dprob_tensor=torch.zeros(rows, 1, 1, dtype=torch.float32, device=x.device),
            b_tensor=w2.permute(1, 2, 0), generate_dbias=False, d_dtype=h.dtype,
            act_out=act_out, **SWIGLU.op_arguments())

    def kernel() -> torch.Tensor:
        return fused(True).act_out_tensor.view(rows, -1)

    def recompute() -> torch.Tensor:
        fused(False)
        return _glu(h, prob, SWIGLU)

    return {"kernel": kernel, "recompute": recompute}


def act_out_cost(leaves: list[torch.Tensor], dy: torch.Tensor, warmup: int,
                 iters: int) -> dict[str, object]:
    """ms of the fused call with the kernel's A and with the recompute, and their ratio
    (recompute / kernel); only ``served`` False where no act_out variant is installed."""
    if not _act_out_served(dy.device, torch.bfloat16, SWIGLU, False):
        return {"served": False}
    calls = dw2_activation_calls(leaves, dy)
    kernel_ms = timed(calls["kernel"], warmup, iters)
    recompute_ms = timed(calls["recompute"], warmup, iters)
    return {"served": True, "kernel_ms": kernel_ms, "recompute_ms": recompute_ms,
            "recompute_over_kernel": recompute_ms / kernel_ms}


def act_out_line(name: str, cost: dict[str, object]) -> str:
    """The printed summary of ``act_out_cost``."""
    if not cost["served"]:
        return f"{name:16s} act_out: no act_out variant installed, not compared"
    return (f"{name:16s} act_out: kernel {cost['kernel_ms']:.3f} ms, recompute "
            f"{cost['recompute_ms']:.3f} ms, recompute/kernel {cost['recompute_over_kernel']:.2f}x")


def timed(run: Callable[[], None], warmup: int, iters: int) -> float:
    """Median milliseconds of ``run``."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(mlp: Callable, leaves: list[torch.Tensor], dy: torch.Tensor, warmup: int,
            iters: int) -> dict[str, float]:
    def forward() -> None:
        with torch.no_grad():
            mlp(*leaves)

    def step() -> None:
        for leaf in leaves:
            leaf.grad = None
        mlp(*leaves).backward(dy)

    step()  # compile / load before measuring memory
    for leaf in leaves:
        leaf.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    forward_ms = timed(forward, warmup, iters)
    step_ms = timed(step, warmup, iters)
    return {"forward_ms": forward_ms, "backward_ms": step_ms - forward_ms,
            "step_ms": step_ms, "peak_mib": peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=DEFAULT_SHAPES)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--json", help="write the results there too")
    args = parser.parse_args()
    mlps = {"dglu": dglu_mlp, "unfused": unfused_mlp, "compiled": torch.compile(unfused_mlp)}
    results = []
    for shape in select_shapes(args.shapes.split(",")):
        leaves, dy = problem(shape)
        row = {"shape": shape.name, "l": shape.l, "m": shape.m, "n": shape.n, "k": shape.k}
        for name, mlp in mlps.items():
            row[name] = measure(mlp, leaves, dy, args.warmup, args.iters)
            print(f"{shape.name:16s} {name:9s} " + "  ".join(
                f"{key} {value:8.3f}" for key, value in row[name].items()), flush=True)
        for name in ("unfused", "compiled"):
            row[f"backward_speedup_vs_{name}"] = row[name]["backward_ms"] / row["dglu"]["backward_ms"]
        print(f"{shape.name:16s} backward speedup: vs unfused "
              f"{row['backward_speedup_vs_unfused']:.2f}x, vs compiled "
              f"{row['backward_speedup_vs_compiled']:.2f}x", flush=True)
        row["act_out"] = act_out_cost(leaves, dy, args.warmup, args.iters)
        print(act_out_line(shape.name, row["act_out"]), flush=True)
        results.append(row)
        del leaves, dy
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "results": results}, handle, indent=2)


if __name__ == "__main__":
    main()
