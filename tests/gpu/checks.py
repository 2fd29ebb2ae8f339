"""Comparisons of the op's outputs with the reference, and why the tolerances are what they are.

Every element is compared: |got - want| <= allowed, element by element (NaN never passes).
The reference (reference.py) is float64, so ``allowed`` bounds the kernel's own errors:

- The epilogue's fp32 arithmetic: a few dozen operations, each exact to 2^-24 relative
  (the approximate exp and reciprocal to ~2^-22): TERM_ERROR = 2^-14 covers them with a
  wide margin, times the element's magnitude (its expression with differences taken as
  sums of absolute values, so that cancellation, e.g. 1 + g (1 - s) ~ 0 or x + offset ~ 0,
  is covered). Bugs (a missing beta, swapped columns, a wrong expert, a missing alpha^2)
  are errors of order 1.
- The GEMM's fp32 accumulation over K (tensor cores may truncate): GEMM_ERROR_PER_K * K
  times the result for R = alpha^2 |A| |B|^T; zero where the data makes every partial sum
  exact (inputs.py's exact_gemm, used for very large K).
- D's rounding to its dtype: half an ulp, relative 2^-8 (bf16), 2^-11 (fp16), 2^-24 (fp32),
  plus half the dtype's smallest subnormal step; so fp32 D is held ~2^16 times tighter than
  bf16 D, and fp16 D 8 times tighter.
- dprob: the sums above, plus fp32 summation (per tile, then one atomic add per n-tile
  onto the caller's value): DPROB_DEPTH_BASE + N/32 additions, each 2^-24 relative to at
  most |before| + sum of |terms|.
- dbias: checked against the D_row the call returned: the fp32 column sums of an expert's
  rows (each D element may be summed before or after its rounding: half an ulp of D each;
  rows + 2 additions of 2^-24 each), added to the caller's bf16 dbias and rounded to bf16
  (half a bf16 ulp). Experts without rows keep their dbias bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from reference import Expected

FP32_ROUNDING = 2.0**-24
TERM_ERROR = 2.0**-14
GEMM_ERROR_PER_K = 2.0**-23
DPROB_DEPTH_BASE = 64


def half_ulp(dtype: torch.dtype) -> float:
    """Largest relative rounding error of a value stored in ``dtype`` (round to nearest)."""
    return torch.finfo(dtype).eps / 2


def subnormal_floor(dtype: torch.dtype) -> float:
    """Half the spacing of ``dtype``'s subnormal numbers: the absolute rounding error near 0."""
    info = torch.finfo(dtype)
    return info.smallest_normal * info.eps / 2


def assert_within(
    name: str, got: torch.Tensor, want: torch.Tensor, allowed: torch.Tensor, context: str
) -> None:
    """Every element within ``allowed`` of ``want`` (NaN never is); report the first miss."""
    got, want = got.double(), want.double()
    allowed = torch.as_tensor(allowed, dtype=torch.float64, device=want.device).expand_as(want)
    bad = ~((got - want).abs() <= allowed)
    if bad.any():
        first = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.numel()} elements outside tolerance ({context}); "
            f"first at {first}: got {got[first].item()!r}, want {want[first].item()!r}, "
            f"allowed difference {allowed[first].item()!r}"
        )


def check_untouched(name: str, got: torch.Tensor, before: torch.Tensor, context: str) -> None:
    """Equal element by element, NaN included (rows and experts the op must not write)."""
    same = (got == before) | (torch.isnan(got) & torch.isnan(before))
    if not bool(same.all()):
        first = tuple((~same).nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int((~same).sum())} elements changed that must stay untouched "
            f"({context}); first at {first}: {got[first].item()!r}, was {before[first].item()!r}"
        )


def d_allowed(expected: Expected, dtype: torch.dtype) -> torch.Tensor:
    """How far each D element stored in ``dtype`` may be from the reference: the epilogue's
    and the GEMM's fp32 errors, then the rounding to ``dtype``."""
    computed = TERM_ERROR * expected.d_scale + GEMM_ERROR_PER_K * expected.k * expected.d_gemm_scale
    rounding = half_ulp(dtype)
    return computed * (1 + rounding) + rounding * expected.d.abs() + subnormal_floor(dtype)


def check_d(d_row: torch.Tensor, expected: Expected, context: str) -> None:
    """D_row's rows owned by experts against the float64 reference."""
    valid_m = expected.d.shape[0]
    got = d_row[:valid_m].reshape(valid_m, -1)
    assert_within("d_row", got, expected.d, d_allowed(expected, d_row.dtype), context)


def check_dprob(
    dprob: torch.Tensor, before: torch.Tensor, expected: Expected, n: int, context: str
) -> None:
    """dprob = before + the reference's row sums on valid rows; rows past valid_m unchanged."""
    valid_m = expected.dprob.shape[0]
    got, start = dprob.reshape(-1), before.reshape(-1)
    depth = DPROB_DEPTH_BASE + math.ceil(n / 32)
    allowed = (
        TERM_ERROR * expected.dprob_scale
        + GEMM_ERROR_PER_K * expected.k * expected.dprob_gemm_scale
        + depth * FP32_ROUNDING * (start[:valid_m].double().abs() + expected.dprob_scale)
    )
    want = start[:valid_m].double() + expected.dprob
    assert_within("dprob", got[:valid_m], want, allowed, context)
    check_untouched("dprob past valid_m", got[valid_m:], start[valid_m:], context)


def check_dbias(
    dbias: torch.Tensor,
    before: torch.Tensor,
    d_row: torch.Tensor,
    ends: Sequence[int],
    context: str,
    d_error: torch.Tensor | None = None,
) -> None:
    """dbias = before + each expert's column sums of the returned D_row, stored in bf16.
    ``d_error`` (valid_m, 2N): how far each D element the kernel summed may be from
    ``d_row``'s (default: half an ulp of d_row's dtype, the D_row the call returned)."""
    l, width = before.shape[0], before.shape[1]
    start_values = before.reshape(l, width).double()
    got = dbias.reshape(l, width)
    sums = torch.zeros_like(start_values)
    sums_abs = torch.zeros_like(start_values)
    summed_error = torch.zeros_like(start_values)
    rows = torch.zeros(l, 1, dtype=torch.float64, device=before.device)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            d = d_row[start:end].reshape(end - start, width).double()
            sums[g], sums_abs[g], rows[g] = d.sum(0), d.abs().sum(0), end - start
            error = half_ulp(d_row.dtype) * d.abs() if d_error is None else d_error[start:end]
            summed_error[g] = error.double().sum(0)
        start = end
    summed = summed_error + (rows + 2) * FP32_ROUNDING * sums_abs
    summed = summed + FP32_ROUNDING * start_values.abs()
    stored = half_ulp(got.dtype)
    want = start_values + sums
    allowed = summed * (1 + stored) + stored * want.abs()
    owned = rows.reshape(-1) > 0
    assert_within("dbias", got[owned], want[owned], allowed[owned], context)
    check_untouched(
        "dbias of experts without rows", got[~owned], before.reshape(l, width)[~owned], context
    )
