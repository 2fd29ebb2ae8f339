"""``python -m bench.jax_host``: dglu's JAX entry on the GPU, in one run beside the torch path.

1. Host cost: wall microseconds per dispatch of the jitted entry (dswiglu, dbias, dprob
   from zeros) on the tiny problem, where the launch path dominates, with XLA command
   buffers on (XLA_FLAGS gets --xla_gpu_graph_min_graph_size=1 before jax is imported;
   XLA_PYTHON_CLIENT_PREALLOCATE defaults to false, as torch shares the GPU),
   against the same jit with the same arguments and outputs made by jnp.zeros alone (no
   custom call). Calls are dispatched back to back and synchronised once per round.
2. Kernel time on one bench shape (default qwen3-moe-like), both sides timed the same way:
   one chain of --repeats rounds of the call over every buffer set (the sets rotate as in
   bench.timing, defeating L2), launched after the device is idle and waited for; the
   figure is the chain's wall time / its calls, median of CHAIN_TRIALS after a warm-up run.
   JAX: one jit of the chain (each call's dprob feeding the next of its set, so none is dead
   code; a command buffer under XLA_FLAGS), waited for with block_until_ready. torch: the
   class API's calls captured into one CUDA graph (eager calls where capture fails; the
   record says which), replayed, waited for with torch.cuda.synchronize. D_row of one set
   must be bitwise equal both ways.

Prints a JSON record, then one summary line (last):
``JAX: host us/call X (jit without the call Y), kernel ms jax A torch B``.
Exit status: 0 measured and equal, 1 the D_rows differ, 2 bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from .fused import build_op, run_fused
from .inputs import BufferSet, make_buffer_set, make_buffer_sets
from .shapes import SHAPE_NAMES, Shape, select_shapes
from .timing import _capture
from .tiny_problem import TINY

COMMAND_BUFFER_FLAG = "--xla_gpu_graph_min_graph_size=1"
WARMUP_CALLS = 50
HOST_ROUNDS = 7  # the host figure is the median round
CHAIN_TRIALS = 7  # each kernel figure is the median trial
ENTRY_OPTIONS = {"act_func": "dswiglu", "generate_dbias": True}
SEED = 5


def configure_xla() -> None:
    """Before jax is imported: COMMAND_BUFFER_FLAG into XLA_FLAGS, and no preallocation of
    most of the GPU's memory (torch shares the device)."""
    if "jax" in sys.modules:
        raise RuntimeError("configure_xla: jax is already imported (and has read XLA_FLAGS)")
    flags = os.environ.get("XLA_FLAGS", "")
    if COMMAND_BUFFER_FLAG not in flags.split():
        os.environ["XLA_FLAGS"] = f"{flags} {COMMAND_BUFFER_FLAG}".strip()
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def jax_arguments(buffers: BufferSet) -> dict[str, Any]:
    """The entry's array arguments for ``buffers``, copied into JAX arrays (dense (L, N, K)
    weights; no dprob: the call starts it from zeros)."""
    import jax
    import jax.numpy as jnp

    def copy(tensor: Any) -> Any:
        return jnp.array(jax.dlpack.from_dlpack(tensor.contiguous()), copy=True)

    return {
        "a_tensor": copy(buffers.a),
        "c_tensor": copy(buffers.c),
        "b_tensor": copy(buffers.b_experts),
        "padded_offsets": copy(buffers.padded_offsets),
        "alpha_tensor": copy(buffers.alpha),
        "beta_tensor": copy(buffers.beta),
        "prob_tensor": copy(buffers.prob),
    }


def entry_step() -> Callable[[dict[str, Any]], tuple[Any, Any, Any]]:
    """jit(arguments -> (D_row, dprob, dbias)) through dglu's custom call."""
    import jax
    from dglu.jax import grouped_gemm_dglu_jax

    def step(arguments: dict[str, Any]) -> tuple[Any, Any, Any]:
        out = grouped_gemm_dglu_jax(**arguments, **ENTRY_OPTIONS)
        return out.d_row_tensor, out.dprob_tensor, out.dbias_tensor

    return jax.jit(step)


def zeros_step(like: Callable[[dict[str, Any]], Any], arguments: dict[str, Any]) -> Callable:
    """jit(arguments -> zeros shaped as ``like``'s outputs): the same jit without the call."""
    import jax
    import jax.numpy as jnp

    shapes = jax.eval_shape(like, arguments)
    return jax.jit(lambda _: tuple(jnp.zeros(s.shape, s.dtype) for s in shapes))


def host_us_per_call(step: Callable, arguments: dict[str, Any], calls: int) -> float:
    """Median over HOST_ROUNDS of the wall microseconds per dispatch of ``step``."""
    import jax

    for _ in range(WARMUP_CALLS):
        out = step(arguments)
    jax.block_until_ready(out)
    rounds = []
    for _ in range(HOST_ROUNDS):
        start = time.perf_counter()
        for _ in range(calls):
            out = step(arguments)
        rounds.append(1e6 * (time.perf_counter() - start) / calls)
        jax.block_until_ready(out)
    return statistics.median(rounds)


def chain_ms_per_call(run: Callable[[], Any], wait: Callable[[Any], Any], calls: int) -> float:
    """Wall milliseconds per call of ``run`` (a chain of ``calls`` calls; ``wait(run())``
    returns once its work is done): median of CHAIN_TRIALS, after one warm-up run."""
    if calls <= 0:
        raise ValueError(f"calls: need the chain's positive call count, got {calls}")
    wait(run())
    trials = []
    for _ in range(CHAIN_TRIALS):
        start = time.perf_counter()
        wait(run())
        trials.append(1e3 * (time.perf_counter() - start))
    return statistics.median(trials) / calls


def jax_kernel_ms(sets: Sequence[dict[str, Any]], repeats: int) -> float:
    """chain_ms_per_call of one jit running ``repeats`` rounds of the entry over ``sets``."""
    import jax
    import jax.numpy as jnp
    from dglu.jax import grouped_gemm_dglu_jax

    def chain(sets: Sequence[dict[str, Any]]) -> list[Any]:
        dprobs = [jnp.zeros(s["prob_tensor"].shape, jnp.float32) for s in sets]
        for _ in range(repeats):
            for i, arguments in enumerate(sets):
                out = grouped_gemm_dglu_jax(**arguments, dprob_tensor=dprobs[i], **ENTRY_OPTIONS)
                dprobs[i] = out.dprob_tensor
        return dprobs

    run = jax.jit(chain)
    return chain_ms_per_call(partial(run, sets), jax.block_until_ready, repeats * len(sets))


def torch_chain(calls: Sequence[Callable[[], Any]]) -> tuple[Callable[[], Any], str, str | None]:
    """(run the whole chain, "cuda_graph" or "eager", why not a graph): ``calls`` captured
    into one CUDA graph, or called one by one where capture fails."""
    import torch

    def run_all() -> None:
        for call in calls:
            call()

    try:
        (graph,) = _capture([run_all])
        return graph.replay, "cuda_graph", None
    except Exception as exc:  # timed eagerly instead; the reason is kept
        torch.cuda.synchronize()
        return run_all, "eager", f"graph capture failed, timed eagerly: {type(exc).__name__}: {exc}"


def torch_kernel(op: Any, sets: Sequence[BufferSet], repeats: int) -> dict[str, Any]:
    """chain_ms_per_call of ``repeats`` rounds of the class API over ``sets`` (torch_chain)."""
    import torch

    calls = [partial(run_fused, op, s) for _ in range(repeats) for s in sets]
    run, method, note = torch_chain(calls)
    torch.cuda.synchronize()
    ms = chain_ms_per_call(run, lambda _: torch.cuda.synchronize(), len(calls))
    return {"ms_per_call": ms, "method": method, **({"note": note} if note else {})}


def d_rows_equal(buffers: BufferSet, arguments: dict[str, Any]) -> bool:
    """The torch path's D_row of ``buffers`` and the JAX entry's, bit for bit."""
    import numpy as np
    import torch

    op = build_op(buffers)
    run_fused(op, buffers)
    torch.cuda.synchronize()
    want = buffers.d_row.view(torch.int16).cpu().numpy().reshape(-1)
    got = np.asarray(entry_step()(arguments)[0]).view(np.int16).reshape(-1)
    return bool(np.array_equal(got, want))


def measure(shape: Shape, calls: int, repeats: int) -> dict[str, Any]:
    """The host and kernel figures (see the module docstring)."""
    import torch

    device = torch.device("cuda", 0)
    generator = torch.Generator(device=device)
    generator.manual_seed(SEED)
    tiny = jax_arguments(make_buffer_set(TINY, device, generator))
    step = entry_step()
    torch_sets = make_buffer_sets(shape, device, SEED)
    jax_sets = [jax_arguments(s) for s in torch_sets]
    op = build_op(torch_sets[0])
    return {
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "host_problem": TINY.describe(),
        "host_calls": calls,
        "host_us_per_call": host_us_per_call(step, tiny, calls),
        "host_us_without_call": host_us_per_call(zeros_step(step, tiny), tiny, calls),
        "kernel_shape": shape.describe(),
        "buffer_sets": len(torch_sets),
        "kernel_repeats": repeats,
        "kernel_timing": "wall time of a chain of repeats x buffer_sets calls, per call",
        "jax_kernel_ms": jax_kernel_ms(jax_sets, repeats),
        "torch_kernel": torch_kernel(op, torch_sets, repeats),
        "d_row_equal": d_rows_equal(torch_sets[0], jax_sets[0]),
    }


def summary_line(record: dict[str, Any]) -> str:
    return (
        f"JAX: host us/call {record['host_us_per_call']:.1f} "
        f"(jit without the call {record['host_us_without_call']:.1f}), "
        f"kernel ms jax {record['jax_kernel_ms']:.4f} "
        f"torch {record['torch_kernel']['ms_per_call']:.4f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.jax_host",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--shape", choices=SHAPE_NAMES, default="qwen3-moe-like")
    parser.add_argument("--calls", type=int, default=2000, help="dispatches per host round")
    parser.add_argument("--repeats", type=int, default=10, help="rounds of each kernel chain")
    args = parser.parse_args(argv)
    if args.calls <= 0 or args.repeats <= 0:
        parser.error(f"--calls, --repeats: need positive counts, got {args.calls}, {args.repeats}")
    (shape,) = select_shapes([args.shape])
    configure_xla()
    import torch

    if not torch.cuda.is_available():
        print("bench.jax_host: torch sees no CUDA device", file=sys.stderr)
        return 2
    record = measure(shape, args.calls, args.repeats)
    print(json.dumps(record, indent=1))
    print(summary_line(record))
    return 0 if record["d_row_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
