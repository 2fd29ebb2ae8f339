"""Turn raw measurements into the results record: TFLOP/s, ratios, targets.

Ratios and TFLOP/s come from median times; FLOPs are 2 * M * N * K with M the valid rows
for every candidate (the GEMM's work, whatever else a candidate does). The fused op and the
grouped GEMM are also set against their floors (bench.floors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .floors import floors_record
from .shapes import Shape

SCHEMA_VERSION = 1
# Issue 12's host targets.
FIRST_CALL_TARGET_MS = 30.0  # dglu import + first call, past torch's import
EXECUTE_TARGET_US = 15.0  # host CPU per call of the class API's execute
WRAPPER_TARGET_US = 25.0  # host CPU per call of the wrapper
EXECUTE_DRIVER_CALLS_TARGET = 3  # driver calls per steady execute

QUACK_TARGET = 1.0  # issue 25: the fused op ahead of quack's gemm_dgated on every shape
DETERMINISTIC_TARGET = 1.06  # issue 25: deterministic / fused, every shape
# ratio name -> (numerator candidate, denominator candidate)
RATIOS = {
    "fused_over_gemm": ("fused", "grouped_gemm"),
    "compiled_over_fused": ("grouped_compiled_epilogue", "fused"),
    "eager_over_fused": ("grouped_eager_epilogue", "fused"),
    "fused_over_dense": ("fused", "dense_mm"),
    "fused_eager_over_fused": ("fused_eager", "fused"),
    "deterministic_over_fused": ("fused_deterministic", "fused"),
    "quack_over_fused": ("quack_dgated", "fused"),
}
# record key of a dglu op's gate -> how the op is named when it fails
GATES = {"agreement": "fused op", "deterministic_agreement": "deterministic fused op"}


@dataclass(frozen=True)
class Target:
    """A figure and the bound the issue sets for it; met is None when it was not measured.

    With ``bound`` None the figure is a yes/no that must be True.
    """

    name: str
    value: float | bool | None
    bound: float | None
    at_most: bool = True  # value <= bound, else value >= bound

    def as_dict(self) -> dict[str, Any]:
        if self.bound is None:
            bound, met = "true", self.value
        else:
            bound = f"{'<=' if self.at_most else '>='} {self.bound:g}"
            met = None
            if self.value is not None:
                met = self.value <= self.bound if self.at_most else self.value >= self.bound
        return {"name": self.name, "value": self.value, "bound": bound, "met": met}


def median_ms(timings: dict[str, Any], name: str) -> float | None:
    """The candidate's median in ms, or None if it failed or was not run."""
    return timings.get(name, {}).get("median_ms")


def ratio(timings: dict[str, Any], numerator: str, denominator: str) -> float | None:
    top, bottom = median_ms(timings, numerator), median_ms(timings, denominator)
    return top / bottom if top is not None and bottom else None


def shape_targets(shape: Shape, ratios: dict[str, Any], fused_tflops: float | None) -> list[Target]:
    """The issue's targets that apply to ``shape``."""
    targets = [
        Target(
            "fused / grouped GEMM only",
            ratios["fused_over_gemm"],
            shape.fused_over_gemm_target,
            True,
        )
    ]
    if shape.tflops_target is not None:
        targets.append(Target("fused TFLOP/s", fused_tflops, shape.tflops_target, False))
    targets.append(Target("deterministic / fused", ratios["deterministic_over_fused"], DETERMINISTIC_TARGET, True))
    if ratios.get("quack_over_fused") is not None:  # only in a run where quack imports
        targets.append(Target("quack gemm_dgated / fused", ratios["quack_over_fused"], QUACK_TARGET, False))
    if shape.speedup_target is not None:
        targets.append(
            Target(
                "(grouped + compiled epilogue) / fused",
                ratios["compiled_over_fused"],
                shape.speedup_target,
                False,
            )
        )
    return targets


def with_tflops(shape: Shape, timings: dict[str, Any]) -> dict[str, Any]:
    """``timings`` with each measured candidate's TFLOP/s added (failed ones as they are)."""
    return {
        name: {**timing, "tflops": shape.flops / timing["median_ms"] / 1e9}
        if "median_ms" in timing
        else timing
        for name, timing in timings.items()
    }


def shape_result(shape: Shape, measured: dict[str, Any]) -> dict[str, Any]:
    """``measured`` (bench.device.measure_shape's record) with TFLOP/s, ratios, floors
    (bench.floors.floors_record), targets."""
    timings = with_tflops(shape, measured["timings"])
    ratios = {name: ratio(timings, *pair) for name, pair in RATIOS.items()}
    fused_tflops = timings.get("fused", {}).get("tflops")
    targets = [t.as_dict() for t in shape_targets(shape, ratios, fused_tflops)]
    return {
        "shape": shape.describe(),
        **measured,
        "timings": timings,
        "ratios": ratios,
        "floors": floors_record(shape, timings),
        "targets": targets,
    }


def lookup(record: dict[str, Any] | None, *keys: str) -> Any:
    """record[k1][k2]..., or None where a level is missing (a failed measurement)."""
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def _total(counts: dict[str, float] | None) -> float | None:
    return None if counts is None else sum(counts.values())


def host_targets(host: dict[str, Any]) -> list[Target]:
    """The issue's host-side targets, on what ``host`` holds."""
    return [
        Target(
            "first call beyond torch (dglu import + call), ms",
            lookup(host, "first_call", "beyond_torch_ms"),
            FIRST_CALL_TARGET_MS,
            True,
        ),
        Target(
            "execute: host CPU us per call",
            lookup(host, "steady_state", "execute", "cpu_us"),
            EXECUTE_TARGET_US,
            True,
        ),
        Target(
            "wrapper: host CPU us per call",
            lookup(host, "steady_state", "wrapper", "cpu_us"),
            WRAPPER_TARGET_US,
            True,
        ),
        Target(
            "execute: driver calls per call",
            _total(lookup(host, "steady_state", "execute_driver_calls")),
            EXECUTE_DRIVER_CALLS_TARGET,
            True,
        ),
        Target("CUDA graph replays correctly", lookup(host, "graph_replay", "ok"), None),
    ]


def target_tally(shapes: list[dict[str, Any]], host: dict[str, Any] | None) -> dict[str, Any]:
    """How many targets were met, missed, or not measured, with the missed ones named."""
    named = [(s["shape"]["name"], t) for s in shapes for t in s["targets"]]
    if host is not None:
        named += [("host", t) for t in host["targets"]]
    return {
        "met": sum(t["met"] is True for _, t in named),
        "missed": [
            f"{where}: {t['name']} = {t['value']:.3g} (target {t['bound']})"
            for where, t in named
            if t["met"] is False
        ],
        "not_measured": [f"{where}: {t['name']}" for where, t in named if t["met"] is None],
        "total": len(named),
    }


def error_paths(record: Any, path: str = "") -> list[str]:
    """Where in ``record`` a measurement failed: the path of each mapping with an "error"."""
    if isinstance(record, dict):
        here = [path or "/"] if "error" in record else []
        return here + [
            p for key, value in record.items() for p in error_paths(value, f"{path}/{key}")
        ]
    if isinstance(record, list):
        return [p for i, value in enumerate(record) for p in error_paths(value, f"{path}/{i}")]
    return []


def wrong_results(shapes: list[dict[str, Any]], host: dict[str, Any] | None) -> list[str]:
    """The checks of the ops' results that failed: per-shape gates, graph replay."""
    wrong = [
        f"{s['shape']['name']}: {op} disagrees with the unfused path"
        for s in shapes
        for gate, op in GATES.items()
        if lookup(s, gate, "ok") is False
    ]
    if lookup(host, "graph_replay", "ok") is False:
        wrong.append("host: CUDA graph replay differs from an eager call")
    return wrong


def results_record(
    environment: dict[str, Any],
    method: dict[str, Any],
    shapes: list[dict[str, Any]],
    host: dict[str, Any] | None,
    dry_run: bool,
) -> dict[str, Any]:
    """The whole results JSON (laid out in README.md's Benchmarks section), summary excluded."""
    if host is not None:
        host = {**host, "targets": [t.as_dict() for t in host_targets(host)]}
    return {
        "schema_version": SCHEMA_VERSION,
        "dry_run": dry_run,
        "environment": environment,
        "method": method,
        "shapes": shapes,
        "host": host,
        "targets": target_tally(shapes, host),
        "errors": error_paths({"shapes": shapes, "host": host}),
        "wrong": wrong_results(shapes, host),
    }
