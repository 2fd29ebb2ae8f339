"""Time the fused op and the PyTorch baselines side by side on one shape.

Every candidate is timed by bench.timing on the same rotated buffer sets; a candidate that
fails is recorded with its error and the others still run.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from .baselines import dense_mm, grouped_gemm, unfused
from .fused import agreement, build_op, run_fused
from .inputs import BufferSet, make_buffer_sets
from .shapes import Shape
from .timing import time_calls

# The candidates' names and what each times, in the order they are timed and reported.
DESCRIPTIONS = {
    "fused": "dglu's fused op (dswiglu, dprob, dbias; class API execute, default dispatch), "
    "CUDA-graph replays: its device time",
    "fused_eager": "the same call launched eagerly each time: adds its host path and the "
    "read-back of padded_offsets to the device timeline",
    "grouped_gemm": "torch._grouped_mm alone (GEMM only, bf16 R)",
    "grouped_eager_epilogue": "torch._grouped_mm + the dSwiGLU epilogue (D, dprob, dbias) "
    "in eager PyTorch",
    "grouped_compiled_epilogue": "torch._grouped_mm + the same epilogue under torch.compile",
    "dense_mm": "torch.mm of the same FLOPs: (M, K) @ (K, N)",
}
EAGER_ONLY = {"fused_eager"}  # timed without CUDA graphs


def error_record(exc: BaseException) -> dict[str, str]:
    """What the results JSON keeps of a failure: the error and where it came from."""
    return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=4)}


def runners(op: Any, compiled_epilogue: Any) -> dict[str, Callable[[BufferSet], Any] | str]:
    """Per candidate, its call on a buffer set, or why it cannot run (the dglu op or the
    compiled epilogue is None when it could not be made)."""
    fused: Callable[[BufferSet], Any] | str = (
        partial(run_fused, op) if op is not None else "the dglu op could not be built (see variant)"
    )
    compiled: Callable[[BufferSet], Any] | str = (
        partial(unfused, epilogue=compiled_epilogue)
        if compiled_epilogue is not None
        else "torch.compile is unavailable (see method.torch_compile)"
    )
    return {
        "fused": fused,
        "fused_eager": fused,
        "grouped_gemm": grouped_gemm,
        "grouped_eager_epilogue": unfused,
        "grouped_compiled_epilogue": compiled,
        "dense_mm": dense_mm,
    }


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
    """Timings (bench.timing.Timing dicts or error records), the op's variant and its
    agreement with the unfused path, for ``shape`` on the torch ``device``."""
    import torch

    sets = make_buffer_sets(shape, device, seed)
    record: dict[str, Any] = {"buffer_sets": len(sets), "timings": {}}
    try:
        op = build_op(sets[0])
        record["variant"] = op.variant_name
    except Exception as exc:  # the baselines are still timed
        op, record["variant"] = None, error_record(exc)
    if op is not None:
        try:
            record["agreement"] = agreement(op, sets[0])
        except Exception as exc:  # the op is still timed; the failure is reported
            record["agreement"] = error_record(exc)
    for name, run in runners(op, compiled_epilogue).items():
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
