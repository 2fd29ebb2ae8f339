"""``python -m bench.mxfp8``: dglu's MXFP8 fused op beside dglu's BF16 fused op and the
unfused path a Hopper user writes today (bench.mxfp8_problem), on bench's shapes, in one
process.

Per shape: median ms and TFLOP/s (2 * M * N * K) of each candidate, MXFP8 / BF16 TFLOP/s
(target >= 0.9) and unfused / MXFP8 time (target >= 3), the variant the MXFP8 call selects
and its workspace. A candidate is timed (bench.timing: CUDA-graph replays over buffer sets
rotated to defeat L2) only after its outputs matched the eager unfused path's
(bench.mxfp8_problem.check). Writes mxfp8.json (commit it as
bench/results/<date>-<commit>-mxfp8.json) and, where matplotlib imports, mxfp8.png (the two
ratios per shape against their targets) into --out, and prints the table and, last, one
summary line starting with "MXFP8:".

Exit status: 0 when every candidate was measured and matched; 1 when a measurement failed
or disagreed (missed targets are reported, not failures); 2 for bad arguments or no GPU.
Usage (GPU machine, dglu wheel installed, from the repo root):
    python -m bench.mxfp8 [--shapes dsv3-like,qwen3-moe-like] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from dglu_build.atomic_write import write_atomic

from .chart import bound_ratios_png
from .options import add_run_options, parse_run_options
from .device import _first_call_s, error_record
from .report import SHAPE_WIDTH, _ratio_cell, _span, _time_cell
from .results import Target, error_paths, lookup, ratio, target_tally, with_tflops
from .session import Session, no_gpu
from .shapes import Shape

JSON_NAME, CHART_NAME = "mxfp8.json", "mxfp8.png"
CHART_TITLE = "dglu MXFP8 fused dSwiGLU backward vs dglu BF16 and the unfused torch path"
TIMING = (
    "bench.timing: each call captured once in a CUDA graph and replayed, CUDA events around "
    "each replay; warm-up passes first; median of as many samples as fit --budget-ms (20 to "
    "500); inputs rotated over buffer sets holding at least 3x L2"
)
TABLE_CELL = 19  # the table's column width
CANDIDATES = {
    "mxfp8": "dglu's MXFP8 fused op through the wrapper grouped_gemm_dglu: e4m3 A, B, D_row "
    "and D_col with E8M0 scales (sf_vec_size 32), bf16 C, dswiglu, dense K-major B, dprob, "
    "dbias, norm_const 1; CUDA-graph replays",
    "bf16": "dglu's BF16 fused op on the same values (A and B decoded exactly to bf16): "
    "bench's fused row (class API execute, dswiglu, dprob, dbias); CUDA-graph replays",
    "unfused": "torch: A and B dequantized to bf16 (torch.compile), torch._grouped_mm, then "
    "bench.baselines' dSwiGLU epilogue with D in fp32 and the MXFP8 quantization of D_row "
    "and D_col into the seed's SFD layouts (one torch.compile graph); CUDA-graph replays",
}
# ratio -> (numerator candidate, denominator candidate) of median times, title, target (>=)
RATIOS = {
    "mxfp8_over_bf16_tflops": ("bf16", "mxfp8", "MXFP8 / BF16 TFLOP/s", 0.9),
    "unfused_over_mxfp8_time": ("unfused", "mxfp8", "unfused / MXFP8 time", 3.0),
}
SUMMARY_TITLES = {
    "mxfp8_over_bf16_tflops": "mxfp8/bf16 TF/s",
    "unfused_over_mxfp8_time": "unfused/mxfp8",
}


class Candidate(NamedTuple):
    """A way of solving the problem: its timed call, its outputs for the check, and the
    check's bound on D's relative L2."""

    run: Callable[[Any], Any]
    outputs: Callable[[Any], dict[str, Any]]
    d_bound: float


def candidates(bf16_op: Any, unfused: Any) -> dict[str, Candidate | str]:
    """Per candidate, how it runs, or why it cannot (the BF16 op None: not built)."""
    from . import mxfp8_problem as p
    from .fused import run_fused

    bf16: Candidate | str = "the BF16 op could not be built (see bf16_variant)"
    if bf16_op is not None:
        bf16 = Candidate(
            lambda s: run_fused(bf16_op, s.bf16), partial(p.bf16_outputs, bf16_op), p.BF16_D_BOUND
        )
    return {
        "mxfp8": Candidate(p.run_mxfp8, p.mxfp8_outputs, p.FP8_D_BOUND),
        "bf16": bf16,
        "unfused": Candidate(unfused, partial(p.unfused_outputs, unfused), p.FP8_D_BOUND),
    }


def _built_bf16_op(samples: Any, record: dict[str, Any]) -> Any:
    """bench.fused's BF16 op (None if it cannot be built); its variant goes into ``record``."""
    from .fused import build_op

    try:
        op = build_op(samples)
    except Exception as exc:  # the other candidates still run
        record["bf16_variant"] = error_record(exc)
        return None
    record["bf16_variant"] = op.variant_name
    return op


def _checks(runs: dict[str, Candidate | str], first: Any) -> dict[str, Any]:
    """Each runnable candidate's check against the eager unfused path on ``first`` (an
    error record where a call failed; all of them when the eager path did)."""
    from . import mxfp8_problem as p

    try:
        want = p.eager_reference(first)
    except Exception as exc:  # nothing can be checked, so nothing is timed
        failed = error_record(exc)
        return {name: failed for name, run in runs.items() if not isinstance(run, str)}
    checks = {}
    for name, run in runs.items():
        if isinstance(run, str):
            continue
        try:
            checks[name] = p.check(run.outputs(p.fresh(first)), want, run.d_bound)
        except Exception as exc:  # recorded; the candidate is not timed
            checks[name] = error_record(exc)
    return checks


def measure_shape(
    shape: Shape, device: Any, budget_ms: float, seed: int, unfused: Any
) -> dict[str, Any]:
    """Buffer sets, the MXFP8 call's variant and workspace, the BF16 op's variant, the
    unfused path's first-call (compile) time, each candidate's check, and the timings of the
    candidates that passed it."""
    import torch

    from .mxfp8_problem import make_mxfp8_sets, operand_bytes, selected_variant, workspace_bytes
    from .timing import time_calls

    sets = make_mxfp8_sets(shape, device, seed)
    record: dict[str, Any] = {"buffer_sets": len(sets), "operand_bytes": operand_bytes(shape)}
    for field, find in (
        ("mxfp8_variant", partial(selected_variant, sets[0])),
        ("workspace_bytes", partial(workspace_bytes, sets[0], shape)),
    ):
        try:
            record[field] = find()
        except Exception as exc:  # recorded; the measurements still run
            record[field] = error_record(exc)
    runs = candidates(_built_bf16_op(sets[0].bf16, record), unfused)
    try:
        record["compile_s"] = _first_call_s(unfused, sets[0])
    except Exception as exc:  # its check fails the same way and says so
        record["compile_s"] = error_record(exc)
    record["checks"] = _checks(runs, sets[0])
    timings: dict[str, Any] = {}
    for name, run in runs.items():
        if isinstance(run, str):
            timings[name] = {"error": run}
        elif lookup(record["checks"], name, "ok") is not True:
            timings[name] = {"not_timed": f"its check failed (see checks.{name})"}
        else:
            try:
                timings[name] = time_calls([partial(run.run, s) for s in sets], budget_ms).as_dict()
            except Exception as exc:  # recorded; the next candidate runs
                timings[name] = error_record(exc)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    record["timings"] = timings
    return record


def shape_record(shape: Shape, measured: dict[str, Any]) -> dict[str, Any]:
    """``measured`` with TFLOP/s, the two ratios and their targets."""
    timings = with_tflops(shape, measured["timings"])
    ratios = {name: ratio(timings, top, bottom) for name, (top, bottom, _, _) in RATIOS.items()}
    targets = [
        Target(title, ratios[name], bound, at_most=False).as_dict()
        for name, (_, _, title, bound) in RATIOS.items()
    ]
    return {
        "shape": shape.describe(),
        **measured,
        "timings": timings,
        "ratios": ratios,
        "targets": targets,
    }


def wrong_results(shapes: list[dict[str, Any]]) -> list[str]:
    """The candidates whose outputs did not match the eager unfused path's."""
    return [
        f"{s['shape']['name']}: {name} disagrees with the eager unfused path: "
        f"{s['checks'][name].get('failure') or s['checks'][name].get('error')}"
        for s in shapes
        for name in CANDIDATES
        if name in s.get("checks", {}) and s["checks"][name].get("ok") is not True
    ]


def results_record(
    environment: dict[str, Any], method: dict[str, Any], shapes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The whole mxfp8.json, summary excluded."""
    return {
        "schema_version": 1,
        "environment": environment,
        "method": method,
        "shapes": shapes,
        "targets": target_tally(shapes, None),
        "errors": error_paths({"shapes": shapes}),
        "wrong": wrong_results(shapes),
    }


def _check_mark(shape: dict[str, Any], name: str) -> str:
    return {True: "ok", False: "WRONG", None: "-"}[lookup(shape, "checks", name, "ok")]


def table(record: dict[str, Any]) -> str:
    """Per shape: median ms (TFLOP/s) of each candidate, the two ratios, the checks."""
    cells = [f"{name} ms (TF/s)" for name in CANDIDATES] + list(SUMMARY_TITLES.values())
    cells.append("checks " + "/".join(name[0] for name in CANDIDATES))
    lines = ["shape".ljust(SHAPE_WIDTH) + "".join(cell.rjust(TABLE_CELL) for cell in cells)]
    for shape in record["shapes"]:
        cells = [_time_cell(shape["timings"], name) for name in CANDIDATES]
        cells += [_ratio_cell(shape["ratios"][name]) for name in RATIOS]
        cells.append("/".join(_check_mark(shape, name) for name in CANDIDATES))
        lines.append(
            shape["shape"]["name"].ljust(SHAPE_WIDTH)
            + "".join(cell.strip().rjust(TABLE_CELL) for cell in cells)
        )
    return "\n".join(lines)


def summary_line(record: dict[str, Any]) -> str:
    """One line: each ratio's range over the shapes with its target, targets met, checks."""
    ratios = [s["ratios"] for s in record["shapes"]]
    parts = [
        f"{SUMMARY_TITLES[name]} {_span([r[name] for r in ratios], 'x')} (target >= {bound:g})"
        for name, (_, _, _, bound) in RATIOS.items()
    ]
    tally = record["targets"]
    parts.append(f"targets {tally['met']}/{tally['total']} met")
    wrong = record["wrong"]
    parts.append(f"results {'WRONG (' + str(len(wrong)) + ')' if wrong else 'ok'}")
    if record["errors"]:
        parts.append(f"{len(record['errors'])} failed measurements (errors in the JSON)")
    environment = record["environment"]
    gpu = (environment.get("gpu") or {}).get("name", "no GPU")
    return "MXFP8: " + "; ".join(parts) + f" ({gpu}, commit {environment['commit']})"


def write_chart(record: dict[str, Any], out: Path) -> dict[str, Any]:
    """mxfp8.png written into ``out`` (bench.chart: a panel per ratio, its target dashed);
    what the JSON keeps of it: the file, why it was skipped (matplotlib not installed, said
    on stderr too), or the error."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"bench.mxfp8: matplotlib is not installed; no {CHART_NAME}", file=sys.stderr)
        return {"skipped": "matplotlib is not installed"}
    panels = [(name, title, bound) for name, (_, _, title, bound) in RATIOS.items()]
    try:
        write_atomic(out / CHART_NAME, bound_ratios_png(record, panels, CHART_TITLE))
    except Exception as exc:  # recorded; the JSON and the table are still written
        return error_record(exc)
    return {"file": CHART_NAME}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.mxfp8", description=__doc__.split("\n\n")[0]
    )
    add_run_options(parser, JSON_NAME)
    return parse_run_options(parser, argv)


def progress_line(shape: Shape, measured: dict[str, Any]) -> str:
    """A shape's line on stderr: each candidate's median ms."""
    times = ", ".join(
        f"{name} {lookup(measured, 'timings', name, 'median_ms')} ms" for name in CANDIDATES
    )
    return f"{shape.name}: {times}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if no_gpu("bench.mxfp8"):
        return 2
    from .mxfp8_problem import UnfusedPath

    method = {
        "timing": TIMING,
        "budget_ms": args.budget_ms,
        "seed": args.seed,
        "flops": "2 * M * N * K, M = rows owned by experts",
        "candidates": CANDIDATES,
        "check": "relative L2 of each output (FP8 D decoded with its SFD) from the eager "
        "unfused path's; bounds in bench/mxfp8_problem.py",
        "torch_compile": {"mode": "default", "dynamic": False},
    }
    session = Session(args.out, JSON_NAME, method, results_record, summary_line)
    unfused = UnfusedPath(compiled=True)
    for shape in args.shapes:
        session.measure(
            partial(measure_shape, shape, session.device, args.budget_ms, args.seed, unfused),
            partial(shape_record, shape),
            partial(progress_line, shape),
            failed=lambda error: {"timings": {}, "error": error},
        )
    chart = write_chart(session.record(), args.out)
    record = session.write(complete=True, chart=chart)
    print(table(record))
    written = [JSON_NAME] + ([CHART_NAME] if "file" in chart else [])
    print(f"results: {', '.join(str(args.out / name) for name in written)}")
    print(record["summary"])
    return 1 if record["errors"] or record["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
