"""Float32 reference of grouped GEMM + dGLU backward (shared/notes/op_contract.md).

R = alpha[g]^2 * A_g B_g^T is computed in float64 (exact for bf16 inputs up to rounding)
and rounded to float32; everything after it is float32, like the kernel's epilogue. Besides
the expected values, the reference returns magnitudes that tolerances scale with: per D
element, the same expression with every factor that can cancel (1 + g(1 - s), xc + o)
taken in absolute terms, and the D the op would give for R = alpha^2 |A_g| |B_g|^T (the
scale of the GEMM's own fp32 rounding, which matters where the sum over K cancels);
per reduction (dprob, dbias), the sum of |terms|.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

COLUMN_BLOCK = 32


@dataclass(frozen=True)
class Expected:
    """Expected results over the valid_m rows owned by experts (fp32)."""

    k: int  # the GEMM's reduction length
    d: torch.Tensor  # (valid_m, 2N): D_row
    d_scale: torch.Tensor  # (valid_m, 2N): magnitude of each D element's factors
    d_gemm_scale: torch.Tensor  # (valid_m, 2N): |D| for R = alpha^2 |A| |B|^T
    dprob: torch.Tensor  # (valid_m,): what the call adds to dprob
    dprob_scale: torch.Tensor  # (valid_m,): sum over columns of |dprob terms|
    dbias: torch.Tensor  # (L, 2N): what the call adds to dbias
    dbias_scale: torch.Tensor  # (L, 2N): sum over the expert's rows of |D|


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


@dataclass(frozen=True)
class ActivationGrad:
    d_gate: torch.Tensor
    d_input: torch.Tensor
    gate_scale: torch.Tensor
    input_scale: torch.Tensor
    dprob_terms: torch.Tensor


def dswiglu(r, p, gate, x, params) -> ActivationGrad:
    """dSwiGLU; gate and x already scaled by beta."""
    s = torch.sigmoid(gate)
    d_input = r * p * gate * s
    return ActivationGrad(
        d_gate=r * p * x * s * (1 + gate * (1 - s)),
        d_input=d_input,
        gate_scale=(r * p * x * s).abs() * (1 + gate.abs() * (1 - s)),
        input_scale=d_input.abs(),
        dprob_terms=r * gate * s * x,
    )


def dgeglu(r, p, gate, x, params) -> ActivationGrad:
    """dGeGLU; clamp bounds inclusive, beta unused."""
    alpha, offset = params["geglu_alpha"], params["linear_offset"]
    high, low = params["glu_clamp_max"], params["glu_clamp_min"]
    gc = gate.clamp(max=high)
    xc = x.clamp(low, high)
    s = torch.sigmoid(alpha * gc)
    gate_mask = gate <= high
    d_input = r * p * gc * s * ((x >= low) & (x <= high))
    return ActivationGrad(
        d_gate=r * p * (xc + offset) * s * (1 + alpha * gc * (1 - s)) * gate_mask,
        d_input=d_input,
        gate_scale=(r * p * s).abs()
        * (xc.abs() + abs(offset))
        * (1 + (alpha * gc).abs() * (1 - s))
        * gate_mask,
        input_scale=d_input.abs(),
        dprob_terms=r * gc * s * (xc + offset),
    )


ACTIVATIONS = {"dswiglu": dswiglu, "dgeglu": dgeglu}


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
) -> Expected:
    """The op on the seed's tensors (A (M, K[, 1]), B (N, K, L), C (M, 2N[, 1]), prob
    (M, 1, 1)); ``ends`` are padded_offsets' values."""
    n, l = b.shape[0], b.shape[2]
    valid_m = ends[-1]
    a2, c2 = a.reshape(a.shape[0], -1), c.reshape(c.shape[0], -1)
    d = torch.zeros(valid_m, 2 * n, device=a.device)
    d_scale = torch.zeros(valid_m, 2 * n, device=a.device)
    d_gemm_scale = torch.zeros(valid_m, 2 * n, device=a.device)
    dprob = torch.zeros(valid_m, device=a.device)
    dprob_scale = torch.zeros(valid_m, device=a.device)
    dbias = torch.zeros(l, 2 * n, device=a.device)
    dbias_scale = torch.zeros(l, 2 * n, device=a.device)
    start = 0
    for g, end in enumerate(ends):
        if end == start:
            continue
        rows = slice(start, end)
        r = (float(alpha[g]) ** 2 * (a2[rows].double() @ b[:, :, g].double().T)).float()
        r_abs = (float(alpha[g]) ** 2 * (a2[rows].double().abs() @ b[:, :, g].double().abs().T)).float()
        gate, x = split_columns(c2[rows].float())
        if act_func == "dswiglu":
            gate, x = gate * beta[g], x * beta[g]
        grad = ACTIVATIONS[act_func](r, prob.reshape(-1, 1)[rows], gate, x, act_params)
        grad_abs = ACTIVATIONS[act_func](r_abs, prob.reshape(-1, 1)[rows], gate, x, act_params)
        d_gemm_scale[rows] = merge_columns(grad_abs.d_gate, grad_abs.d_input).abs()
        d[rows] = merge_columns(grad.d_gate, grad.d_input)
        d_scale[rows] = merge_columns(grad.gate_scale, grad.input_scale)
        dprob[rows] = grad.dprob_terms.double().sum(1).float()
        dprob_scale[rows] = grad.dprob_terms.abs().sum(1)
        dbias[g] = d[rows].double().sum(0).float()
        dbias_scale[g] = d[rows].abs().sum(0)
        start = end
    return Expected(
        k=a2.shape[1],
        d=d,
        d_scale=d_scale,
        d_gemm_scale=d_gemm_scale,
        dprob=dprob,
        dprob_scale=dprob_scale,
        dbias=dbias,
        dbias_scale=dbias_scale,
    )
