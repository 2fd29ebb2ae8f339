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


def use_ops(monkeypatch, sets, op, deterministic_op=None):
    """build_op returns ``op``, or with deterministic=True ``deterministic_op`` (default:
    a correct stand-in named "stand-in-det")."""
    if deterministic_op is None:
        deterministic_op = StandInOp()
        deterministic_op.variant_name = "stand-in-det"
    built = []
    for each in (op, deterministic_op):
        each.buffers = sets[0]

    def build(samples, deterministic=False):
        built.append(deterministic)
        return deterministic_op if deterministic else op

    monkeypatch.setattr(device, "build_op", build)
    return built


def test_every_candidate_is_timed_and_the_op_agrees(cpu_device, monkeypatch):
    sets = cpu_device
    built = use_ops(monkeypatch, sets, StandInOp())
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, dswiglu_epilogue)
    assert built == [False, True]
    assert list(record["timings"]) == list(device.DESCRIPTIONS)
    timed = {name: t for name, t in record["timings"].items() if name != "quack_dgated"}
    assert all(t["median_ms"] == 2.0 for t in timed.values())
    assert record["timings"]["fused_eager"]["method"] == "eager"
    assert record["timings"]["fused"]["method"] == "cuda_graph"
    assert record["timings"]["fused_deterministic"]["method"] == "cuda_graph"
    assert record["variant"] == "stand-in" and record["buffer_sets"] == 2
    assert record["deterministic_variant"] == "stand-in-det"
    for gate in ("agreement", "deterministic_agreement"):
        assert record[gate]["ok"] is True, record[gate].get("failure")
        assert record[gate]["d_rel_l2"] < 2e-2
    assert record["compile_s"] >= 0


def test_a_wrong_op_fails_agreement_but_is_still_timed(cpu_device, monkeypatch):
    sets = cpu_device
    use_ops(monkeypatch, sets, StandInOp(error=1.5))
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["agreement"]["ok"] is False
    assert record["deterministic_agreement"]["ok"] is True
    assert "d_row:" in record["agreement"]["failure"]
    assert record["agreement"]["d_rel_l2"] == pytest.approx(0.5, rel=2e-2)
    assert "median_ms" in record["timings"]["fused"]
    assert "torch.compile is unavailable" in record["timings"]["grouped_compiled_epilogue"]["error"]


def test_failures_are_recorded_and_the_rest_still_runs(cpu_device, monkeypatch):
    def no_op(samples, deterministic=False):
        raise RuntimeError("no prebuilt kernel")

    def broken_epilogue(*args):
        raise ValueError("inductor failed")

    monkeypatch.setattr(device, "build_op", no_op)
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, broken_epilogue)
    assert record["variant"]["error"] == "RuntimeError: no prebuilt kernel"
    assert record["deterministic_variant"]["error"] == "RuntimeError: no prebuilt kernel"
    assert "agreement" not in record and "deterministic_agreement" not in record
    assert "could not be built (see variant)" in record["timings"]["fused"]["error"]
    assert "(see deterministic_variant)" in record["timings"]["fused_deterministic"]["error"]
    assert record["timings"]["grouped_compiled_epilogue"]["error"] == "ValueError: inductor failed"
    for name in ("grouped_gemm", "grouped_eager_epilogue", "dense_mm"):
        assert record["timings"][name]["median_ms"] == 2.0


def test_a_wrong_deterministic_op_fails_its_own_gate(cpu_device, monkeypatch):
    sets = cpu_device
    use_ops(monkeypatch, sets, StandInOp(), deterministic_op=StandInOp(error=0.5))
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["agreement"]["ok"] is True
    assert record["deterministic_agreement"]["ok"] is False
    assert "d_row:" in record["deterministic_agreement"]["failure"]
    assert "median_ms" in record["timings"]["fused_deterministic"]


def test_the_deterministic_op_missing_leaves_the_default_one_timed(cpu_device, monkeypatch):
    sets = cpu_device
    op = StandInOp()
    op.buffers = sets[0]

    def build(samples, deterministic=False):
        if deterministic:
            raise RuntimeError("no _det variant")
        return op

    monkeypatch.setattr(device, "build_op", build)
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["deterministic_variant"]["error"] == "RuntimeError: no _det variant"
    assert "deterministic_agreement" not in record
    assert record["agreement"]["ok"] is True
    assert "median_ms" in record["timings"]["fused"]
    assert "could not be built" in record["timings"]["fused_deterministic"]["error"]


def test_quack_is_skipped_with_its_reason_when_it_does_not_import(cpu_device, monkeypatch):
    use_ops(monkeypatch, cpu_device, StandInOp())
    monkeypatch.setattr(device, "gemm_dgated", lambda: "skipped: quack is not importable (ImportError: x)")
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["timings"]["quack_dgated"] == {"skipped": "skipped: quack is not importable (ImportError: x)"}
    assert "median_ms" in record["timings"]["fused"]


def test_quack_is_timed_beside_the_op_when_it_imports(cpu_device, monkeypatch):
    calls = []

    def stand_in_dgated(a, b, pre_act, **options):
        calls.append((a.shape, b.shape, pre_act.shape, options["cu_seqlens_m"].tolist()))

    use_ops(monkeypatch, cpu_device, StandInOp())
    monkeypatch.setattr(device, "gemm_dgated", lambda: stand_in_dgated)
    record = device.measure_shape(SHAPE, "cpu", 100.0, 0, None)
    assert record["timings"]["quack_dgated"]["median_ms"] == 2.0
    # A (M, K), B (L, K, N), C (M, 2N), the expert row ranges with a leading 0
    assert calls[0] == ((512, 64), (3, 64, 64), (512, 128), [0, 256, 256, 512])
