"""``python -m bench``: time dglu's fused op beside the PyTorch baselines, measure its host
costs, write bench.json, bench_ratios.png, bench_table.txt (and host_profile.txt) into
--out, and print the table and one summary line (last).

Exit status: 0 when everything was measured and the fused ops (default and deterministic)
passed their gates;
1 when a measurement failed or disagreed (missed performance targets are reported, not
failures); 2 for bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

from dglu_build.atomic_write import write_atomic

from .chart import ratios_png
from .device import DESCRIPTIONS, error_record, measure_shape
from .environment import describe
from .fake import fake_host, fake_shape
from .floors import SOURCE as FLOORS_SOURCE
from .jit_compile_time import COMMITTED as COMMITTED_JIT_JSON
from .jit_compile_time import read_reference
from .options import add_run_options, parse_run_options, positive
from .report import summary_line, table
from .results import median_ms, results_record, shape_result
from .shapes import Shape

JSON_NAME, CHART_NAME, TABLE_NAME, PROFILE_NAME = (
    "bench.json",
    "bench_ratios.png",
    "bench_table.txt",
    "host_profile.txt",
)
TIMING_METHOD = (
    "CUDA events around each call; warm-up passes first; median of many samples (as many "
    "as fit the budget, 20 to 500); inputs rotated over buffer sets holding at least 3x L2; "
    "each call captured once in a CUDA graph and replayed (fused_eager excepted)"
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    add_run_options(parser, "the results")
    parser.add_argument("--dry-run", action="store_true", help="fake timings, no GPU or torch")
    parser.add_argument("--skip-host", action="store_true", help="skip the host-side figures")
    parser.add_argument(
        "--host-runs",
        type=positive(int),
        default=3,
        help="fresh processes per host figure (default: %(default)s)",
    )
    parser.add_argument(
        "--host-calls",
        type=positive(int),
        default=2000,
        help="calls per steady-state figure (default: %(default)s)",
    )
    parser.add_argument(
        "--jit-json",
        type=Path,
        default=COMMITTED_JIT_JSON,
        help="CuTe DSL JIT compile time measured on the CPU machine, reported beside the "
        "host figures (default: %(default)s)",
    )
    return parse_run_options(parser, argv)


def _compiled_epilogue() -> tuple[Any, dict[str, Any]]:
    """torch.compile of the baseline epilogue (None if unavailable), and how it was made."""
    settings: dict[str, Any] = {"mode": "default", "dynamic": False}
    try:
        import torch

        from .baselines import dswiglu_epilogue

        return torch.compile(dswiglu_epilogue, dynamic=False), settings
    except Exception as exc:  # the compiled baseline is then recorded as unavailable
        return None, {**settings, **error_record(exc)}


def _measure_shapes(
    shapes: tuple[Shape, ...], args: argparse.Namespace, progress: Any
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each shape's results record (a failed shape keeps its error), and torch.compile's
    settings."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    compiled, compile_settings = _compiled_epilogue()
    results = []
    for shape in shapes:
        start = time.monotonic()
        try:
            measured = measure_shape(shape, device, args.budget_ms, args.seed, compiled)
        except Exception as exc:  # e.g. out of memory or a sticky CUDA error
            measured = {"timings": {}, "error": error_record(exc)}
        results.append(shape_result(shape, measured))
        fused, det, gemm = (
            median_ms(measured["timings"], n)
            for n in ("fused", "fused_deterministic", "grouped_gemm")
        )
        progress(
            results,
            f"{shape.name}: fused {fused} ms, deterministic {det} ms, grouped GEMM {gemm} ms "
            f"({time.monotonic() - start:.0f} s)",
        )
    return results, compile_settings


def _measure_host(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """bench.host's figures; each one that fails keeps its error instead."""
    import torch

    from . import host

    device = torch.device("cuda", torch.cuda.current_device())
    figures: dict[str, Any] = {}
    steps = {
        "import": lambda: host.import_time(2 * args.host_runs),
        "first_call": lambda: host.first_call(args.host_runs),
        "steady_state": lambda: host.steady_state(
            device, args.host_calls, args.budget_ms, out / PROFILE_NAME
        ),
        "graph_replay": lambda: host.graph_replay(device),
    }
    for name, step in steps.items():
        try:
            figures[name] = step()
        except Exception as exc:  # recorded; the next figure is measured
            figures[name] = error_record(exc)
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    environment = describe()
    method = {
        "timing": TIMING_METHOD,
        "budget_ms": args.budget_ms,
        "seed": args.seed,
        "flops": "2 * M * N * K, M = rows owned by experts",
        "floors": FLOORS_SOURCE,
        "candidates": DESCRIPTIONS,
    }

    def assemble(shapes: list[dict[str, Any]], host: dict[str, Any] | None) -> dict[str, Any]:
        record = results_record(environment, method, shapes, host, args.dry_run)
        record["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record["duration_s"] = time.monotonic() - started
        return record

    def progress(shapes: list[dict[str, Any]], line: str) -> None:
        """Keep a partial JSON in --out (a run cut short still leaves its figures)."""
        write_atomic(
            out / JSON_NAME,
            json.dumps({**assemble(shapes, None), "complete": False}, indent=2).encode(),
        )
        print(line, file=sys.stderr, flush=True)

    if args.dry_run:
        import random

        rng = random.Random(args.seed)
        shapes = [shape_result(s, fake_shape(s, rng)) for s in args.shapes]
        host = None if args.skip_host else fake_host(rng)
    else:
        try:
            import torch
        except ImportError:
            print(
                "bench: torch is not installed; use --dry-run to check the report path",
                file=sys.stderr,
            )
            return 2
        if not torch.cuda.is_available():
            print("bench: no CUDA device; use --dry-run to check the report path", file=sys.stderr)
            return 2
        shapes, method["torch_compile"] = _measure_shapes(args.shapes, args, progress)
        host = None if args.skip_host else _measure_host(args, out)

    if host is not None:
        host["jit_compile_reference"] = read_reference(args.jit_json)
    record = assemble(shapes, host)
    try:
        write_atomic(out / CHART_NAME, ratios_png(record))
    except Exception as exc:  # the JSON and table are still written
        record["chart"] = error_record(exc)
        record["errors"].append("/chart")
    text = table(record)
    record["summary"] = summary_line(record)
    record["complete"] = True
    write_atomic(out / JSON_NAME, (json.dumps(record, indent=2) + "\n").encode())
    write_atomic(out / TABLE_NAME, (text + "\n" + record["summary"] + "\n").encode())
    print(text)
    print(f"results: {out / JSON_NAME}, {out / CHART_NAME}")
    print(record["summary"])
    return 1 if record["errors"] or record["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
