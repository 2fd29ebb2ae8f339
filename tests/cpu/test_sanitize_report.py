"""ci/sanitize_report.py's attribution of memcheck/synccheck/initcheck errors: the errors a
log prints before a case's "sanitize case ok" line are that case's, by kernel; the summary
line counts the tool's own total."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("sanitize_report", ROOT / "ci" / "sanitize_report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

KERNEL = "dglu_sm90a_bf16_bf16_bf16_dswiglu_dbias_dense_k_128x128_2x1_static_pp_main_0"
TORCH = "/pytorch/aten/src/ATen/native/cuda/Reduce.cuh:42:reduce_kernel(int, float *)"


def _error(where: str, what: str = "Uninitialized __global__ memory read of size 4 bytes") -> str:
    return "\n".join([
        f"========= {what}",
        f"=========     at {where}",
        "=========     by thread (3,0,0) in block (1,0,0)",
        "=========     Address 0x7f3a00001000",
        "=========     Saved host backtrace up to driver entry point at kernel launch time",
        "=========         Host Frame: cuLaunchKernelEx [0x2f1b0] in libcuda.so.1",
    ])


LOG = "\n".join([
    "========= COMPUTE-SANITIZER",
    "sanitize case ok: clean_case (dswiglu ...)",
    _error(f"{KERNEL}+0x1f30"),
    _error(f"{KERNEL}+0x1f40"),
    _error(f"0x70 in {TORCH}"),
    "sanitize case ok: dirty_case (dswiglu ..., R rounded to bf16)",
    _error(f"{KERNEL}+0x80", "Invalid __global__ read of size 4 bytes"),
    "========= ERROR SUMMARY: 4 errors",
])


def test_errors_are_counted_per_case_and_kernel_and_the_rest_apart():
    sites = report.error_sites(LOG)
    assert set(sites) == {"dirty_case", report.NO_CASE}
    assert sites["dirty_case"] == {KERNEL: 2, "reduce_kernel": 1}
    assert sites[report.NO_CASE] == {KERNEL: 1}


def test_a_clean_log_has_no_sites():
    clean = "========= COMPUTE-SANITIZER\nsanitize case ok: a (x)\n========= ERROR SUMMARY: 0 errors"
    assert report.error_sites(clean) == {}


def test_the_summary_prints_the_sites_above_its_line(tmp_path, capsys):
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        (tmp_path / f"sanitize-{tool}.rc").write_text("0")
    racecheck = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
    clean = "========= ERROR SUMMARY: 0 errors"
    for tool, log in (("memcheck", clean), ("racecheck", racecheck), ("synccheck", clean), ("initcheck", LOG)):
        (tmp_path / f"sanitize-{tool}.log").write_text(log)
    accepted = tmp_path / "accepted.txt"
    accepted.write_text("")
    line, ok = report.summarize(tmp_path, accepted, "dev", "w.whl")
    printed = capsys.readouterr().out.splitlines()
    assert not ok and "initcheck 4 errors" in line
    assert printed == [
        f"initcheck: 3 printed errors in case dirty_case: {KERNEL} 2, reduce_kernel 1",
        f"initcheck: 1 printed errors in case {report.NO_CASE}: {KERNEL} 1",
    ]
