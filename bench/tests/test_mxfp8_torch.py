"""bench.mxfp8_torch (the unfused MXFP8 path's layout, decode and quantizer) against the
block-scaled CPU reference (tests/gpu/blockscaled_reference.py), bit for bit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from bench import mxfp8_torch as mx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "gpu"))
import blockscaled_reference as bs  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
# partial atoms on both axes: 300 rows -> RR 3, 7 blocks (K 224) -> RK 2
ROWS, BLOCKS, L = 300, 7, 2


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _distinct_exponents() -> torch.Tensor:
    index = torch.arange(L * ROWS * BLOCKS).reshape(L, ROWS, BLOCKS)
    return (index % 251).to(torch.uint8)  # 251 prime: neighbours differ


def test_sf_layout_is_the_references_allocation():
    exponents = _distinct_exponents()
    got = mx.sf_from_block_exponents(exponents)
    want = bs.sf_from_exponents(exponents, BLOCKS * mx.SF_VEC)
    assert got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(bs.sf_storage(got), bs.sf_storage(want))  # padding included
    flat = bs.sf_storage(got)
    for r, kb, l in [(0, 0, 0), (37, 5, 1), (299, 6, 0), (128, 4, 1)]:
        assert flat[bs.sf_offset(r, kb, l, ROWS, BLOCKS * mx.SF_VEC)] == exponents[l, r, kb]


def test_block_exponents_reads_back_what_the_layout_holds():
    exponents = _distinct_exponents()
    sf = bs.sf_from_exponents(exponents, BLOCKS * mx.SF_VEC).view(torch.float8_e8m0fnu)
    assert torch.equal(mx.block_exponents(sf, ROWS, BLOCKS), exponents)


def test_block_exponents_refuses_a_wrong_shape():
    with pytest.raises(ValueError, match=r"sf: got shape \(32, 4, 3, 4, 2, 2\), need"):
        mx.block_exponents(mx.sf_from_block_exponents(_distinct_exponents()), 400, BLOCKS)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_dequantize_is_the_references_decode(dtype):
    k = BLOCKS * mx.SF_VEC
    values = torch.randn(ROWS, k, L, generator=_generator(0)).mul(8).to(dtype)
    exponents = torch.randint(119, 136, (L, ROWS, BLOCKS), generator=_generator(1))
    sf = bs.sf_from_exponents(exponents.to(torch.uint8), k)
    got = mx.dequantize(values, sf)
    assert got.dtype == torch.float32 and got.shape == (L, ROWS, k)
    assert torch.equal(got.double(), bs.dequantize_operand(values, sf).permute(2, 0, 1))


def test_dequantize_refuses_k_off_the_block_size():
    with pytest.raises(ValueError, match="values: got 40 elements along K, need a multiple of 32"):
        mx.dequantize(torch.zeros(128, 40, 1).to(E4M3), bs.sf_allocate(128, 40))


def test_e8m0_round_up_is_the_references_on_edge_cases():
    specials = [0.0, 1.0, 1.5, 2.0**-126, 2.0**-127, 2.0**-127 + 2.0**-149, 2.0**-149,
                torch.finfo(torch.float32).max, float("inf"), float("nan")]
    x = torch.cat([torch.tensor(specials), torch.rand(4096, generator=_generator(2)) * 1e3])
    assert torch.equal(mx.e8m0_round_up(x).to(torch.uint8), bs.e8m0_round_up(x))


def _d_with_edge_blocks(rows: int, cols: int) -> torch.Tensor:
    """Random fp32 D whose first 32x32 tile is zero, whose row 40 holds amaxes that land
    exactly on powers of two after the scale (448 * 2^k), and with one element 4480 that
    rounds to different bytes in the row and the column order under norm_const 0.1."""
    d = torch.randn(rows, cols, generator=_generator(3)) * torch.exp2(
        torch.randint(-6, 6, (rows, cols // 32), generator=_generator(4)).float()
    ).repeat_interleave(32, dim=1)
    d[:32, :32] = 0
    d[40, ::32] = 448.0 * torch.exp2(torch.arange(cols // 32).float() - 3)
    d[64, 64] = 4480.0
    return d


@pytest.mark.parametrize(("dtype", "norm_const"), [(E4M3, 1.0), (E4M3, 0.1), (E5M2, 3.0)])
def test_quantize_d_is_the_references_quantizer_bit_for_bit(dtype, norm_const):
    ends = [256, 256, 512]  # an empty expert; the dense SFD_col ignores the boundaries
    d = _d_with_edge_blocks(ends[-1], 320)  # 2N = 320: a partial SFD_row atom
    want = bs.quantize_d(d, ends, dtype, norm_const)
    d_row, sfd_row, d_col, sfd_col = mx.quantize_d(d, dtype, torch.tensor([norm_const]))
    assert d_row.dtype == d_col.dtype == dtype
    assert torch.equal(d_row.view(torch.uint8), want.d_row.view(torch.uint8))
    assert torch.equal(d_col.view(torch.uint8), want.d_col.view(torch.uint8))
    for got, expected in ((sfd_row, want.sfd_row), (sfd_col, want.sfd_col)):
        assert got.shape == expected.shape and got.stride() == expected.stride()
        assert torch.equal(bs.sf_storage(got), bs.sf_storage(expected))


def test_quantize_blocks_refuses_a_non_fp8_dtype():
    with pytest.raises(ValueError, match="d_dtype: got torch.bfloat16, need one of"):
        mx.quantize_blocks(torch.zeros(1, 32), torch.bfloat16, torch.ones(1), True)


def test_quantize_operand_round_trips_through_dequantize():
    x = torch.randn(L, ROWS, BLOCKS * mx.SF_VEC, generator=_generator(5))
    q, sf = mx.quantize_operand(x, E4M3)
    assert q.shape == x.shape and q.dtype == E4M3
    assert sf.shape == bs.sf_shape(ROWS, BLOCKS * mx.SF_VEC, L)
    seed_layout = q.permute(1, 2, 0)  # (rows, K, L)
    decoded = mx.dequantize(seed_layout, sf)
    assert torch.equal(decoded.double(), bs.dequantize_operand(seed_layout, sf).permute(2, 0, 1))
    # e4m3's half step is 2^-4 relative: every element within it of x
    assert bool(((decoded - x).abs() <= x.abs() * 2**-4 + 2**-9 * x.abs().amax()).all())
