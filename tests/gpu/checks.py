"""Comparisons of the op's outputs with the reference, and why the tolerances are what they are.

Every element must satisfy |got - want| <= atol + rtol * |want|, with rtol = 2e-2 and an
atol proportional to the magnitude of what produced the element:
- D_row (bf16): the reference is rounded to bf16 first; rtol covers a one-ulp rounding
  difference (bf16 ulp <= 2^-7 relative) and the epilogue's fp32 approximations (a fast
  sigmoid is good to ~1e-3 relative). Where the exact value nearly cancels (1 + g(1 - s)
  ~ 0, or xc + o ~ 0) those same approximation errors are relative to the cancelling
  terms, not to the result: atol is 2e-3 x the element's magnitude from the reference
  (the expression with those factors in absolute terms). The test data scales D far from
  1, so no fixed atol would do. Where the GEMM's sum over K nearly cancels, R itself is
  only as exact as fp32 accumulation (about K x 2^-24 of the sum of |terms|), so atol adds
  that fraction of the D the op would give for R = alpha^2 |A| |B|^T.
- dprob and dbias are sums: each term may carry a relative error up to ~2e-3 (the kernel
  may sum bf16-rounded D values, 2^-9, or approximate the sigmoid), so atol is 2e-3 x the
  sum of the |terms| (worst case: all errors of one sign); rtol covers the rounding of the
  result (bf16 for dbias). A missing or doubled 128-row tile stays far outside this bound
  for the expert sizes used here (<= 1280 rows).
"""

from __future__ import annotations

import torch
from reference import Expected

RTOL = 2e-2
TERM_ERROR = 2e-3


def assert_close(
    name: str, got: torch.Tensor, want: torch.Tensor, atol, rtol: float, seed: int
) -> None:
    """Every element within atol + rtol * |want| (NaN never is); report the first miss."""
    got, want = got.float(), want.float()
    allowed = atol + rtol * want.abs()
    bad = ~((got - want).abs() <= allowed)
    if bad.any():
        first = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.numel()} elements outside tolerance (seed {seed}); "
            f"first at {first}: got {got[first].item()!r}, want {want[first].item()!r}, "
            f"allowed difference {allowed[first].item() if torch.is_tensor(allowed) else allowed!r}"
        )


def check_d(d_row: torch.Tensor, expected: Expected, seed: int) -> None:
    """D_row's rows owned by experts against the reference rounded to D's dtype."""
    valid_m = expected.d.shape[0]
    want = expected.d.to(d_row.dtype)
    gemm_error = expected.k * 2.0**-24
    assert_close(
        "d_row",
        d_row[:valid_m].reshape(valid_m, -1),
        want,
        TERM_ERROR * expected.d_scale + gemm_error * expected.d_gemm_scale,
        RTOL,
        seed,
    )


def check_untouched(name: str, got: torch.Tensor, before: torch.Tensor, seed: int) -> None:
    """Bit-for-bit equal, NaN included (for rows and experts the op must not write)."""
    same = (got == before) | (torch.isnan(got) & torch.isnan(before))
    if not bool(same.all()):
        first = tuple((~same).nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int((~same).sum())} elements changed that must stay "
            f"untouched (seed {seed}); first at {first}: {got[first].item()!r}"
        )


def check_dprob(dprob: torch.Tensor, before: torch.Tensor, expected: Expected, seed: int) -> None:
    """What the op added to dprob's valid rows; rows past valid_m unchanged."""
    valid_m = expected.dprob.shape[0]
    got = dprob.reshape(-1)
    start = before.reshape(-1)
    # the fp32 accumulation onto the caller's value rounds by up to one ulp of the result
    atol = TERM_ERROR * expected.dprob_scale + 2.0**-23 * got[:valid_m].abs()
    assert_close("dprob (added)", got[:valid_m] - start[:valid_m], expected.dprob, atol, RTOL, seed)
    check_untouched("dprob past valid_m", got[valid_m:], start[valid_m:], seed)


def check_dbias(dbias: torch.Tensor, before: torch.Tensor, expected: Expected, seed: int) -> None:
    """dbias = before + the column sums over each expert's rows, stored in bf16."""
    want = (before.reshape(expected.dbias.shape).float() + expected.dbias).to(dbias.dtype)
    assert_close(
        "dbias", dbias.reshape(want.shape), want, TERM_ERROR * expected.dbias_scale, RTOL, seed
    )
