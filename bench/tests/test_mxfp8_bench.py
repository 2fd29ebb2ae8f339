"""python -m bench.mxfp8 on the CPU: a shape's measurement with the GPU pieces stood in for
(the MXFP8 op by the eager unfused path, right or broken; timing by one call each), so that
only a candidate whose outputs match is timed; the record, table, summary line and chart;
and the arguments and main."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from bench import fused, mxfp8, timing  # noqa: E402
from bench import mxfp8_problem as problem  # noqa: E402
from bench.shapes import Shape  # noqa: E402

SHAPE = Shape("test", n=64, k=128, expert_rows=(256, 0, 256))
ENVIRONMENT = {"commit": "feedbee", "gpu": {"name": "Fake GPU"}}


def _wrapper_stand_in(broken: bool):
    """The MXFP8 wrapper's outputs computed by the eager unfused path (D_row's scales
    shuffled when ``broken``)."""

    def run(s):
        out = problem.UnfusedPath(compiled=False)(s)
        sfd_row = out.sfd_row.flip(2) if broken else out.sfd_row
        m, width = out.d_row.shape
        return (
            out.d_row.view(m, width, 1),
            out.d_col.view(m, width, 1),
            s.bf16.dprob,
            out.dbias.view(-1, width, 1),
            None,
            sfd_row.view(torch.float8_e8m0fnu),
            out.sfd_col.view(torch.float8_e8m0fnu),
        )

    return run


def _no_bf16_op(samples, deterministic=False):
    raise RuntimeError("no sm_90a variant installed")


def _one_call_each(calls, budget_ms, use_graphs=True):
    for call in calls:
        call()
    return timing.Timing(1.0, 0.9, 1.1, len(calls), "fake")


@pytest.fixture
def cpu_stand_ins(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(problem, "l2_bytes", lambda device: 1)  # two sets
    monkeypatch.setattr(timing, "time_calls", _one_call_each)
    monkeypatch.setattr(fused, "build_op", _no_bf16_op)


def _measure(monkeypatch, broken: bool):
    monkeypatch.setattr(problem, "run_mxfp8", _wrapper_stand_in(broken))
    monkeypatch.setattr(problem, "selected_variant", lambda s: {"name": "v"})
    unfused = problem.UnfusedPath(compiled=False)
    measured = mxfp8.measure_shape(SHAPE, torch.device("cpu"), 1.0, 0, unfused)
    return mxfp8.shape_record(SHAPE, measured)


def test_matching_candidates_are_timed_and_the_missing_op_is_recorded(cpu_stand_ins, monkeypatch):
    shape = _measure(monkeypatch, broken=False)
    assert shape["buffer_sets"] == 2 and isinstance(shape["compile_s"], float)
    assert shape["mxfp8_variant"] == {"name": "v"}
    assert shape["checks"]["mxfp8"]["ok"] and shape["checks"]["unfused"]["ok"]
    assert shape["checks"]["mxfp8"]["d_row"] < 1e-6  # the same path as the reference
    assert "no sm_90a variant installed" in shape["bf16_variant"]["error"]
    assert "bf16" not in shape["checks"]
    assert shape["timings"]["mxfp8"]["tflops"] == pytest.approx(SHAPE.flops / 1e9)
    why = "the BF16 op could not be built (see bf16_variant)"
    assert shape["timings"]["bf16"] == {"error": why}
    assert shape["ratios"] == {"mxfp8_over_bf16_tflops": None, "unfused_over_mxfp8_time": 1.0}
    assert [(t["name"], t["met"]) for t in shape["targets"]] == [
        ("MXFP8 / BF16 TFLOP/s", None),
        ("unfused / MXFP8 time", False),
    ]


def test_a_wrong_mxfp8_op_is_not_timed_and_is_reported(cpu_stand_ins, monkeypatch):
    shape = _measure(monkeypatch, broken=True)
    assert shape["checks"]["mxfp8"]["ok"] is False
    assert shape["checks"]["mxfp8"]["failure"].startswith("d_row relative L2")
    assert "median_ms" not in shape["timings"]["mxfp8"]
    assert "not_timed" in shape["timings"]["mxfp8"]
    assert shape["timings"]["unfused"]["median_ms"] == 1.0
    record = mxfp8.results_record(ENVIRONMENT, {}, [shape])
    assert record["wrong"] == [
        f"test: mxfp8 disagrees with the eager unfused path: {shape['checks']['mxfp8']['failure']}"
    ]
    assert "/shapes/0/timings/bf16" in record["errors"]


def _fake_shape(mxfp8_ms: float, bf16_ms: float, unfused_ms: float) -> dict:
    timings = {
        name: timing.Timing(ms, ms, ms, 20, "cuda_graph").as_dict()
        for name, ms in (("mxfp8", mxfp8_ms), ("bf16", bf16_ms), ("unfused", unfused_ms))
    }
    checks = {name: {"ok": True} for name in mxfp8.CANDIDATES}
    measured = {"buffer_sets": 2, "checks": checks, "timings": timings, "mxfp8_variant": {"name": "v"}}
    return mxfp8.shape_record(SHAPE, measured)


def test_table_and_summary_report_both_ratios_and_their_targets():
    shapes = [_fake_shape(1.0, 0.95, 3.5), _fake_shape(2.0, 1.6, 5.0)]
    record = mxfp8.results_record(ENVIRONMENT, {}, shapes)
    assert shapes[0]["ratios"]["mxfp8_over_bf16_tflops"] == pytest.approx(0.95)
    assert record["targets"]["met"] == 2 and record["targets"]["total"] == 4
    summary = mxfp8.summary_line(record)
    assert summary == (
        "MXFP8: mxfp8/bf16 TF/s 0.80-0.95x (target >= 0.9); unfused/mxfp8 2.50-3.50x "
        "(target >= 3); targets 2/4 met; results ok (Fake GPU, commit feedbee)"
    )
    lines = mxfp8.table(record).splitlines()
    assert lines[0].split()[:4] == ["shape", "mxfp8", "ms", "(TF/s)"]
    assert lines[0].split()[-3:] == ["unfused/mxfp8", "checks", "m/b/u"]
    assert lines[1].split()[0] == "test" and lines[1].split()[-3:] == ["0.95x", "3.50x", "ok/ok/ok"]


def _chart_record() -> dict:
    shapes = [_fake_shape(1.0, 0.95, 3.5), _fake_shape(2.0, 1.6, 5.0), _fake_shape(1.0, 1.0, 1.0)]
    shapes[2]["ratios"] = {name: None for name in mxfp8.RATIOS}  # not measured
    return mxfp8.results_record(ENVIRONMENT, {}, shapes)


def test_the_chart_is_a_png_of_both_ratios(tmp_path):
    pytest.importorskip("matplotlib", reason="the chart needs matplotlib")
    assert mxfp8.write_chart(_chart_record(), tmp_path) == {"file": "mxfp8.png"}
    png = (tmp_path / "mxfp8.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_without_matplotlib_the_chart_is_skipped_saying_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # its import fails
    assert mxfp8.write_chart(_chart_record(), tmp_path) == {"skipped": "matplotlib is not installed"}
    assert "matplotlib is not installed; no mxfp8.png" in capsys.readouterr().err
    assert not (tmp_path / "mxfp8.png").exists()


def test_main_writes_the_json_and_the_chart_or_says_why_not(run_on_fake_gpu, monkeypatch, tmp_path):
    fake = _fake_shape(1.0, 0.95, 3.5)
    measured = {key: fake[key] for key in ("buffer_sets", "checks", "timings", "mxfp8_variant")}
    monkeypatch.setattr(mxfp8, "measure_shape", lambda *arguments: measured)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # its import fails
    status, record, out = run_on_fake_gpu(mxfp8.main, "mxfp8.json", "--shapes", "dsv3-like")
    assert status == 0
    assert record["complete"] and record["errors"] == []
    assert record["chart"] == {"skipped": "matplotlib is not installed"}
    assert record["shapes"][0]["mxfp8_variant"] == {"name": "v"}
    assert out.out.splitlines()[-2] == f"results: {tmp_path / 'mxfp8.json'}"
    assert "dsv3-like: mxfp8 1.0 ms, bf16 0.95 ms, unfused 3.5 ms (" in out.err
    assert "matplotlib is not installed; no mxfp8.png" in out.err


def test_bad_arguments_are_refused_naming_them(capsys, tmp_path):
    for argv, message in (
        (["--shapes", "nope"], "--shapes: got nope"),
        (["--budget-ms", "-1"], "--budget-ms: got '-1', need a positive float"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            mxfp8.parse_args(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    assert mxfp8.parse_args(["--out", str(tmp_path)]).out == tmp_path
