"""The PyTorch baselines compute the op of docs/op_contract.md (on the CPU), so
that timing them beside the fused op compares like with like."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.baselines import dense_mm, dswiglu_epilogue, grouped_gemm, unfused
from bench.inputs import make_buffer_set, rotation_count
from bench.shapes import Shape

torch = pytest.importorskip("torch")

# Uneven experts, one empty; N = 96 spans three 32-column blocks.
SHAPE = Shape("test", n=96, k=128, expert_rows=(256, 0, 512, 256))


def buffers(seed: int = 0):
    generator = torch.Generator()
    generator.manual_seed(seed)
    return make_buffer_set(SHAPE, torch.device("cpu"), generator)


def reference(b):
    """D, dprob, dbias in float64, expert by expert and column by column index."""
    n, ends = SHAPE.n, SHAPE.ends
    a = b.a.double().view(SHAPE.m, -1)
    c = b.c.double().view(SHAPE.m, -1)
    d = torch.zeros(SHAPE.m, 2 * n, dtype=torch.float64)
    dprob = torch.zeros(SHAPE.m, dtype=torch.float64)
    dbias = torch.zeros(SHAPE.l, 2 * n, dtype=torch.float64)
    gate_cols = torch.tensor([64 * (j // 32) + j % 32 for j in range(n)])
    input_cols = gate_cols + 32
    for g, end in enumerate(ends):
        start = ends[g - 1] if g else 0
        if start == end:
            continue
        rows = slice(start, end)
        r = b.alpha[g].double() ** 2 * (a[rows] @ b.b_experts[g].double().T)
        gate = b.beta[g].double() * c[rows][:, gate_cols]
        x = b.beta[g].double() * c[rows][:, input_cols]
        p = b.prob.double().view(-1, 1)[rows]
        s = torch.sigmoid(gate)
        d[rows, gate_cols] = r * p * x * s * (1 + gate * (1 - s))
        d[rows, input_cols] = r * p * gate * s
        dprob[rows] = (r * gate * s * x).sum(dim=1)
        dbias[g] = d[rows].sum(dim=0)
    return d, dprob, dbias


def rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def test_inputs_are_random_in_the_seed_layouts():
    b = buffers()
    assert b.a.shape == (SHAPE.m, SHAPE.k, 1) and b.a.dtype == torch.bfloat16
    assert b.b.shape == (SHAPE.n, SHAPE.k, SHAPE.l) and b.b.stride() == (
        SHAPE.k,
        1,
        SHAPE.n * SHAPE.k,
    )
    assert b.b.data_ptr() == b.b_experts.data_ptr()
    assert b.c.shape == (SHAPE.m, 2 * SHAPE.n, 1)
    assert b.padded_offsets.tolist() == SHAPE.ends and b.padded_offsets.dtype == torch.int32
    for name in ("a", "b_experts", "c", "alpha", "beta", "prob"):
        values = getattr(b, name).float()
        assert (values != 0).float().mean() > 0.99, name  # never zeros
    assert 0.5 <= b.alpha.min() and b.alpha.max() < 1.5
    assert (b.dprob == 0).all() and (b.dbias == 0).all()
    assert b.expert_of_row.tolist() == [0] * 256 + [2] * 512 + [3] * 256
    assert not torch.equal(buffers(0).a, buffers(1).a)


def test_grouped_gemm_skips_the_empty_expert_and_multiplies_per_expert():
    b = buffers()
    r = grouped_gemm(b).double()
    a = b.a.double().view(SHAPE.m, -1)
    want = torch.cat(
        [
            a[:256] @ b.b_experts[0].double().T,
            a[256:768] @ b.b_experts[2].double().T,
            a[768:] @ b.b_experts[3].double().T,
        ]
    )
    assert rel(r, want) < 1e-2


def test_unfused_path_computes_the_op():
    b = buffers()
    want_d, want_dprob, want_dbias = reference(b)
    initial = torch.randn(SHAPE.m, 1, 1)
    b = replace(b, dprob=initial.clone())
    d, dbias = unfused(b)
    assert d.dtype == torch.bfloat16 and d.shape == (SHAPE.m, 2 * SHAPE.n)
    assert rel(d, want_d) < 1e-2
    assert rel(b.dprob.view(-1) - initial.view(-1), want_dprob) < 1e-2  # accumulated
    assert rel(dbias, want_dbias) < 1e-2
    assert (dbias[1] == 0).all()  # the empty expert's bias gradient


def test_dense_mm_has_the_grouped_gemms_flops():
    b = buffers()
    out = dense_mm(b)
    assert out.shape == (SHAPE.m, SHAPE.n)
    assert 2 * out.shape[0] * out.shape[1] * b.a.shape[1] == SHAPE.flops


@pytest.mark.parametrize(
    ("bytes_per_set", "l2", "expected"), [(10, 100, 8), (100, 100, 3), (10**9, 50 * 2**20, 2)]
)
def test_rotation_covers_three_l2s_within_bounds(bytes_per_set, l2, expected):
    assert rotation_count(bytes_per_set, l2) == expected


def test_rotation_rejects_empty_sizes():
    with pytest.raises(ValueError, match="bytes_per_set"):
        rotation_count(0, 100)


@pytest.mark.slow
def test_compiled_epilogue_matches_eager():
    b = buffers(3)
    eager_b, compiled_b = (
        replace(b, dprob=torch.zeros_like(b.dprob)),
        replace(b, dprob=torch.zeros_like(b.dprob)),
    )
    d, dbias = unfused(eager_b)
    try:
        compiled = torch.compile(dswiglu_epilogue, dynamic=False)
        compiled_d, compiled_dbias = unfused(compiled_b, compiled)
    except Exception as err:  # no C++ compiler for inductor's CPU backend here
        pytest.skip(f"torch.compile unavailable on this CPU machine: {err}")
    assert rel(compiled_d, d.double()) < 1e-2
    assert rel(compiled_b.dprob, eager_b.dprob.double()) < 1e-4
    assert rel(compiled_dbias, dbias.double()) < 1e-2
