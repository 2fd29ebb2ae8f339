"""bench.device.measure_shape's bookkeeping on the CPU: every candidate is tried, failures
are recorded beside the others' timings, and the agreement check catches a wrong op.

The GPU parts are replaced: timing runs each call once and reports fixed samples, and the
dglu op is a stand-in that computes the op from the float64 reference (or gets it wrong)."""

from __future__ import annotations

import pytest

from bench import device
from bench.fused import _suite
from bench.baselines import dswiglu_epilogue
from bench.inputs import make_buffer_set
from bench.shapes import Shape
from bench.timing import summarize

torch = pytest.importorskip("torch")

SHAPE = Shape("test", n=64, k=64, expert_rows=(256, 0, 256))


class StandInOp:
    """Computes the op from the test suite's float64 reference, D rounded to bf16;
    ``error`` scales D to make it wrong (and so, through dbias, dbias too)."""

    variant_name = "stand-in"

    def __init__(self, error: float = 1.0):
        self.error = error

    def execute(self, *, a_tensor, c_tensor, d_row_tensor, dprob_tensor, dbias_tensor, **rest):
        _, reference = _suite()
        x = self.buffers
        ends = x.padded_offsets.tolist()
        expected = reference.dglu_backward(
            a_tensor, x.b, c_tensor, ends, x.alpha, x.beta, x.prob, "dswiglu", {}
        )
        d = (expected.d * self.error).to(d_row_tensor.dtype)
        d_row_tensor.view(d.shape).copy_(d)
        dprob_tensor.view(-1).add_(expected.dprob.float())
        start = 0
        for g, end in enumerate(ends):
            dbias_tensor[g, :, 0] += d[start:end].float().sum(0).to(dbias_tensor.dtype)
            start = end


@pytest.fixture
def cpu_device(monkeypatch):
    """measure_shape on CPU tensors, with timing and CUDA calls stood in for."""
    generator = torch.Generator()
    generator.manual_seed(0)
    sets = [make_buffer_set(SHAPE, torch.device("cpu"), generator) for _ in range(2)]

    def fake_time_calls(calls, budget_ms, use_graphs=True):
        for call in calls:
            call()
        return summarize([1.0, 2.0, 3.0], "cuda_graph" if use_graphs else "eager")

    monkeypatch.setattr(device, "make_buffer_sets", lambda shape, dev, seed: sets)
    monkeypatch.setattr(device, "time_calls", fake_time_calls)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return sets


def use_op(monkeypatch, sets, op):
    op.buffers = sets[0]

    def build(samples):
        return op

    monkeypatch.setattr(device, "build_op", build)


def test_every_candidate_is_timed_and_the_op_agrees(cpu_device, monkeypatch):
    sets = cpu_device
    use_op(monkeypatch, sets, StandInOp())
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, dswiglu_epilogue)
    assert list(record["timings"]) == list(device.DESCRIPTIONS)
    assert all(t["median_ms"] == 2.0 for t in record["timings"].values())
    assert record["timings"]["fused_eager"]["method"] == "eager"
    assert record["timings"]["fused"]["method"] == "cuda_graph"
    assert record["variant"] == "stand-in" and record["buffer_sets"] == 2
    assert record["agreement"]["ok"] is True, record["agreement"].get("failure")
    assert record["agreement"]["d_rel_l2"] < 2e-2
    assert record["compile_s"] >= 0


def test_a_wrong_op_fails_agreement_but_is_still_timed(cpu_device, monkeypatch):
    sets = cpu_device
    use_op(monkeypatch, sets, StandInOp(error=1.5))
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["agreement"]["ok"] is False
    assert "d_row:" in record["agreement"]["failure"]
    assert record["agreement"]["d_rel_l2"] == pytest.approx(0.5, rel=2e-2)
    assert "median_ms" in record["timings"]["fused"]
    assert "torch.compile is unavailable" in record["timings"]["grouped_compiled_epilogue"]["error"]


def test_failures_are_recorded_and_the_rest_still_runs(cpu_device, monkeypatch):
    def no_op(samples):
        raise RuntimeError("no prebuilt kernel")

    def broken_epilogue(*args):
        raise ValueError("inductor failed")

    monkeypatch.setattr(device, "build_op", no_op)
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, broken_epilogue)
    assert record["variant"]["error"] == "RuntimeError: no prebuilt kernel"
    assert "agreement" not in record
    assert "could not be built" in record["timings"]["fused"]["error"]
    assert record["timings"]["grouped_compiled_epilogue"]["error"] == "ValueError: inductor failed"
    for name in ("grouped_gemm", "grouped_eager_epilogue", "dense_mm"):
        assert record["timings"][name]["median_ms"] == 2.0
