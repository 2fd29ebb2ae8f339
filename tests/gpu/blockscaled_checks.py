"""Checks of an MXFP8 call's outputs against blockscaled_reference, every element and byte.

The kernel's unquantized fp32 D differs from the float64 reference D by at most
checks.d_allowed(expected, fp32) per element (``error`` below: the epilogue's and the GEMM's
fp32 errors). From that:
- SFD bytes: each block's byte lies in blockscaled_reference.block_byte_range, the bytes the
  quantizer gives for the smallest and the largest block amax the error allows. That range
  is one byte, the reference's, except where the scale input max|D| * rcp * norm_const lies
  within the error of a power of two: there the kernel's fp32 rounding decides, and the
  byte may be the reference's or the next one (+-1). SFD storage: every byte of the
  allocation equals the range's bytes as the seed's layout places them (dense SFD_row and
  SFD_col, or the per-expert SFD_col), and padding keeps the caller's poison.
- Quantized D: each FP8 code within one FP8 step (plus the error scaled by s) of the
  reference quantization of the float64 D with the block's byte (so that a block whose
  byte is the other of its two allowed ones is compared at the scale it was written with).
- Dequantized D (code * 2^(e-127) / norm_const): within half an FP8 step (over s) of the
  float64 D, plus the error.
- All-zero blocks of the reference: byte 0 and every code exactly 0.
- dprob and dbias: checks.check_dprob and check_dbias on the unquantized D.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

import blockscaled_reference as bs
from checks import assert_within, check_dbias, check_dprob, check_untouched, d_allowed
from reference import Expected

FP32_PRODUCT_ROUNDING = 2.0**-22  # f32(D * s) in the kernel, and the reference's fp32 D and f32(D * s)


def check_bytes(name: str, got: torch.Tensor, low: torch.Tensor, high: torch.Tensor, context: str) -> None:
    """Every byte in [low, high]; report the first miss."""
    got, low, high = (t.view(torch.uint8).to(torch.int64) for t in (got, low, high))
    bad = (got < low) | (got > high)
    if bool(bad.any()):
        first = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {bad.numel()} bytes outside the reference's ({context}); "
            f"first at {first}: got {got[first].item()}, want {low[first].item()}"
            + (f"..{high[first].item()}" if high[first] != low[first] else "")
        )


def check_storage(
    name: str, sf: torch.Tensor, low: torch.Tensor, high: torch.Tensor, written: torch.Tensor, context: str
) -> None:
    """The whole SF allocation: written bytes (mask ``written``) in [low, high] at their
    layout's offsets, padding still POISON (0xFF)."""
    got = bs.sf_storage(sf.view(torch.uint8)).cpu()
    check_bytes(f"{name} storage", got[written], low[written], high[written], context)
    padding = got[~written]
    check_untouched(f"{name} padding", padding, torch.full_like(padding, bs.E8M0_NAN), context)


def block_scale(block_bytes: torch.Tensor, norm_const: float) -> torch.Tensor:
    """float64 per-element s (rows, 32 * blocks) of per-block bytes (rows, blocks)."""
    return bs.quantizer_scale(block_bytes, norm_const).double().repeat_interleave(bs.SF_VEC, dim=1)


def check_codes(
    name: str,
    codes: torch.Tensor,
    block_bytes: torch.Tensor,
    d: torch.Tensor,
    error: torch.Tensor,
    fmt: bs.Fp8Format,
    norm_const: float,
    context: str,
) -> None:
    """FP8 codes (rows, cols), blocks of 32 along the rows with ``block_bytes``, against the
    float64 D: quantized and dequantized (see the module docstring)."""
    s = block_scale(block_bytes, norm_const)
    y = d * s
    slack = error * s + y.abs() * FP32_PRODUCT_ROUNDING
    step = bs.fp8_step(y.abs() + slack, fmt)
    want = bs.quantize_with_bytes(d.float(), block_bytes, fmt, norm_const).double()
    got = bs.fp8_decode(codes)
    assert_within(f"{name} (FP8 codes)", got, want, step + slack, context)
    dequantized = bs.dequantize_d(codes, block_bytes, norm_const)
    assert_within(f"{name} (dequantized)", dequantized, d, (0.5 * step + slack) / s, context)
    zero = (d.reshape(d.shape[0], -1, bs.SF_VEC) == 0).all(dim=2)
    if bool(zero.any()):
        zero_codes = got.reshape(d.shape[0], -1, bs.SF_VEC)[zero]
        assert bool((block_bytes[zero] == 0).all()), f"{name}: an all-zero block's byte is not 0 ({context})"
        assert bool((zero_codes == 0).all()), f"{name}: an all-zero block has a non-zero code ({context})"


def zero_blocks(d: torch.Tensor) -> int:
    """How many 1x32 blocks along the rows of ``d`` are all zero."""
    return int((d.reshape(d.shape[0], -1, bs.SF_VEC) == 0).all(dim=2).sum())


def written_mask(rows: int, kc: int) -> torch.Tensor:
    """Storage positions of an SF allocation that hold a block's byte (not padding)."""
    zeros = torch.zeros((1, rows, -(-kc // bs.SF_VEC)), dtype=torch.uint8)
    return bs.sf_storage(bs.sf_from_exponents(zeros, kc, fill=1)) == 0


def discrete_written_mask(width: int, ends: Sequence[int]) -> torch.Tensor:
    zeros = torch.zeros((1, width, ends[-1] // bs.SF_VEC), dtype=torch.uint8)
    return bs.sf_storage(bs.discrete_col_sfd(zeros, ends, fill=1)) == 0


def check_quantized_d(
    d_row: torch.Tensor,
    d_col: torch.Tensor,
    sfd_row: torch.Tensor,
    sfd_col: torch.Tensor,
    expected: Expected,
    ends: Sequence[int],
    d_dtype: torch.dtype,
    norm_const: float,
    discrete_col_sfd: bool,
    context: str,
    check_padding: bool = True,
) -> None:
    """D_row, D_col and their SFD tensors against the reference (module docstring);
    ``check_padding``: the SFD allocations were poisoned by the caller."""
    fmt = bs.fp8_format(d_dtype)
    valid_m, width = expected.d.shape
    error = d_allowed(expected, torch.float32)
    d = expected.d

    row_low, row_high = bs.block_byte_range(d, error, fmt, norm_const, row_order=True)
    col_low, col_high = bs.block_byte_range(d.T, error.T, fmt, norm_const, row_order=False)
    row_bytes = bs.sf_to_exponents(sfd_row, valid_m, width)[0]
    if discrete_col_sfd:
        col_bytes = bs.discrete_col_sfd_to_exponents(sfd_col, ends, width)[0]
    else:
        col_bytes = bs.sf_to_exponents(sfd_col, width, valid_m)[0]
    check_bytes("sfd_row", row_bytes, row_low, row_high, context)
    check_bytes("sfd_col", col_bytes, col_low, col_high, context)
    if check_padding:
        row_store = [bs.sf_storage(bs.sf_from_exponents(t.unsqueeze(0).cpu(), width)) for t in (row_low, row_high)]
        check_storage("sfd_row", sfd_row, *row_store, written_mask(valid_m, width), context)
        if discrete_col_sfd:
            col_store = [bs.sf_storage(bs.discrete_col_sfd(t.unsqueeze(0).cpu(), ends)) for t in (col_low, col_high)]
            col_written = discrete_written_mask(width, ends)
        else:
            col_store = [bs.sf_storage(bs.sf_from_exponents(t.unsqueeze(0).cpu(), valid_m)) for t in (col_low, col_high)]
            col_written = written_mask(width, valid_m)
        check_storage("sfd_col", sfd_col, *col_store, col_written, context)

    rows = d_row[:valid_m].reshape(valid_m, width)
    cols = d_col[:valid_m].reshape(valid_m, width)
    check_codes("d_row", rows, row_bytes, d, error, fmt, norm_const, context)
    check_codes("d_col", cols.T, col_bytes, d.T, error.T, fmt, norm_const, context)


def check_accumulated(
    dprob: torch.Tensor,
    dprob_before: torch.Tensor,
    dbias: torch.Tensor | None,
    dbias_before: torch.Tensor | None,
    expected: Expected,
    ends: Sequence[int],
    n: int,
    context: str,
) -> None:
    """dprob, and dbias (summed from the unquantized D), on top of their contents before."""
    check_dprob(dprob, dprob_before, expected, n, context)
    if dbias is not None:
        error = d_allowed(expected, torch.float32)
        check_dbias(dbias, dbias_before, expected.d, ends, context, d_error=error)


def check_amax(amax: torch.Tensor, expected: Expected, allowed: torch.Tensor, ends: Sequence[int], context: str) -> None:
    """amax (L, 2, 1) fp32, as the kernel leaves it from a -inf start: -inf exactly for an
    expert with no rows (cuDNN FE's wrapper's start, which the kernel never writes), and
    within ``allowed`` (D's per-element bound, (valid_m, 2N)) of the reference's per-expert
    [max |dgate|, max |dup|] for the others."""
    want = bs.expert_amax(expected.d, ends)
    got = amax.reshape(len(ends), 2).double().cpu()
    empty = torch.isinf(want)
    wrong_empty = empty & (got != -torch.inf)
    assert not wrong_empty.any(), f"amax: experts with no rows should keep -inf, got {got[empty].tolist()} ({context})"
    bound = bs.expert_amax(allowed, ends).masked_fill(empty, 0)
    error = (got - want).masked_fill(empty, 0).abs()
    assert torch.isfinite(got[~empty]).all() and (error <= bound).all(), (
        f"amax: got {got.tolist()}, want {want.tolist()} within {bound.tolist()} ({context})"
    )
