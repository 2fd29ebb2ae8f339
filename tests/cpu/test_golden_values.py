"""Golden values worked out by hand from the op's equations (docs/op_contract.md, the seed),
checked against the GPU suite's float64 reference (tests/gpu/reference.py) on the CPU.

The reference is what every GPU test compares the kernels with, so it must itself be right;
these values come from the equations alone, with inputs chosen so that the arithmetic is
short: sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4, tanh(atanh(1/2)) = 1/2, X = beta * C on
dGeGLU's clamp bounds. Every activation reads X = beta * C, and beta is 1/2 or 2 here (so
X is exact). Each test's comments show the derivation. C is fp32 where an input (ln 3 / 2,
50 atanh(1/2)) is not a bf16 number; its fp32 rounding moves the values by ~1e-8.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
from reference import dglu_backward  # noqa: E402

RELATIVE = 1e-6
GEGLU = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0}
SITU = {"situ_beta1": 4.0, "situ_beta2": 25.0}


def gate_column(j: int) -> int:
    """C/D column of compact column j's gate: even 32-column blocks (docs/op_contract.md)."""
    return 64 * (j // 32) + j % 32


def one_row(
    n: int, b_column: list[float], gate: float, up: float, *, alpha: float, beta: float, prob: float
):
    """One expert, one row, K = 1 with A = 1, so R_j = alpha^2 * B[j]; every compact column
    j holds the same (gate, up) pair in C."""
    a = torch.ones(1, 1, 1)
    b = torch.tensor(b_column, dtype=torch.float64).reshape(n, 1, 1)
    c = torch.zeros(1, 2 * n, 1, dtype=torch.float64)
    for j in range(n):
        c[0, gate_column(j), 0] = gate
        c[0, gate_column(j) + 32, 0] = up
    return a, b, c.float(), torch.tensor([alpha]), torch.tensor([beta]), torch.tensor([[[prob]]])


def expected_for(act_func: str, params: dict, inputs) -> object:
    a, b, c, alpha, beta, prob = inputs
    return dglu_backward(a, b, c, [1], alpha, beta, prob, act_func, params)


def close(got: float, want: float) -> bool:
    return abs(got - want) <= RELATIVE * max(abs(want), 1e-30)


def test_dswiglu_at_gate_zero_and_the_column_layout() -> None:
    # alpha = -2, B[j] = (j + 1) / 4: R_j = 4 (j + 1) / 4 = j + 1.  beta = 2, C = (0, 1.5):
    # G = 0, U = 3,
    # p = 1/2: g = 0, s = 1/2, f_gate = u s (1 + g (1 - s)) = 3/2, f_input = g s = 0,
    # t = g s u = 0.  D_gate(j) = R_j p f_gate = 0.75 (j + 1); D_input = 0; dprob = 0.
    n = 64
    x = one_row(n, [(j + 1) / 4 for j in range(n)], 0.0, 1.5, alpha=-2.0, beta=2.0, prob=0.5)
    expected = expected_for("dswiglu", {}, x)
    for j in range(n):
        assert close(expected.d[0, gate_column(j)].item(), 0.75 * (j + 1)), j
        assert expected.d[0, gate_column(j) + 32].item() == 0.0, j
    assert expected.dprob[0].item() == 0.0


def test_dswiglu_scales_c_by_beta() -> None:
    # beta = 2, G = ln(3) / 2, U = 1: g = ln 3, u = 2, s = sigmoid(ln 3) = 3/4.
    # f_gate = 2 (3/4) (1 + ln 3 / 4) = 1.5 + 0.375 ln 3 = 1.9119796082505411
    # f_input = (3/4) ln 3 = 0.8239592165010823;  t = g s u = 1.5 ln 3 = 1.6479184330021646
    # R = 1 (alpha 1, B 1), p = 1/2: D_gate = 0.9559898041252706, D_input = 0.41197960825054114,
    # dprob = 32 columns * R * t = 52.73338985606927 (no factor p).
    x = one_row(32, [1.0] * 32, math.log(3) / 2, 1.0, alpha=1.0, beta=2.0, prob=0.5)
    expected = expected_for("dswiglu", {}, x)
    assert close(expected.d[0, 0].item(), 0.9559898041252706)
    assert close(expected.d[0, 32].item(), 0.41197960825054114)
    assert close(expected.dprob[0].item(), 32 * 1.6479184330021646)


def test_dgeglu_on_the_clamp_bounds() -> None:
    # beta = 1/2, C = (14, -15): X's G = 7 = clamp_max: the gate bound is inclusive,
    # gate_on = 1, gc = 7.  U = -7.5 < clamp_min: input_on = 0, uc = -7.
    # s = sigmoid(1.702 * 7) = 0.9999933040433311
    # f_gate = (uc + 1) s (1 + 1.702 * 7 (1 - s)) = -6 s (1 + 11.914 (1 - s))
    # R = 1, p = 1/2: D_gate = -3.0002192374107315; D_input = R p gc s input_on = 0;
    # t = gc s (uc + 1) = -42 s (unmasked): dprob = 32 * -41.99971876981991.
    x = one_row(32, [1.0] * 32, 14.0, -15.0, alpha=1.0, beta=0.5, prob=0.5)
    expected = expected_for("dgeglu", GEGLU, x)
    assert close(expected.d[0, 0].item(), -3.0002192374107315)
    assert expected.d[0, 32].item() == 0.0
    assert close(expected.dprob[0].item(), 32 * -41.99971876981991)


def test_dgeglu_gate_past_the_bound_is_masked() -> None:
    # beta = 2, C = (3.5 + 2^-17, 3.5): G = 7 + 2^-16 > clamp_max: gate_on = 0, so D_gate = 0;
    # gc = 7 still feeds the input: U = 7 = clamp_max (inclusive): uc = 7,
    # D_input = R p 7 s = 0.5 * 7 * 0.9999933040433311.
    x = one_row(32, [1.0] * 32, 3.5 + 2.0**-17, 3.5, alpha=1.0, beta=2.0, prob=0.5)
    expected = expected_for("dgeglu", GEGLU, x)
    assert expected.d[0, 0].item() == 0.0
    assert close(expected.d[0, 32].item(), 3.5 * 0.9999933040433311)


def test_dsituglu_at_tanh_one_half() -> None:
    # beta = 1/2, C = (0, 50 atanh(1/2)): G = 0: tanh(0) = 0, sigmoid = 1/2: T_g = 0,
    # dT_g = (1 - 0) 1/2 + 0 = 1/2.  U = 25 atanh(1/2): tanh(U / 25) = 1/2, T_u = 12.5,
    # dT_u = 1 - 1/4 = 3/4.
    # f_gate = T_u dT_g = 6.25, f_input = T_g dT_u = 0, t = T_g T_u = 0.
    # alpha 2, B 1 (R = 4), p = -1: D_gate = -25, D_input = 0, dprob = 0.
    x = one_row(32, [1.0] * 32, 0.0, 50 * math.atanh(0.5), alpha=2.0, beta=0.5, prob=-1.0)
    expected = expected_for("dsituglu", SITU, x)
    assert close(expected.d[0, 0].item(), -25.0)
    assert expected.d[0, 32].item() == 0.0
    assert expected.dprob[0].item() == 0.0


def test_rows_of_each_expert_use_that_experts_weights_and_alpha() -> None:
    # Two experts of one row each (ends [1, 2]); A = 1, K = 1; B_0 = 1, B_1 = 3;
    # alpha = (1, -1/2): R = 1 for row 0 and (1/4) 3 = 3/4 for row 1.
    # dswiglu with C = (0, 6), beta = 1/2 (G = 0, U = 3), p = 1: D_gate = R * 3/2 -> 1.5
    # and 1.125.
    a = torch.ones(2, 1, 1)
    b = torch.tensor([[1.0] * 32, [3.0] * 32]).t().reshape(32, 1, 2)
    c = torch.zeros(2, 64, 1)
    c[:, 32:, 0] = 6.0
    expected = dglu_backward(
        a, b, c, [1, 2], torch.tensor([1.0, -0.5]), torch.full((2,), 0.5), torch.ones(2, 1, 1), "dswiglu", {}
    )
    assert close(expected.d[0, 0].item(), 1.5)
    assert close(expected.d[1, 0].item(), 1.125)


def test_round_dgrad_rounds_r_to_the_nearest_bf16_ties_to_even() -> None:
    # round_dgrad_to_input_dtype: R is rounded to bf16 (8 significant bits: steps of 2^-7 on
    # [1, 2)) before the epilogue. K = 1, A = 1, alpha = 1: R_j = B[j].
    # B = 1 + 3 * 2^-9 (3/4 of a step) -> 1 + 2^-7;  B = 1 + 2^-8 (half a step, a tie) -> 1
    # (even);  B = 1 + 3 * 2^-8 (a tie above an odd step) -> 1 + 2^-6.
    # dswiglu with beta = 2, C = (0, 1.5): f_gate = 3/2; p = 1/2: D_gate = 0.75 R.
    b = [1 + 3 * 2.0**-9] * 8 + [1 + 2.0**-8] * 8 + [1 + 3 * 2.0**-8] * 16
    a, b64, c, alpha, beta, prob = one_row(32, b, 0.0, 1.5, alpha=1.0, beta=2.0, prob=0.5)
    plain = dglu_backward(a, b64, c, [1], alpha, beta, prob, "dswiglu", {})
    rounded = dglu_backward(a, b64, c, [1], alpha, beta, prob, "dswiglu", {}, round_dgrad=True)
    for j, (r, want) in enumerate([(b[0], 1 + 2.0**-7), (b[8], 1.0), (b[16], 1 + 2.0**-6)]):
        assert plain.d[0, 8 * j].item() == 0.75 * r
        assert rounded.d[0, 8 * j].item() == 0.75 * want
