"""python -m bench: argument errors name the argument; --dry-run writes the JSON, chart
and table and prints the summary line last; bench/run.sh refuses a wheel it cannot install."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.__main__ import main, parse_args
from bench.shapes import SHAPE_NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shapes", "dsv3-like,nope"], "--shapes: got dsv3-like,nope"),
        (["--budget-ms", "0"], "--budget-ms: got '0', need a positive float"),
        (["--host-runs", "x"], "--host-runs: got 'x', need a positive int"),
    ],
)
def test_bad_arguments_are_refused_naming_them(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_be_a_folder(tmp_path, capsys):
    a_file = tmp_path / "results.json"
    a_file.write_text("{}")
    with pytest.raises(SystemExit):
        parse_args(["--out", str(a_file)])
    assert f"--out: {a_file} exists and is not a folder" in capsys.readouterr().err


def test_out_defaults_to_the_OUT_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert parse_args([]).out == tmp_path


def test_dry_run_writes_results_chart_and_table(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("DGLU_COMMIT", "feedbee")
    status = main(
        ["--dry-run", "--out", str(tmp_path), "--shapes", "qwen3-moe-like,ragged-many-small"]
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert status == 0
    record = json.loads((tmp_path / "bench.json").read_text())
    assert record["dry_run"] is True and record["complete"] is True
    assert record["environment"]["commit"] == "feedbee"
    assert [s["shape"]["name"] for s in record["shapes"]] == ["qwen3-moe-like", "ragged-many-small"]
    for shape in record["shapes"]:
        assert set(shape["timings"]) == set(record["method"]["candidates"])
        assert all(t["tflops"] > 0 for t in shape["timings"].values())
        assert shape["ratios"]["fused_over_gemm"] > 0
        assert shape["ratios"]["deterministic_over_fused"] >= 1.0
        assert shape["deterministic_agreement"]["ok"] is True
    assert record["host"]["targets"] and record["errors"] == [] and record["wrong"] == []
    assert (tmp_path / "bench_ratios.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert printed[-1] == record["summary"]
    assert printed[-1].startswith("BENCH (DRY RUN, fake timings):")
    assert "; deterministic/fused 1." in printed[-1]
    assert (tmp_path / "bench_table.txt").read_text().splitlines()[-1] == record["summary"]


def test_dry_run_covers_every_shape_by_default(tmp_path):
    pytest.importorskip("matplotlib")
    assert main(["--dry-run", "--skip-host", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "bench.json").read_text())
    assert [s["shape"]["name"] for s in record["shapes"]] == list(SHAPE_NAMES)
    assert record["host"] is None


def test_run_sh_refuses_a_wheel_it_cannot_install(tmp_path):
    missing = tmp_path / "dglu-0.0.0-py3-none-any.whl"
    done = subprocess.run(
        ["bash", "bench/run.sh", str(missing), "--dry-run"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert f"pip could not install {missing}" in done.stderr
