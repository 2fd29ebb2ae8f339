"""Fake measurements for ``--dry-run``: the same records a GPU run makes, with invented
numbers, so that the report path (JSON, table, chart, summary) runs anywhere, no torch
needed. Every record it makes is marked dry_run in the results."""

from __future__ import annotations

import random
from typing import Any

from .device import DESCRIPTIONS
from .shapes import Shape
from .timing import summarize

FAKE_SAMPLES = 25
FAKE_GEMM_TFLOPS = 600.0
FAKE_AGREEMENT = {
    "d_rel_l2": 3e-3,
    "dprob_rel_l2": 2e-3,
    "dbias_rel_l2": 2e-3,
    "check": "every element within tests/gpu/checks.py's tolerances",
    "ok": True,
}
# candidate -> (low, high) factor of the fake grouped GEMM time
FAKE_FACTORS = {
    "fused": (0.9, 1.3),
    "fused_eager": (1.3, 1.6),
    "grouped_gemm": (1.0, 1.0),
    "grouped_eager_epilogue": (3.0, 9.0),
    "grouped_compiled_epilogue": (1.5, 5.0),
    "dense_mm": (0.8, 0.95),
    "quack_dgated": (1.05, 1.4),
}
FAKE_DETERMINISTIC_COST = (1.0, 1.1)  # (low, high) factor of the fake fused time


def _fake_timing(rng: random.Random, center_ms: float) -> dict[str, Any]:
    samples = [center_ms * rng.uniform(0.98, 1.05) for _ in range(FAKE_SAMPLES)]
    return summarize(samples, "cuda_graph", "dry run: fake timings").as_dict()


def fake_shape(shape: Shape, rng: random.Random) -> dict[str, Any]:
    """A bench.device.measure_shape record for ``shape`` with invented timings."""
    gemm_ms = shape.flops / (FAKE_GEMM_TFLOPS * 1e9)
    centers = {name: gemm_ms * rng.uniform(*factors) for name, factors in FAKE_FACTORS.items()}
    centers["fused_deterministic"] = centers["fused"] * rng.uniform(*FAKE_DETERMINISTIC_COST)
    return {
        "buffer_sets": 2,
        "timings": {name: _fake_timing(rng, centers[name]) for name in DESCRIPTIONS},
        "variant": "dry-run (no variant loaded)",
        "agreement": dict(FAKE_AGREEMENT),
        "deterministic_variant": "dry-run (no variant loaded)",
        "deterministic_agreement": dict(FAKE_AGREEMENT),
        "compile_s": rng.uniform(5.0, 20.0),
    }


def fake_host(rng: random.Random) -> dict[str, Any]:
    """A bench.host record with invented figures."""

    def per_call(us: float) -> dict[str, float]:
        return {"wall_us": us * 1.1, "cpu_us": us, "launches_per_s": 1e6 / (us * 1.1)}

    import_ms, call_ms = rng.uniform(5, 30), rng.uniform(10, 80)
    return {
        "import": {"median_ms": import_ms, "runs_ms": [import_ms], "imports_torch": False},
        "first_call": {
            "dglu_import_ms": import_ms,
            "first_call_ms": call_ms,
            "beyond_torch_ms": import_ms + call_ms,
        },
        "steady_state": {
            "execute": per_call(rng.uniform(8, 30)),
            "wrapper": per_call(rng.uniform(15, 60)),
            "execute_driver_calls": {"cuLaunchKernelEx": 2.0},
            "wrapper_driver_calls": {"cuLaunchKernelEx": 2.0, "cuMemsetD32Async": 1.0},
            "execute_driver_us": rng.uniform(2, 8),
            "wrapper_driver_us": rng.uniform(3, 12),
            "torch_op_us": rng.uniform(3, 10),
        },
        "graph_replay": {"ok": True, "trials": []},
    }
