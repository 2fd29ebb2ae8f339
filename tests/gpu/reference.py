"""Float64 reference of grouped GEMM + dGLU backward (docs/op_contract.md and the
seed's dSiTU-GLU equations), with the magnitudes that tolerances scale with (checks.py).

Everything is computed in float64 from the stored inputs, so the reference is exact for all
practical purposes: any difference is the kernel's (its fp32 arithmetic, its approximate
exp and reciprocal, its fp32 GEMM accumulation, its rounding of D to D's dtype). Two steps
are where the contract fixes a rounding, and the reference makes it as the contract says:
- X = beta_g * C_g is one fp32 product (activation_input), so that the clamp masks, which
  jump at the bounds, decide on the value the kernels decide on;
- with round_dgrad_to_input_dtype, R (alpha_g^2 in fp32 times the fp32 GEMM sum) is rounded
  to bf16 before the epilogue (rounded_r); the reference knows the kernels' fp32 R only
  when the GEMM's partial sums are exact (exact_accumulation), and refuses other data.

Per D element and per dprob row the reference also returns
- ``*_scale``: the same expression with every factor in absolute value and every
  difference a - b taken as |a| + |b| (1 - s as 1 + s, x + offset as |x| + |offset|, ...).
  n fp32 operations with relative errors <= e each err by at most about n * e times this,
  however much the exact value cancels;
- ``*_gemm_scale``: the same with R replaced by alpha^2 |A_g| |B_g|^T, the scale of the
  GEMM's fp32 accumulation error; zero for an expert whose partial sums fp32 holds exactly
  (see exact_accumulation), so that such data is checked to the epilogue's precision.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

COLUMN_BLOCK = 32
FP32_SIGNIFICAND_BITS = 24


@dataclass(frozen=True)
class Factors:
    """Per (row, compact column): what multiplies R * prob in D's gate and input columns and
    what multiplies R in dprob's sum, each with its magnitude (see the module docstring)."""

    gate: torch.Tensor
    gate_scale: torch.Tensor
    input: torch.Tensor
    input_scale: torch.Tensor
    dprob: torch.Tensor
    dprob_scale: torch.Tensor


def dswiglu(g, u, params: Mapping[str, float]) -> Factors:
    """dSwiGLU of X's gate g and input u."""
    s = torch.sigmoid(g)
    act = g * s
    return Factors(
        gate=u * s * (1 + g * (1 - s)),
        gate_scale=(u * s).abs() * (1 + g.abs() * (1 + s)),
        input=act,
        input_scale=act.abs(),
        dprob=act * u,
        dprob_scale=(act * u).abs(),
    )


def dgeglu(gate, x, params: Mapping[str, float]) -> Factors:
    """dGeGLU of X: clamp bounds inclusive; dprob unmasked."""
    a, offset = params["geglu_alpha"], params["linear_offset"]
    high, low = params["glu_clamp_max"], params["glu_clamp_min"]
    gc, xc = gate.clamp(max=high), x.clamp(low, high)
    s = torch.sigmoid(a * gc)
    gate_mask = (gate <= high).double()
    x_mask = ((x >= low) & (x <= high)).double()
    act = gc * s
    linear, linear_scale = xc + offset, xc.abs() + abs(offset)
    return Factors(
        gate=linear * s * (1 + a * gc * (1 - s)) * gate_mask,
        gate_scale=linear_scale * s * (1 + (a * gc).abs() * (1 + s)) * gate_mask,
        input=act * x_mask,
        input_scale=act.abs() * x_mask,
        dprob=act * linear,
        dprob_scale=act.abs() * linear_scale,
    )


def dsituglu(gate, x, params: Mapping[str, float]) -> Factors:
    """dSiTU-GLU of X: T_g = b1 tanh(G/b1) sigmoid(G), T_u = b2 tanh(U/b2)."""
    b1, b2 = params["situ_beta1"], params["situ_beta2"]
    s = torch.sigmoid(gate)
    tg, tu = torch.tanh(gate / b1), torch.tanh(x / b2)
    t_gate, t_input = b1 * tg * s, b2 * tu
    dt_gate = (1 - tg * tg) * s + b1 * tg * s * (1 - s)
    dt_gate_scale = (1 + tg * tg) * s + (b1 * tg).abs() * s * (1 + s)
    return Factors(
        gate=t_input * dt_gate,
        gate_scale=t_input.abs() * dt_gate_scale,
        input=t_gate * (1 - tu * tu),
        input_scale=t_gate.abs() * (1 + tu * tu),
        dprob=t_gate * t_input,
        dprob_scale=(t_gate * t_input).abs(),
    )


ACTIVATIONS: dict[str, Callable[..., Factors]] = {
    "dswiglu": dswiglu,
    "dgeglu": dgeglu,
    "dsituglu": dsituglu,
}


def activation_input(c: torch.Tensor, beta: float, scaled_by_beta: bool) -> torch.Tensor:
    """X of one expert's C (float64): beta * C as one fp32 product (exact in float64, then
    rounded once to fp32, as the kernels' fp32 multiply does), or C as stored."""
    return (c * beta).float().double() if scaled_by_beta else c


def rounded_r(sums: torch.Tensor, alpha: float) -> torch.Tensor:
    """R rounded to bf16 (round_dgrad_to_input_dtype) from GEMM sums fp32 holds exactly:
    alpha^2 in fp32 times the sums, rounded to fp32 (the kernels' R), then to bf16 (nearest
    even)."""
    alpha32 = torch.tensor(alpha, dtype=torch.float32)
    alpha_squared = float(alpha32 * alpha32)
    return (sums * alpha_squared).float().to(torch.bfloat16).double()


@dataclass(frozen=True)
class Expected:
    """The op's results over the valid_m rows owned by experts (float64), with magnitudes."""

    k: int  # the GEMM's reduction length
    d: torch.Tensor  # (valid_m, 2N): D_row
    d_scale: torch.Tensor
    d_gemm_scale: torch.Tensor
    dprob: torch.Tensor  # (valid_m,): what the call adds to dprob
    dprob_scale: torch.Tensor
    dprob_gemm_scale: torch.Tensor


def split_columns(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, 2N) -> gate, input (rows, N): even 32-column blocks gate, odd blocks input."""
    rows, width = x.shape
    blocks = x.reshape(rows, width // (2 * COLUMN_BLOCK), 2, COLUMN_BLOCK)
    return blocks[:, :, 0].reshape(rows, width // 2), blocks[:, :, 1].reshape(rows, width // 2)


def merge_columns(gate: torch.Tensor, inp: torch.Tensor) -> torch.Tensor:
    """Inverse of split_columns."""
    rows, n = gate.shape
    blocks = torch.stack(
        (
            gate.reshape(rows, n // COLUMN_BLOCK, COLUMN_BLOCK),
            inp.reshape(rows, n // COLUMN_BLOCK, COLUMN_BLOCK),
        ),
        dim=2,
    )
    return blocks.reshape(rows, 2 * n)


def _unit_exponent(x: torch.Tensor) -> int | None:
    """e such that every element of ``x`` (float64) is a multiple of 2^e; None if all are 0."""
    nonzero = x[x != 0]
    if nonzero.numel() == 0:
        return None
    mantissa, exponent = torch.frexp(nonzero)  # x = mantissa * 2^exponent, 0.5 <= |mantissa| < 1
    bits = (mantissa.abs() * 2.0**53).to(torch.int64)
    lowest_bit = torch.log2((bits & -bits).double()).to(torch.int64)
    return int((exponent.to(torch.int64) - 53 + lowest_bit).min())


def exact_accumulation(a: torch.Tensor, b: torch.Tensor, sums_abs: torch.Tensor) -> bool:
    """True when fp32 holds every partial sum of A B^T exactly, in any order and rounding.

    A's elements are multiples of 2^ea and B's of 2^eb, so every partial sum is a multiple
    of 2^(ea+eb); bounded by sums_abs (|A| |B|^T) <= 2^(ea+eb+23), it fits in fp32's 24-bit
    significand (one bit to spare).
    """
    ea, eb = _unit_exponent(a), _unit_exponent(b)
    if ea is None or eb is None:
        return True
    return float(sums_abs.max()) <= 2.0 ** (ea + eb + FP32_SIGNIFICAND_BITS - 1)


def dglu_backward(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    ends: Sequence[int],
    alpha: torch.Tensor,
    beta: torch.Tensor,
    prob: torch.Tensor,
    act_func: str,
    act_params: Mapping[str, float],
    *,
    c_scaled_by_beta: bool = True,
    round_dgrad: bool = False,
) -> Expected:
    """The op on the seed's tensors (A (M, K[, 1]), B (N, K, L), C (M, 2N[, 1]), prob
    (M, 1, 1)); ``ends`` are padded_offsets' values. ``c_scaled_by_beta``: X = beta * C
    (the BF16 contract, every activation) or X = C (the block-scaled contract's dGeGLU);
    ``round_dgrad``: round_dgrad_to_input_dtype (the module docstring)."""
    n = b.shape[0]
    valid_m = ends[-1]
    a2, c2, p = a.reshape(a.shape[0], -1), c.reshape(c.shape[0], -1), prob.reshape(-1, 1)
    alphas, betas = alpha.tolist(), beta.tolist()
    outputs = {
        name: torch.zeros(shape, dtype=torch.float64, device=a.device)
        for name, shape in (
            ("d", (valid_m, 2 * n)),
            ("d_scale", (valid_m, 2 * n)),
            ("d_gemm_scale", (valid_m, 2 * n)),
            ("dprob", (valid_m,)),
            ("dprob_scale", (valid_m,)),
            ("dprob_gemm_scale", (valid_m,)),
        )
    }
    start = 0
    for g, end in enumerate(ends):
        if end == start:
            continue
        rows = slice(start, end)
        a_g, b_g = a2[rows].double(), b[:, :, g].double()
        sums, sums_abs = a_g @ b_g.T, a_g.abs() @ b_g.abs().T
        exact = exact_accumulation(a_g, b_g, sums_abs)
        if round_dgrad and not exact:
            raise ValueError(
                "round_dgrad: the reference rounds the kernels' fp32 R, which it knows only from "
                "exact GEMM sums (inputs.make_inputs(exact_gemm=True))"
            )
        r = rounded_r(sums, alphas[g]) if round_dgrad else alphas[g] ** 2 * sums
        r_gemm = torch.zeros_like(sums_abs) if exact else alphas[g] ** 2 * sums_abs
        gate, x = (
            activation_input(half, betas[g], c_scaled_by_beta) for half in split_columns(c2[rows].double())
        )
        f = ACTIVATIONS[act_func](gate, x, act_params)
        rp, p_abs = r * p[rows].double(), p[rows].double().abs()
        outputs["d"][rows] = merge_columns(rp * f.gate, rp * f.input)
        outputs["d_scale"][rows] = merge_columns(rp.abs() * f.gate_scale, rp.abs() * f.input_scale)
        outputs["d_gemm_scale"][rows] = merge_columns(
            r_gemm * p_abs * f.gate_scale, r_gemm * p_abs * f.input_scale
        )
        outputs["dprob"][rows] = (r * f.dprob).sum(1)
        outputs["dprob_scale"][rows] = (r.abs() * f.dprob_scale).sum(1)
        outputs["dprob_gemm_scale"][rows] = (r_gemm * f.dprob_scale).sum(1)
        start = end
    return Expected(k=a2.shape[1], **outputs)
