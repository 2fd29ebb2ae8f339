"""``python -m bench.mxfp8_decodes``: dglu's MXFP8 fused op in each of the decodes its wheel
ships (``prepass``: decode kernels, the fused kernel, a quantizer, with GB-sized BF16
workspaces; ``one_pass``: decoded in the mainloop, O(L) workspace) on a grid of problem
classes, beside the decode the shipped dispatch rules pick: the rules' bounds measured on a
grid rather than at two row counts.

A class is a shape of --shapes with its experts' rows scaled to a total of one of --rows
(bench.shapes.with_rows). Per class: the variant the shipped selection takes and its decode;
then, with the selection restricted to each decode in turn (bench.mxfp8_problem.only_decode),
the MXFP8 wrapper call's outputs checked against the eager unfused path's and the two
decodes' against each other (bench.mxfp8_problem.check), and the call timed (bench.timing)
where its check passed. Prints a table (ms per decode, one_pass / prepass, the shipped pick
and whether it is the faster decode), per shape the faster decode by rows (the rows bound a
``max_m`` rule would take), and last one summary line starting with "MXFP8 DECODES:" that
counts the classes whose shipped pick is slower than the other decode by more than 3%.
Writes decodes.json into --out (commit it as bench/results/<date>-<commit>-decodes.json).

Exit status: 0 when every class was measured and every output matched; 1 when a
measurement failed or disagreed (a slower pick is reported, not a failure); 2 for bad
arguments or no GPU.
Usage (GPU machine, dglu wheel installed, from the repo root):
    python -m bench.mxfp8_decodes [--shapes dsv3-like,qwen3-moe-like] [--rows 2048,8192] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import Any

from .device import error_record
from .mxfp8 import TIMING
from .options import add_run_options, parse_run_options
from .report import SHAPE_WIDTH, _ratio_cell, _span
from .results import error_paths, lookup
from .session import Session, no_gpu
from .shapes import M_ALIGNED, Shape, with_rows

JSON_NAME = "decodes.json"
DECODES = ("prepass", "one_pass")  # each MXFP8 configuration ships in both (kernel_specs/)
DEFAULT_ROWS = (2048, 4096, 8192, 16384)
SLOWER_MARGIN = 0.03  # a shipped pick slower than the other decode by more than this counts
TABLE_CELL = 13  # the table's column width


def row_counts(text: str) -> list[int]:
    """An argparse type: comma-separated positive multiples of 256, ascending and distinct."""
    try:
        rows = [int(part) for part in text.split(",")]
    except ValueError:
        rows = []
    if not rows or any(count <= 0 or count % M_ALIGNED for count in rows):
        raise argparse.ArgumentTypeError(
            f"got {text!r}, need comma-separated positive multiples of {M_ALIGNED}"
        )
    return sorted(set(rows))


# --- the measurement -------------------------------------------------------------------------


def measure_decode(
    decode: str, sets: list[Any], want: dict[str, Any], budget_ms: float
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """With the selection restricted to ``decode``: the variant it takes, the check of its
    call's outputs against ``want`` and, where that passed, the call's timing; and those
    outputs. Where the selection or the call failed: the error, and None."""
    from . import mxfp8_problem as p
    from .timing import time_calls

    with p.only_decode(decode):
        try:
            variant = p.selected_variant(sets[0])
            if variant["decode"] != decode:
                raise RuntimeError(
                    f"the selection restricted to {decode} took {variant['name']}, "
                    f"of decode {variant['decode']}"
                )
            outputs = p.mxfp8_outputs(p.fresh(sets[0]))
            check = p.check(outputs, want, p.FP8_D_BOUND)
        except Exception as exc:  # recorded; the other decode still runs
            return error_record(exc), None
        record = {"variant": variant["name"], "check": check}
        if not check["ok"]:
            record["timing"] = {"not_timed": "its check failed"}
            return record, outputs
        try:
            calls = [partial(p.run_mxfp8, s) for s in sets]
            record["timing"] = time_calls(calls, budget_ms).as_dict()
        except Exception as exc:  # recorded; the other decode still runs
            record["timing"] = error_record(exc)
        return record, outputs


def measure_class(shape: Shape, device: Any, budget_ms: float, seed: int) -> dict[str, Any]:
    """Buffer sets, the shipped selection's variant (and decode), each decode's
    measurement (measure_decode) and the check of one_pass's outputs against prepass's
    ("agreement")."""
    import torch

    from . import mxfp8_problem as p

    sets = p.make_mxfp8_sets(shape, device, seed)
    record: dict[str, Any] = {"buffer_sets": len(sets)}
    try:
        record["shipped"] = p.selected_variant(sets[0])
    except Exception as exc:  # recorded; the decodes are still measured
        record["shipped"] = error_record(exc)
    want = p.eager_reference(sets[0])
    record["decodes"], outputs = {}, {}
    for decode in DECODES:
        record["decodes"][decode], outputs[decode] = measure_decode(decode, sets, want, budget_ms)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    prepass, one_pass = (outputs[decode] for decode in DECODES)
    if prepass is not None and one_pass is not None:
        try:
            record["agreement"] = p.check(one_pass, prepass, p.FP8_D_BOUND)
        except Exception as exc:  # recorded; the timings stand
            record["agreement"] = error_record(exc)
    return record


# --- the figures -----------------------------------------------------------------------------


def class_record(shape: Shape, measured: dict[str, Any]) -> dict[str, Any]:
    """``measured`` (measure_class's record, or an error) with the class's figures:
    one_pass / prepass time, the faster decode, the shipped pick's time over the other
    decode's, and whether the pick is slower by more than SLOWER_MARGIN (None: not known)."""
    times = {d: lookup(measured, "decodes", d, "timing", "median_ms") for d in DECODES}
    prepass, one_pass = (times[decode] for decode in DECODES)
    measured_both = prepass is not None and one_pass is not None
    pick = lookup(measured, "shipped", "decode")
    pick_over_other = None
    if measured_both and pick in DECODES:
        (other,) = (decode for decode in DECODES if decode != pick)
        pick_over_other = times[pick] / times[other]
    return {
        "shape": shape.describe(),
        "rows": shape.m,
        **measured,
        "one_pass_over_prepass": one_pass / prepass if measured_both else None,
        "faster": min(DECODES, key=times.__getitem__) if measured_both else None,
        "pick_over_other": pick_over_other,
        "slower_pick": None if pick_over_other is None else pick_over_other > 1 + SLOWER_MARGIN,
    }


def rows_bounds(classes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per shape: N, K, L, the faster decode at each measured row count (ascending), and
    the rows bound a ``{max_m: ...} -> one_pass`` rule would take: the largest count up to
    which one_pass is faster at every measured count (None: prepass is faster at the
    fewest), with ``splits`` true where prepass is faster at every count above it."""
    by_shape: dict[str, dict[str, Any]] = {}
    for c in classes:
        shape = c["shape"]
        entry = by_shape.setdefault(
            shape["name"], {"n": shape["n"], "k": shape["k"], "experts": shape["l"], "faster": []}
        )
        if c["faster"] is not None:
            entry["faster"].append([c["rows"], c["faster"]])
    for entry in by_shape.values():
        faster = sorted(entry["faster"])
        entry["faster"] = faster
        leading = next((i for i, (_, d) in enumerate(faster) if d != "one_pass"), len(faster))
        entry["one_pass_up_to"] = faster[leading - 1][0] if leading else None
        entry["splits"] = bool(faster) and all(d == "prepass" for _, d in faster[leading:])
    return by_shape


def bound_text(name: str, bound: dict[str, Any]) -> str:
    """One shape's rows_bounds entry as a line."""
    where = f"{name} (N {bound['n']}, K {bound['k']}, L {bound['experts']})"
    faster, up_to = bound["faster"], bound["one_pass_up_to"]
    if not faster:
        return f"{where}: not measured"
    if not bound["splits"]:
        steps = ", ".join(f"{rows} {decode}" for rows, decode in faster)
        return f"{where}: faster decode by rows {steps} (no single rows bound)"
    span = "-".join(dict.fromkeys(str(rows) for rows in (faster[0][0], faster[-1][0])))
    if up_to is None or up_to == faster[-1][0]:
        decode = "prepass" if up_to is None else "one_pass"
        return f"{where}: {decode} faster at every row count measured ({span})"
    first_prepass = next(rows for rows, decode in faster if decode == "prepass")
    return f"{where}: one_pass faster up to {up_to} rows, prepass from {first_prepass}"


def wrong_results(classes: list[dict[str, Any]]) -> list[str]:
    """The checks that failed: a decode against the eager unfused path, or the decodes
    against each other."""
    wrong = []
    for c in classes:
        where = f"{c['shape']['name']} at {c['rows']} rows"
        for decode in DECODES:
            check = lookup(c, "decodes", decode, "check")
            if check is not None and check["ok"] is not True:
                failure = check["failure"]
                wrong.append(f"{where}: {decode} disagrees with the eager unfused path: {failure}")
        if lookup(c, "agreement", "ok") is False:
            wrong.append(f"{where}: one_pass disagrees with prepass: {c['agreement']['failure']}")
    return wrong


def results_record(
    environment: dict[str, Any], method: dict[str, Any], classes: list[dict[str, Any]]
) -> dict[str, Any]:
    """The whole decodes.json, summary excluded."""
    return {
        "schema_version": 1,
        "environment": environment,
        "method": method,
        "classes": classes,
        "rows_bounds": rows_bounds(classes),
        "errors": error_paths({"classes": classes}),
        "wrong": wrong_results(classes),
    }


# --- the report ------------------------------------------------------------------------------


def _ms_cell(c: dict[str, Any], decode: str) -> str:
    """A decode's median ms, or why there is none: "error", "not timed" (its check failed)."""
    measured = lookup(c, "decodes", decode)
    if measured is None:
        return "error" if "error" in c else "-"
    timing = measured.get("timing", measured)  # a failed call's record is its error
    if "median_ms" in timing:
        return f"{timing['median_ms']:.3f}"
    return "not timed" if "not_timed" in timing else "error"


def _pick_cell(c: dict[str, Any]) -> str:
    """Whether the shipped pick is the faster decode: "yes", "no (+2%)", or "NO (+8%)" when
    slower by more than SLOWER_MARGIN; "-" when not known."""
    ratio = c["pick_over_other"]
    if ratio is None:
        return "-"
    if ratio <= 1:
        return "yes"
    return f"{'NO' if c['slower_pick'] else 'no'} (+{(ratio - 1) * 100:.0f}%)"


def _check_marks(c: dict[str, Any]) -> str:
    """prepass / one_pass against the eager unfused path, one_pass against prepass."""
    marks = [lookup(c, "decodes", decode, "check", "ok") for decode in DECODES]
    marks.append(lookup(c, "agreement", "ok"))
    return "/".join({True: "ok", False: "WRONG", None: "-"}[mark] for mark in marks)


def table(record: dict[str, Any]) -> str:
    """Per class: rows, non-empty experts of L, ms per decode, one_pass / prepass, the
    shipped pick and whether it is the faster decode, the checks; then the rows bounds."""
    head = ["rows", "experts", "prepass ms", "one_pass ms", "1p/pre", "shipped", "pick faster"]
    head.append("checks p/o/x")
    lines = ["shape".ljust(SHAPE_WIDTH) + "".join(cell.rjust(TABLE_CELL) for cell in head)]
    for c in record["classes"]:
        shape = c["shape"]
        cells = [str(c["rows"]), f"{shape['l'] - shape['empty_experts']}/{shape['l']}"]
        cells += [_ms_cell(c, decode) for decode in DECODES]
        cells.append(_ratio_cell(c["one_pass_over_prepass"]).strip())
        cells.append(lookup(c, "shipped", "decode") or "error")
        cells += [_pick_cell(c), _check_marks(c)]
        row = "".join(cell.rjust(TABLE_CELL) for cell in cells)
        lines.append(shape["name"].ljust(SHAPE_WIDTH) + row)
    lines.append(
        "checks: p/o = prepass/one_pass against the eager unfused path, x = one_pass against "
        "prepass; pick faster: NO where the shipped pick is slower by more than "
        f"{SLOWER_MARGIN:.0%}"
    )
    lines += [f"rows bound: {bound_text(name, b)}" for name, b in record["rows_bounds"].items()]
    return "\n".join(lines)


def summary_line(record: dict[str, Any]) -> str:
    """One line: classes measured, one_pass / prepass's range, the classes whose shipped pick
    is slower than the other decode by more than SLOWER_MARGIN, the checks, where and what."""
    classes = record["classes"]
    known = [c for c in classes if c["slower_pick"] is not None]
    slower = [c for c in known if c["slower_pick"]]
    shapes, rows = len({c["shape"]["name"] for c in classes}), len({c["rows"] for c in classes})
    parts = [f"{len(classes)} classes ({shapes} shapes x {rows} row counts), {len(known)} measured"]
    parts.append(f"one_pass/prepass {_span([c['one_pass_over_prepass'] for c in classes], 'x')}")
    named = ", ".join(
        f"{c['shape']['name']}@{c['rows']} {c['pick_over_other']:.2f}x" for c in slower
    )
    parts.append(
        f"shipped dispatch picks the slower decode by > {SLOWER_MARGIN:.0%} in "
        f"{len(slower)}/{len(known)}" + (f" ({named})" if named else "")
    )
    wrong = record["wrong"]
    parts.append(f"results {'WRONG (' + str(len(wrong)) + ')' if wrong else 'ok'}")
    if record["errors"]:
        parts.append(f"{len(record['errors'])} failed measurements (errors in the JSON)")
    environment = record["environment"]
    gpu = (environment.get("gpu") or {}).get("name", "no GPU")
    return "MXFP8 DECODES: " + "; ".join(parts) + f" ({gpu}, commit {environment['commit']})"


# --- the run ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.mxfp8_decodes", description=__doc__.split("\n\n")[0]
    )
    add_run_options(parser, JSON_NAME)
    parser.add_argument(
        "--rows",
        type=row_counts,
        default=list(DEFAULT_ROWS),
        help="comma-separated total rows of each shape's classes, multiples of "
        f"{M_ALIGNED} (default: {','.join(map(str, DEFAULT_ROWS))})",
    )
    return parse_run_options(parser, argv)


def progress_line(where: str, measured: dict[str, Any]) -> str:
    """A class's line on stderr: each decode's median ms, the shipped pick's decode."""
    times = ", ".join(
        f"{d} {lookup(measured, 'decodes', d, 'timing', 'median_ms')} ms" for d in DECODES
    )
    return f"{where}: {times}, shipped {lookup(measured, 'shipped', 'decode')}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if no_gpu("bench.mxfp8_decodes"):
        return 2
    method = {
        "timing": TIMING,
        "budget_ms": args.budget_ms,
        "seed": args.seed,
        "rows": args.rows,
        "classes": "each shape's expert rows scaled to each total of rows "
        "(bench.shapes.with_rows)",
        "decodes": "the selection restricted to one decode's MXFP8 variants "
        "(bench.mxfp8_problem.only_decode); shipped: the selection as installed",
        "check": "relative L2 of each output (FP8 D decoded with its SFD) from the eager "
        "unfused path's, and one_pass's from prepass's; bounds in bench/mxfp8_problem.py",
        "slower_margin": SLOWER_MARGIN,
    }
    session = Session(args.out, JSON_NAME, method, results_record, summary_line)
    for shape in args.shapes:
        for rows in args.rows:
            scaled = with_rows(shape, rows)
            session.measure(
                partial(measure_class, scaled, session.device, args.budget_ms, args.seed),
                partial(class_record, scaled),
                partial(progress_line, f"{shape.name} at {rows} rows"),
            )
    record = session.write(complete=True)
    print(table(record))
    print(f"results: {args.out / JSON_NAME}")
    print(record["summary"])
    return 1 if record["errors"] or record["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
