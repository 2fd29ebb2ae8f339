"""bench/ncu.sh and its parts, without a GPU: the summary of ncu's raw CSV, the target's
arguments, and the script's ncu command lines (a stand-in ncu records them)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bench import ncu_summary, ncu_target

REPO_ROOT = Path(__file__).resolve().parents[2]
HEADER = [
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC", "gpu__time_duration.sum",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
    "launch__registers_per_thread",
]  # fmt: skip
UNITS = [""] * 11 + ["nsecond", "%", "byte", "inst", "inst", "inst", "inst", "register/thread"]


def raw_csv(kernel: str) -> str:
    """What ``ncu --import R --page raw --csv --print-units base`` prints for two launches."""

    def row(cells: list[str]) -> str:
        return ",".join(f'"{cell}"' for cell in cells)

    launch = ["1", "2", "python", "h", kernel, "1", "7", "(384, 1, 1)", "(132, 1, 1)", "0", "9.0"]
    first = ["1,234,567", "71.5", "268,435,456", "0.5", "2.25", "1", "0.75", "168"]
    second = ["1,240,000", "70.9", "268,435,200", "0.4", "2.5", "1", "0.8", "168"]
    return "\n".join(
        [
            "==PROF== Connected to process",
            row(HEADER),
            row(UNITS),
            row(["0", *launch[1:], *first]),
            row(["1", *launch[1:], *second]),
        ]
    )


def test_summary_reads_figures_units_and_top_stalls():
    first, second = ncu_summary.parse_raw_csv(raw_csv("dglu_v_main_0"), "ragged-8-fused")
    assert (first.report, first.launch_id, first.kernel) == ("ragged-8-fused", "0", "dglu_v_main_0")
    assert first.figures["duration"] == "1,234,567 nsecond"
    assert first.figures["tensor pipe active %"] == "71.5 %"
    assert first.figures["dram bytes read"] == "268,435,456 byte"
    assert first.figures["registers / thread"] == "168 register/thread"
    assert first.figures["L2 hit rate %"] == "n/a"  # not in this report
    # warps stalled per issue, highest first; "selected" (issued) is no stall
    assert first.stalls == [("barrier", 2.25), ("gmma", 0.75), ("long_scoreboard", 0.5)]
    assert second.launch_id == "1" and second.stalls[0] == ("barrier", 2.5)


def test_summary_refuses_what_is_not_a_raw_page():
    with pytest.raises(ValueError, match="fused: no header row starting with 'ID'"):
        ncu_summary.parse_raw_csv("==ERROR== no kernels were profiled\n", "fused")


def test_summary_cli_writes_csv_and_text(tmp_path, capsys):
    fused, gemm = tmp_path / "s-fused.raw.csv", tmp_path / "s-grouped_gemm.raw.csv"
    fused.write_text(raw_csv("dglu_v_main_0"))
    gemm.write_text(raw_csv("void cutlass::device_kernel<" + "x" * 300 + ">"))
    assert ncu_summary.main([str(fused), str(gemm), "--out", str(tmp_path / "s-summary")]) == 0
    rows = (tmp_path / "s-summary.csv").read_text().splitlines()
    assert rows[0].startswith("report,id,kernel,duration,tensor pipe active %")
    assert len(rows) == 1 + 4 and rows[1].startswith("s-fused,0,dglu_v_main_0,")
    text = (tmp_path / "s-summary.txt").read_text()
    assert capsys.readouterr().out == text
    assert "s-grouped_gemm, launch 1: void cutlass::device_kernel<xxx" in text
    assert "barrier 2.25, gmma 0.75, long_scoreboard 0.50 (warps per issue)" in text


def test_every_figure_is_a_metric_ncu_sh_asks_for():
    assert len(set(ncu_summary.METRICS)) == len(ncu_summary.FIGURES)
    assert all("," not in metric for metric in ncu_summary.METRICS)


def test_target_arguments_are_checked(capsys):
    args = ncu_target.parse_args(["--shape", "ragged-8", "--candidate", "grouped_gemm"])
    assert (args.shape, args.candidate, args.calls) == ("ragged-8", "grouped_gemm", 6)
    with pytest.raises(SystemExit):
        ncu_target.parse_args(["--shape", "ragged-8", "--candidate", "fused", "--calls", "0"])
    assert "--calls: got 0, need a positive count" in capsys.readouterr().err


FAKE_NCU = """#!/usr/bin/env bash
# Records its arguments; makes the report it is asked to export; prints a raw page.
echo "$*" >> "$NCU_LOG"
previous=
for arg in "$@"; do
    [[ $previous == --export ]] && touch "$arg.ncu-rep"
    [[ $previous == --import ]] && report=$arg
    previous=$arg
done
[[ -n ${report:-} ]] && cat "$FAKE_RAW"
exit 0
"""


def fake_wheel(folder: Path) -> Path:
    """A dglu wheel that pip installs (it holds nothing the stand-in ncu needs)."""
    wheel = folder / "dglu-0.0.0-py3-none-any.whl"
    files = {
        "dglu/__init__.py": "",
        "dglu-0.0.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: dglu\nVersion: 0.0.0\n",
        "dglu-0.0.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "dglu-0.0.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, "dglu-0.0.0.dist-info/RECORD": record}.items():
            archive.writestr(name, text)
    return wheel


def run_ncu_sh(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU)
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    raw = tmp_path / "raw.csv"
    raw.write_text(raw_csv("dglu_v_main_0"))
    environment = {
        **os.environ,
        "NCU": str(ncu),
        "NCU_LOG": str(tmp_path / "ncu.log"),
        "FAKE_RAW": str(raw),
        "PYTHON": sys.executable,
        **env,
    }
    return subprocess.run(
        ["bash", "bench/ncu.sh", *args],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )


def test_ncu_sh_profiles_both_kernels_and_summarizes(tmp_path):
    out = tmp_path / "out"
    done = run_ncu_sh(tmp_path, str(fake_wheel(tmp_path)), "qwen3-moe-like", str(out))
    assert done.returncode == 0, done.stderr
    profile_fused, import_fused, profile_gemm, import_gemm = (
        (tmp_path / "ncu.log").read_text().splitlines()
    )
    for line, candidate in ((profile_fused, "fused"), (profile_gemm, "grouped_gemm")):
        assert line.startswith("--clock-control none --kernel-name-base demangled --kernel-name ")
        assert "--launch-skip 2 --launch-count 3" in line
        assert "--section SpeedOfLight" in line and "--section WarpStateStats" in line
        assert f"--metrics {','.join(ncu_summary.METRICS)} " in line
        assert f"--export {out}/qwen3-moe-like-{candidate} " in line
        assert line.endswith(
            f"-m bench.ncu_target --shape qwen3-moe-like --candidate {candidate} --calls 5"
        )
    assert "--kernel-name regex:^dglu_.*_main_[0-9]+$ " in profile_fused
    assert "--kernel-name regex:cutlass::device_kernel " in profile_gemm
    assert import_fused == (
        f"--import {out}/qwen3-moe-like-fused.ncu-rep --page raw --csv --print-units base"
    )
    assert import_gemm.startswith(f"--import {out}/qwen3-moe-like-grouped_gemm.ncu-rep ")
    assert (out / "qwen3-moe-like-fused.ncu-rep").exists()
    summary = (out / "qwen3-moe-like-summary.txt").read_text()
    assert "qwen3-moe-like-grouped_gemm, launch 0: dglu_v_main_0" in summary
    assert summary in done.stdout


def test_ncu_sh_profiles_the_candidates_it_is_given(tmp_path):
    out = tmp_path / "out"
    done = run_ncu_sh(tmp_path, str(fake_wheel(tmp_path)), "ragged-8", str(out), NCU_CANDIDATES="mxfp8 fused")
    assert done.returncode == 0, done.stderr
    profile_mxfp8, _, profile_fused, _ = (tmp_path / "ncu.log").read_text().splitlines()
    for line, candidate in ((profile_mxfp8, "mxfp8"), (profile_fused, "fused")):
        assert "--kernel-name regex:^dglu_.*_main_[0-9]+$ " in line
        assert line.endswith(f"--candidate {candidate} --calls 5")
    assert "ragged-8-mxfp8, launch 0: dglu_v_main_0" in (out / "ragged-8-summary.txt").read_text()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "SHAPE: missing"),
        (("nope",), {}, "SHAPE: got nope; expected one of: dsv3-like"),
        (("ragged-8",), {"NCU_COUNT": "0"}, "NCU_COUNT: got 0; need a positive count"),
        (("ragged-8",), {"NCU": "/no/such/ncu"}, "NCU: /no/such/ncu is not a command"),
        (("ragged-8",), {"NCU_CANDIDATES": "fused"}, "NCU_CANDIDATES: got 'fused'; need two of: fused"),
        (("ragged-8",), {"NCU_CANDIDATES": "fused bf16"}, "NCU_CANDIDATES: got bf16; expected one of: fused"),
    ],
)
def test_ncu_sh_refuses_bad_arguments_naming_them(tmp_path, args, env, message):
    done = run_ncu_sh(tmp_path, str(tmp_path / "dglu-0.0.0-py3-none-any.whl"), *args, **env)
    assert done.returncode == 2
    assert message in done.stderr


def test_ncu_sh_help_is_its_header():
    done = subprocess.run(
        ["bash", "bench/ncu.sh", "--help"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.startswith("Nsight Compute profiles of one shape")
    assert "Usage: bash bench/ncu.sh [dglu-*.whl] SHAPE [OUTDIR]" in done.stdout
    assert "set -uo" not in done.stdout
