"""Time the fused op and the PyTorch baselines side by side on one shape.

Every candidate is timed by bench.timing on the same rotated buffer sets; a candidate that
fails is recorded with its error and the others still run.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from .baselines import dense_mm, grouped_gemm, unfused
from .fused import agreement, build_op, run_fused
from .inputs import BufferSet, make_buffer_sets
from .quack import gemm_dgated, quack_runner
from .shapes import Shape
from .timing import time_calls

# The candidates' names and what each times, in the order they are timed and reported.
DESCRIPTIONS = {
    "fused": "dglu's fused op (dswiglu, dprob, dbias; class API execute, default dispatch), "
    "CUDA-graph replays: its device time",
    "fused_deterministic": "the same op with deterministic=True (its _det variant: per-tile "
    "partial sums of dprob and dbias reduced in a fixed order by finisher kernels, no float "
    "atomics), CUDA-graph replays: the cost of determinism",
    "fused_eager": "the same call launched eagerly each time: adds its host path and the "
    "read-back of padded_offsets to the device timeline",
    "grouped_gemm": "torch._grouped_mm alone (GEMM only, bf16 R)",
    "grouped_eager_epilogue": "torch._grouped_mm + the dSwiGLU epilogue (D, dprob, dbias) "
    "in eager PyTorch",
    "grouped_compiled_epilogue": "torch._grouped_mm + the same epilogue under torch.compile",
    "dense_mm": "torch.mm of the same FLOPs: (M, K) @ (K, N)",
    "quack_dgated": "quack's gemm_dgated (JIT CuTe DSL, default config), when quack imports: "
    "the grouped GEMM + dSwiGLU + prob scaling + dprob, and the post-activation (M, N); no "
    "dbias, alpha or beta (bench.quack)",
}
EAGER_ONLY = {"fused_eager"}  # timed without CUDA graphs
# dglu op candidate -> (deterministic, record key of its variant, of its gate's result)
FUSED_OPS = {
    "fused": (False, "variant", "agreement"),
    "fused_deterministic": (True, "deterministic_variant", "deterministic_agreement"),
}


class Skipped(NamedTuple):
    """A candidate this run does not time, and why (not a failed measurement)."""

    reason: str


def error_record(exc: BaseException) -> dict[str, str]:
    """What the results JSON keeps of a failure: the error and where it came from."""
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=4)}


def runners(
    ops: dict[str, Any], compiled_epilogue: Any, quack_dgated: Any = None
) -> dict[str, Callable[[BufferSet], Any] | str | Skipped]:
    """Per candidate, its call on a buffer set, or why it cannot run (``ops`` maps each
    FUSED_OPS candidate to its dglu op, None when it could not be made; the compiled
    epilogue is None when torch.compile could not make it; ``quack_dgated`` is
    bench.quack.gemm_dgated's result: the function, or why it is skipped)."""

    def fused(name: str) -> Callable[[BufferSet], Any] | str:
        op = ops[name]
        if op is None:
            return f"the dglu op could not be built (see {FUSED_OPS[name][1]})"
        return partial(run_fused, op)

    compiled: Callable[[BufferSet], Any] | str = (
        partial(unfused, epilogue=compiled_epilogue)
        if compiled_epilogue is not None
        else "torch.compile is unavailable (see method.torch_compile)"
    )
    return {
        "fused": fused("fused"),
        "fused_deterministic": fused("fused_deterministic"),
        "fused_eager": fused("fused"),
        "grouped_gemm": grouped_gemm,
        "grouped_eager_epilogue": unfused,
        "grouped_compiled_epilogue": compiled,
        "dense_mm": dense_mm,
        "quack_dgated": Skipped(quack_dgated or "skipped: not asked for")
        if quack_dgated is None or isinstance(quack_dgated, str)
        else quack_runner(quack_dgated),
    }


def _gated_op(
    samples: BufferSet, deterministic: bool, variant_key: str, agreement_key: str, record: dict[str, Any]
) -> Any:
    """The dglu op (None if it cannot be built); its variant and its gate's result go
    into ``record`` under the keys given (an error record where either failed)."""
    try:
        op = build_op(samples, deterministic)
        record[variant_key] = op.variant_name
    except Exception as exc:  # the other candidates are still timed
        record[variant_key] = error_record(exc)
        return None
    try:
        record[agreement_key] = agreement(op, samples)
    except Exception as exc:  # the op is still timed; the failure is reported
        record[agreement_key] = error_record(exc)
    return op


def _first_call_s(run: Callable[[BufferSet], Any], buffers: BufferSet) -> float:
    """Seconds of one synchronized call (for torch.compile: its compilation)."""
    import torch

    start = time.perf_counter()
    run(buffers)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def measure_shape(
    shape: Shape, device: Any, budget_ms: float, seed: int, compiled_epilogue: Any
) -> dict[str, Any]:
    """Timings (bench.timing.Timing dicts or error records), and each dglu op's variant
    and gate (see FUSED_OPS), for ``shape`` on the torch ``device``."""
    import torch

    sets = make_buffer_sets(shape, device, seed)
    record: dict[str, Any] = {"buffer_sets": len(sets), "timings": {}}
    ops = {name: _gated_op(sets[0], *keys, record) for name, keys in FUSED_OPS.items()}
    for name, run in runners(ops, compiled_epilogue, gemm_dgated()).items():
        if isinstance(run, Skipped):
            record["timings"][name] = {"skipped": run.reason}
            continue
        if isinstance(run, str):
            record["timings"][name] = {"error": run}
            continue
        try:
            if name == "grouped_compiled_epilogue":
                record["compile_s"] = _first_call_s(run, sets[0])
            calls = [partial(run, buffers) for buffers in sets]
            timing = time_calls(calls, budget_ms, use_graphs=name not in EAGER_ONLY)
            record["timings"][name] = timing.as_dict()
        except Exception as exc:  # recorded; the next candidate runs
            record["timings"][name] = error_record(exc)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    del sets
    torch.cuda.empty_cache()
    return record
