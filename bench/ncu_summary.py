"""Boil ncu raw-page CSVs down to the figures the kernel work reads, per profiled launch.

``python -m bench.ncu_summary RAW.csv [RAW.csv ...] --out PREFIX`` reads what
``ncu --import REPORT.ncu-rep --page raw --csv --print-units base`` printed (a header row
of metric names, a row of units, then a row per launch) and writes PREFIX.csv (one row per
launch) and PREFIX.txt (one block per launch, also printed). Metrics a report lacks show
as "n/a". Nothing here needs a GPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# (label, ncu metric) in the order reported; bench/ncu.sh asks ncu for each of them.
FIGURES = (
    ("duration", "gpu__time_duration.sum"),
    # On sm90 the HMMA pipe's cycles include wgmma's (sm__inst_executed_..._gmma counts them).
    (
        "tensor pipe active %",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    ),
    # Of elapsed cycles: with the SM clock it splits a duration ratio into idle tensor cores
    # (tails, waits) and a lower clock (power).
    (
        "tensor pipe % of elapsed",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    ),
    ("SM clock", "sm__cycles_elapsed.avg.per_second"),
    ("wgmma instructions", "sm__inst_executed_pipe_tensor_op_gmma.sum"),
    ("dram throughput %", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("dram bytes read", "dram__bytes_read.sum"),
    ("dram bytes written", "dram__bytes_write.sum"),
    ("L2 hit rate %", "lts__t_sector_hit_rate.pct"),
    # LSU shared-memory wavefronts: TMA's and wgmma's shared-memory traffic is not in it.
    (
        "shared memory (LSU) %",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed",
    ),
    ("issue slots busy %", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("registers / thread", "launch__registers_per_thread"),
    ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active"),
)
METRICS = tuple(metric for _, metric in FIGURES)
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
NOT_STALLS = {"selected"}  # the warp issued: the complement of a stall
TOP_STALLS = 5
KERNEL_NAME_COLUMN, ID_COLUMN = "Kernel Name", "ID"
TEXT_NAME_WIDTH = 100


@dataclass(frozen=True)
class Launch:
    """One profiled launch: its report, ncu's id, kernel name, figures and top stalls."""

    report: str
    launch_id: str
    kernel: str
    figures: dict[str, str]  # label -> "value unit", or "n/a"
    stalls: list[tuple[str, float]]  # (reason, warps stalled per issued instruction), top first


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_raw_csv(text: str, report: str) -> list[Launch]:
    """The launches in one raw-page CSV (lines before its header, e.g. ncu's ==PROF==
    notes, are skipped). ValueError naming ``report`` when there is no header row."""
    rows = list(csv.reader(io.StringIO(text)))
    starts = [i for i, row in enumerate(rows) if row and row[0] == ID_COLUMN]
    if not starts:
        raise ValueError(
            f"{report}: no header row starting with {ID_COLUMN!r}; not ncu --page raw --csv output"
        )
    header, *body = rows[starts[0] :]
    units = body.pop(0) if body and body[0] and body[0][0] == "" else [""] * len(header)
    launches = []
    for row in body:
        if len(row) != len(header):
            continue
        cells = dict(zip(header, row))
        unit = dict(zip(header, units))
        figures = {
            label: f"{cells[metric]} {unit[metric]}".strip() if cells.get(metric) else "n/a"
            for label, metric in FIGURES
        }
        stalls = [
            (match.group(1), value)
            for column, cell in cells.items()
            if (match := STALL.match(column))
            and match.group(1) not in NOT_STALLS
            and (value := _number(cell)) is not None
        ]
        stalls.sort(key=lambda stall: stall[1], reverse=True)
        kernel = cells.get(KERNEL_NAME_COLUMN, "?")
        launches.append(Launch(report, cells[ID_COLUMN], kernel, figures, stalls[:TOP_STALLS]))
    return launches


def _stall_text(launch: Launch) -> str:
    return ", ".join(f"{reason} {value:.2f}" for reason, value in launch.stalls) or "n/a"


def summary_csv(launches: list[Launch]) -> str:
    """One row per launch: report, id, kernel, each FIGURES label, top stalls."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["report", "id", "kernel", *(label for label, _ in FIGURES), "top stalls"])
    for launch in launches:
        figures = [launch.figures[label] for label, _ in FIGURES]
        writer.writerow(
            [launch.report, launch.launch_id, launch.kernel, *figures, _stall_text(launch)]
        )
    return out.getvalue()


def summary_text(launches: list[Launch]) -> str:
    """A block per launch: a title line, then a figure per line, then the top stalls."""
    width = max(len(label) for label, _ in FIGURES)
    blocks = []
    for launch in launches:
        name = launch.kernel
        if len(name) > TEXT_NAME_WIDTH:
            name = name[:TEXT_NAME_WIDTH] + "..."
        lines = [f"{launch.report}, launch {launch.launch_id}: {name}"]
        lines += [f"  {label.ljust(width)}  {launch.figures[label]}" for label, _ in FIGURES]
        lines.append(f"  {'top stalls'.ljust(width)}  {_stall_text(launch)} (warps per issue)")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ncu_summary", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("raw", nargs="+", type=Path, help="ncu --page raw --csv outputs")
    parser.add_argument("--out", type=Path, required=True, help="PREFIX of PREFIX.csv, PREFIX.txt")
    args = parser.parse_args(argv)
    launches = []
    for path in args.raw:
        if not path.is_file():
            parser.error(f"raw: {path} is not a file")
        try:
            launches += parse_raw_csv(path.read_text(), path.name.removesuffix(".raw.csv"))
        except ValueError as exc:
            parser.error(str(exc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{args.out}.csv").write_text(summary_csv(launches))
    text = summary_text(launches)
    Path(f"{args.out}.txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
