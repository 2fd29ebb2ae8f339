"""python -m bench.mxfp8_decodes on the CPU: a class's measurement with the GPU pieces stood
in for (the selection restricted by a stand-in only_decode, the MXFP8 op by the eager
unfused path, right or broken per decode, timing by one call each at a set time per
decode); the figures, the rows bounds, the table and summary line on invented classes; and
the arguments and main."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from bench import mxfp8_decodes as decodes  # noqa: E402
from bench import mxfp8_problem as problem  # noqa: E402
from bench import timing  # noqa: E402
from bench.shapes import SHAPES, Shape, with_rows  # noqa: E402
from bench.tests.test_mxfp8_bench import _wrapper_stand_in  # noqa: E402

SHAPE = Shape("test", n=64, k=128, expert_rows=(256, 0, 256))
ENVIRONMENT = {"commit": "feedbee", "gpu": {"name": "Fake GPU"}}
ACTIVE: list[str] = []  # the decode the stand-in only_decode restricts the selection to


@contextlib.contextmanager
def _only_decode(decode):
    ACTIVE.append(decode)
    try:
        yield
    finally:
        ACTIVE.pop()


def _selection(obeys: bool):
    """selected_variant's stand-in: the restricted decode (when ``obeys``, else prepass),
    one_pass outside a restriction (as the shipped rules pick for N <= 1024)."""

    def selected(s):
        decode = ("prepass" if not obeys else ACTIVE[-1]) if ACTIVE else "one_pass"
        return {"name": f"v_{decode}", "decode": decode}

    return selected


def _wrapper(broken_decode: str | None):
    """The MXFP8 wrapper's stand-in, its D_row scales shuffled in ``broken_decode``."""
    right, broken = _wrapper_stand_in(False), _wrapper_stand_in(True)
    return lambda s: (broken if ACTIVE and ACTIVE[-1] == broken_decode else right)(s)


def _timed_at(ms: dict[str, float]):
    """time_calls' stand-in: every call once, the median ``ms`` of the restricted decode."""

    def time_calls(calls, budget_ms, use_graphs=True):
        for call in calls:
            call()
        at = ms[ACTIVE[-1]]
        return timing.Timing(at, at, at, len(calls), "fake")

    return time_calls


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(problem, "l2_bytes", lambda device: 1)  # two sets
    monkeypatch.setattr(problem, "only_decode", _only_decode)
    monkeypatch.setattr(timing, "time_calls", _timed_at({"prepass": 1.0, "one_pass": 1.1}))

    def measure(broken_decode=None, obeys=True):
        monkeypatch.setattr(problem, "run_mxfp8", _wrapper(broken_decode))
        monkeypatch.setattr(problem, "selected_variant", _selection(obeys))
        measured = decodes.measure_class(SHAPE, torch.device("cpu"), 1.0, 0)
        assert not ACTIVE  # every restriction was lifted
        return decodes.class_record(SHAPE, measured)

    return measure


def test_both_decodes_are_checked_timed_and_set_against_the_shipped_pick(stand_ins):
    c = stand_ins()
    assert c["rows"] == 512 and c["buffer_sets"] == 2
    assert c["shipped"] == {"name": "v_one_pass", "decode": "one_pass"}
    for decode in decodes.DECODES:
        assert c["decodes"][decode]["variant"] == f"v_{decode}"
        assert c["decodes"][decode]["check"]["ok"] and c["decodes"][decode]["check"]["d_row"] < 1e-6
    assert [c["decodes"][d]["timing"]["median_ms"] for d in decodes.DECODES] == [1.0, 1.1]
    assert c["agreement"]["ok"] and c["agreement"]["d_col"] < 1e-6
    assert c["one_pass_over_prepass"] == pytest.approx(1.1) and c["faster"] == "prepass"
    assert c["pick_over_other"] == pytest.approx(1.1) and c["slower_pick"] is True
    record = decodes.results_record(ENVIRONMENT, {}, [c])
    assert record["errors"] == [] and record["wrong"] == []


def test_a_wrong_decode_is_not_timed_and_both_of_its_checks_report_it(stand_ins):
    c = stand_ins(broken_decode="one_pass")
    assert c["decodes"]["prepass"]["timing"]["median_ms"] == 1.0
    assert c["decodes"]["one_pass"]["check"]["ok"] is False
    assert c["decodes"]["one_pass"]["timing"] == {"not_timed": "its check failed"}
    assert c["agreement"]["ok"] is False
    assert c["one_pass_over_prepass"] is None and c["slower_pick"] is None
    wrong = decodes.results_record(ENVIRONMENT, {}, [c])["wrong"]
    assert [line.split(": d_row")[0] for line in wrong] == [
        "test at 512 rows: one_pass disagrees with the eager unfused path",
        "test at 512 rows: one_pass disagrees with prepass",
    ]


def test_a_restriction_the_selection_ignores_is_an_error(stand_ins):
    c = stand_ins(obeys=False)
    error = c["decodes"]["one_pass"]["error"]
    assert error == "RuntimeError: the selection restricted to one_pass took v_prepass, of decode prepass"
    assert "agreement" not in c and c["decodes"]["prepass"]["check"]["ok"]
    record = decodes.results_record(ENVIRONMENT, {}, [c])
    assert record["errors"] == ["/classes/0/decodes/one_pass"] and record["wrong"] == []


def _fake_class(name: str, rows: int, prepass_ms: float, one_pass_ms: float, shipped: str) -> dict:
    shape = with_rows(next(s for s in SHAPES if s.name == name), rows)
    measured = {
        "buffer_sets": 2,
        "shipped": {"name": f"v_{shipped}", "decode": shipped},
        "decodes": {
            decode: {
                "variant": f"v_{decode}",
                "check": {"ok": True},
                "timing": timing.Timing(ms, ms, ms, 20, "cuda_graph").as_dict(),
            }
            for decode, ms in (("prepass", prepass_ms), ("one_pass", one_pass_ms))
        },
        "agreement": {"ok": True},
    }
    return decodes.class_record(shape, measured)


def _grid() -> list[dict]:
    return [
        _fake_class("dsv3-like", 2048, 0.25, 0.2, "one_pass"),
        _fake_class("dsv3-like", 4096, 0.425, 0.396, "one_pass"),
        _fake_class("dsv3-like", 8192, 0.715, 0.774, "prepass"),
        _fake_class("gpt-oss-like", 8192, 0.5, 0.465, "prepass"),  # one_pass 7% faster
        _fake_class("gpt-oss-like", 16384, 0.9, 0.92, "prepass"),
        _fake_class("gpt-oss-like", 4096, 0.3, 0.308, "one_pass"),  # 2.7% slower: within margin
        _fake_class("qwen3-moe-like", 8192, 0.181, 0.116, "one_pass"),
        _fake_class("ragged-8", 2048, 0.2, 0.1, "one_pass"),
        _fake_class("ragged-8", 4096, 0.2, 0.3, "one_pass"),  # 50% slower
        _fake_class("ragged-8", 8192, 0.4, 0.3, "prepass"),  # one_pass 25% faster
        decodes.class_record(with_rows(SHAPES[1], 2048), {"error": "OutOfMemoryError: x"}),
    ]


def test_rows_bounds_name_the_rows_up_to_which_one_pass_is_faster():
    bounds = decodes.rows_bounds(_grid())
    assert bounds["dsv3-like"] == {
        "n": 2048,
        "k": 7168,
        "experts": 8,
        "faster": [[2048, "one_pass"], [4096, "one_pass"], [8192, "prepass"]],
        "one_pass_up_to": 4096,
        "splits": True,
    }
    assert bounds["gpt-oss-like"]["faster"][0] == [4096, "prepass"]  # sorted by rows
    texts = [decodes.bound_text(name, bound) for name, bound in bounds.items()]
    assert texts == [
        "dsv3-like (N 2048, K 7168, L 8): one_pass faster up to 4096 rows, prepass from 8192",
        "gpt-oss-like (N 2880, K 2880, L 16): faster decode by rows 4096 prepass, 8192 one_pass, "
        "16384 prepass (no single rows bound)",
        "qwen3-moe-like (N 768, K 2048, L 32): one_pass faster at every row count measured "
        "(8192)",
        "ragged-8 (N 2048, K 4096, L 8): faster decode by rows 2048 one_pass, 4096 prepass, "
        "8192 one_pass (no single rows bound)",
        "mixtral-like (N 14336, K 4096, L 8): not measured",
    ]
    prepass_only = decodes.rows_bounds([_fake_class("dsv3-like", 8192, 0.7, 0.8, "prepass")])
    assert decodes.bound_text("dsv3-like", prepass_only["dsv3-like"]).endswith(
        ": prepass faster at every row count measured (8192)"
    )


def test_table_and_summary_count_the_slower_picks_past_the_margin():
    record = decodes.results_record(ENVIRONMENT, {}, _grid())
    assert record["errors"] == ["/classes/10"]
    summary = decodes.summary_line(record)
    assert summary == (
        "MXFP8 DECODES: 11 classes (5 shapes x 4 row counts), 10 measured; one_pass/prepass "
        "0.50-1.50x; shipped dispatch picks the slower decode by > 3% in 3/10 (gpt-oss-like@8192 "
        "1.08x, ragged-8@4096 1.50x, ragged-8@8192 1.33x); results ok; 1 failed measurements "
        "(errors in the JSON) (Fake GPU, commit feedbee)"
    )
    lines = decodes.table(record).splitlines()
    assert lines[0].split()[:6] == ["shape", "rows", "experts", "prepass", "ms", "one_pass"]
    assert lines[1].split() == [
        "dsv3-like", "2048", "8/8", "0.250", "0.200", "0.80x", "one_pass", "yes", "ok/ok/ok"
    ]
    assert lines[4].split()[-4:] == ["prepass", "NO", "(+8%)", "ok/ok/ok"]
    assert lines[6].split()[-3:-1] == ["no", "(+3%)"]
    assert lines[8].split()[2] == "4/8"  # ragged-8 at 2048 rows: 4 of its 6 experts keep rows
    assert lines[11].split() == ["mixtral-like", "2048", "8/8", "error", "error", "-", "error", "-", "-/-/-"]
    assert lines[-5].startswith("rows bound: dsv3-like (N 2048, K 7168, L 8): one_pass faster up to")


def test_rows_are_parsed_and_bad_arguments_refused_naming_them(capsys, tmp_path):
    assert decodes.parse_args([]).rows == [2048, 4096, 8192, 16384]
    assert decodes.parse_args(["--rows", "8192,2048,8192"]).rows == [2048, 8192]
    for argv, message in (
        (["--rows", "1000"], "--rows: got '1000', need comma-separated positive multiples of 256"),
        (["--rows", "2048,"], "--rows: got '2048,', need comma-separated positive multiples of 256"),
        (["--shapes", "nope"], "--shapes: got nope"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            decodes.parse_args(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err


def test_main_writes_every_class_into_decodes_json_and_exits_1_on_an_error(
    run_on_fake_gpu, monkeypatch
):
    grid = {(c["shape"]["name"], c["rows"]): c for c in _grid()}
    measured_fields = ("buffer_sets", "shipped", "decodes", "agreement")

    def measure_class(shape, device, budget_ms, seed):
        if shape.name == "mixtral-like":
            raise RuntimeError("out of memory")
        return {field: grid[shape.name, shape.m][field] for field in measured_fields}

    monkeypatch.setattr(decodes, "measure_class", measure_class)
    argv = ["--shapes", "dsv3-like,mixtral-like", "--rows", "2048,4096"]
    status, record, out = run_on_fake_gpu(decodes.main, "decodes.json", *argv)
    assert status == 1
    assert record["complete"] and record["method"]["rows"] == [2048, 4096]
    assert [(c["shape"]["name"], c["rows"]) for c in record["classes"]] == [
        ("dsv3-like", 2048), ("dsv3-like", 4096), ("mixtral-like", 2048), ("mixtral-like", 4096)
    ]
    assert record["classes"][0]["one_pass_over_prepass"] == pytest.approx(0.8)
    assert record["errors"] == ["/classes/2", "/classes/3"]
    assert record["classes"][2]["error"] == "RuntimeError: out of memory"
    assert out.out.splitlines()[-1] == record["summary"] and record["summary"].startswith(
        "MXFP8 DECODES: 4 classes (2 shapes x 2 row counts), 2 measured;"
    )
    assert "dsv3-like at 2048 rows: prepass 0.25 ms, one_pass 0.2 ms, shipped one_pass" in out.err
