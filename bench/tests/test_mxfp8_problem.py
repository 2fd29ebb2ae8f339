"""bench.mxfp8_problem on the CPU: the MXFP8 inputs are the BF16 problem's operands
decoded exactly, the eager unfused path computes the block-scaled op of the float64
reference (tests/gpu/blockscaled_reference.py), and the check fails wrong outputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from bench import mxfp8_problem as problem  # noqa: E402
from bench.shapes import Shape  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
import blockscaled_reference as bs  # noqa: E402

# An empty expert; K = 160 and 2N = 192 leave partial SF atoms.
SHAPE = Shape("test", n=96, k=160, expert_rows=(256, 0, 512))


@pytest.fixture(scope="module")
def mxfp8_set():
    generator = torch.Generator().manual_seed(0)
    return problem.make_mxfp8_set(SHAPE, torch.device("cpu"), generator)


def _reference(s):
    """float64 op on the decoded operands, D quantized by the reference and decoded."""
    b = s.bf16
    ends = SHAPE.ends
    expected = bs.blockscaled_dglu_backward(
        s.a, s.sfa, s.b, s.sfb, b.c, ends, b.alpha, b.beta, b.prob, "dswiglu", {}
    )
    q = bs.quantize_d(expected.d.float(), ends, problem.D_DTYPE, 1.0)
    return {
        "d_row": bs.dequantize_d(q.d_row, q.row_bytes, 1.0),
        "d_col": bs.dequantize_d(q.d_col.T, q.col_bytes, 1.0).T,
        "dprob": expected.dprob,
        "dbias": bs.dbias(expected.d, ends),
    }


def test_mxfp8_operands_decode_to_the_bf16_problem(mxfp8_set):
    s = mxfp8_set
    m, n, k, l = SHAPE.m, SHAPE.n, SHAPE.k, SHAPE.l
    assert s.a.shape == (m, k, 1) and s.a.dtype == torch.float8_e4m3fn
    assert s.b.shape == (n, k, l) and s.b.stride() == (k, 1, n * k)
    for sf, rows, depth in ((s.sfa, m, 1), (s.sfb, n, l)):
        assert sf.dtype == torch.float8_e8m0fnu
        assert sf.shape == bs.sf_shape(rows, k, depth)
        assert sf.stride() == bs.sf_strides(rows, k, depth)
    assert torch.equal(bs.dequantize_operand(s.a, s.sfa), s.bf16.a.double())
    assert torch.equal(bs.dequantize_operand(s.b, s.sfb), s.bf16.b.double())
    assert s.bf16.b.data_ptr() == s.bf16.b_experts.data_ptr()
    assert len(torch.unique(bs.sf_to_exponents(s.sfa, m, k))) > 6  # block scales vary


def test_eager_unfused_path_computes_the_block_scaled_op(mxfp8_set):
    s = problem.fresh(mxfp8_set)
    got = problem.unfused_outputs(problem.UnfusedPath(compiled=False), s)
    result = problem.check(got, _reference(s), problem.FP8_D_BOUND)
    assert result["ok"], result
    assert result["d_row"] < 0.03 and result["dprob"] < 1e-2 and result["dbias"] < 1e-2
    assert bool((got["dbias"][1] == 0).all())  # the empty expert's


def test_unfused_outputs_are_in_the_seed_layouts(mxfp8_set):
    out = problem.UnfusedPath(compiled=False)(problem.fresh(mxfp8_set))
    width = 2 * SHAPE.n
    assert out.d_row.shape == out.d_col.shape == (SHAPE.m, width)
    assert out.sfd_row.shape == bs.sf_shape(SHAPE.m, width)
    assert out.sfd_col.shape == bs.sf_shape(width, SHAPE.m)
    assert out.dbias.shape == (SHAPE.l, width) and out.dbias.dtype == torch.bfloat16


def test_fresh_zeroes_the_sums_and_poisons_d():
    s = problem.fresh(problem.make_mxfp8_set(SHAPE, torch.device("cpu"), torch.Generator()))
    assert bool((s.bf16.dprob == 0).all()) and bool((s.bf16.dbias == 0).all())
    assert bool(torch.isnan(s.bf16.d_row).all())


def test_check_names_what_is_wrong(mxfp8_set):
    want = _reference(problem.fresh(mxfp8_set))
    swapped = {**want, "d_col": want["d_col"].flip(0), "dprob": want["dprob"] * float("nan")}
    result = problem.check(swapped, want, problem.FP8_D_BOUND)
    assert result["ok"] is False and result["d_row"] == 0
    assert "d_col relative L2" in result["failure"] and "> 0.05" in result["failure"]
    assert "dprob relative L2 nan > 0.05" in result["failure"]
    assert "d_row" not in result["failure"]


def test_check_holds_d_and_the_sums_to_their_bounds():
    want = {"d_row": torch.ones(64), "dbias": torch.ones(64)}
    off = {"d_row": torch.full((64,), 1.08), "dbias": torch.full((64,), 1.04)}
    assert problem.check(off, want, problem.BF16_D_BOUND)["ok"] is True
    assert problem.check(off, want, problem.FP8_D_BOUND)["failure"].startswith("d_row")


@pytest.mark.slow
def test_compiled_unfused_path_matches_eager(mxfp8_set):
    """One graph per piece, no graph break, the eager path's bytes (inductor's CPU backend)."""
    eager = problem.unfused_outputs(problem.UnfusedPath(compiled=False), problem.fresh(mxfp8_set))
    try:
        compiled = problem.unfused_outputs(
            problem.UnfusedPath(compiled=True), problem.fresh(mxfp8_set)
        )
    except Exception as err:  # no C++ compiler for inductor's CPU backend here
        pytest.skip(f"torch.compile unavailable on this CPU machine: {err}")
    result = problem.check(compiled, eager, problem.FP8_D_BOUND)
    assert result["ok"] and result["d_row"] == result["d_col"] == 0, result
    s = problem.fresh(mxfp8_set)
    b = s.bf16
    explained = torch._dynamo.explain(problem.dequantize_operands)(
        s.a, s.sfa.view(torch.uint8), s.b, s.sfb.view(torch.uint8)
    )
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    r = torch.zeros(SHAPE.m, SHAPE.n, dtype=torch.bfloat16)
    explained = torch._dynamo.explain(problem.epilogue_and_quantize)(
        r, b.c.view(SHAPE.m, -1), b.prob, b.alpha, b.beta, b.expert_of_row, b.dprob, SHAPE.l,
        s.norm_const,
    )
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
