"""MXFP8 in plain torch, as a Hopper user writes it today (cuBLAS has no MXFP8 GEMM on
sm_90): the seed's swizzled scale-factor (SF) layout, FP8 x E8M0 decode, and the D quantizer
of docs/blockscaled_contract.md in its operation order.

Every function is torch.compile-friendly (no host reads, no data-dependent shapes) and runs
on any device; bench/tests/test_mxfp8_torch.py checks them bit for bit against the CPU
reference (tests/gpu/blockscaled_reference.py). SF tensors here are uint8; the seed's
allocation is their ``.view(torch.float8_e8m0fnu)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SF_VEC = 32  # elements per scale factor
ATOM_ROWS = 128  # rows of one 512-byte SF atom
ATOM_BLOCKS = 4  # 32-element blocks of one SF atom
E8M0_BIAS = 127
E8M0_MAX_FINITE = 0xFE
E8M0_NAN = 0xFF
FLT_MAX = torch.finfo(torch.float32).max
# FP8 dtype -> (largest finite value, the quantizer's f32(1/max): 1/128 for e5m2, as NVIDIA's)
FP8_LIMITS = {torch.float8_e4m3fn: (448.0, 1 / 448), torch.float8_e5m2: (57344.0, 1 / 128)}


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def sf_from_block_exponents(exponents: torch.Tensor, fill: int = E8M0_NAN) -> torch.Tensor:
    """(L, rows, blocks) uint8 -> the seed's SF allocation (32, 4, RR, 4, RK, L): a
    contiguous (L, RR, RK, 32, 4, 4) array permuted by (3, 4, 1, 5, 2, 0), padding ``fill``."""
    l, rows, blocks = exponents.shape
    rr, rk = _ceil_div(rows, ATOM_ROWS), _ceil_div(blocks, ATOM_BLOCKS)
    padding = (0, rk * ATOM_BLOCKS - blocks, 0, rr * ATOM_ROWS - rows)
    padded = F.pad(exponents, padding, value=fill)
    # padded[l, rr, q, i, rk, j] is row rr*128 + q*32 + i, block rk*4 + j; stored [l, rr, rk, i, q, j]
    storage = padded.view(l, rr, 4, 32, rk, ATOM_BLOCKS).permute(0, 1, 4, 3, 2, 5).contiguous()
    return storage.permute(3, 4, 1, 5, 2, 0)


def block_exponents(sf: torch.Tensor, rows: int, blocks: int) -> torch.Tensor:
    """The (L, rows, blocks) uint8 exponents an SF allocation holds (padding dropped)."""
    _, _, rr, _, rk, l = sf.shape
    if rr != _ceil_div(rows, ATOM_ROWS) or rk != _ceil_div(blocks, ATOM_BLOCKS):
        raise ValueError(
            f"sf: got shape {tuple(sf.shape)}, need (32, 4, {_ceil_div(rows, ATOM_ROWS)}, 4, "
            f"{_ceil_div(blocks, ATOM_BLOCKS)}, L) for {rows} rows of {blocks} blocks"
        )
    per_row = sf.view(torch.uint8).permute(5, 2, 1, 0, 4, 3).reshape(l, rr * ATOM_ROWS, rk * 4)
    return per_row[:, :rows, :blocks]


def decode_e8m0(exponents: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 -> fp32 2^(b - 127); 255 is NaN."""
    scale = torch.exp2(exponents.float() - E8M0_BIAS)
    return torch.where(exponents == E8M0_NAN, torch.nan, scale)


def dequantize(values: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """FP8 (rows, K, L) (A, B or D in the seed's layouts) with its SF allocation -> fp32
    (L, rows, K): value * 2^(SF(row, k // 32, l) - 127), exact."""
    rows, k, l = values.shape
    if k % SF_VEC:
        raise ValueError(f"values: got {k} elements along K, need a multiple of {SF_VEC}")
    scale = decode_e8m0(block_exponents(sf, rows, k // SF_VEC))
    blocks = values.permute(2, 0, 1).float().reshape(l, rows, k // SF_VEC, SF_VEC)
    return (blocks * scale.unsqueeze(-1)).reshape(l, rows, k)


def e8m0_round_up(x: torch.Tensor) -> torch.Tensor:
    """fp32 x >= 0 -> int32 E8M0 byte of the smallest 2^e >= x, on the fp32 bits: NaN ->
    255, inf -> 254, never above 254 (the contract's rule; Hopper has no E8M0 convert)."""
    bits = x.view(torch.int32)
    exponent, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    subnormal_at_most_half = (exponent == 0) & (mantissa <= 0x400000)
    up = (mantissa > 0) & (exponent != E8M0_MAX_FINITE) & ~subnormal_at_most_half
    byte = torch.where(torch.isinf(x), E8M0_MAX_FINITE, exponent + up.int())
    return torch.where(torch.isnan(x), E8M0_NAN, byte)


def quantize_blocks(
    x: torch.Tensor, d_dtype: torch.dtype, norm_const: torch.Tensor, row_order: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (rows, cols) in 1x32 blocks along each row -> (FP8 (rows, cols), uint8 SF
    exponents (rows, cols/32)). ``row_order`` picks the scale's rounding order:
    f32(f32(amax * rcp) * nc) for D_row, f32(amax * f32(rcp * nc)) for D_col."""
    if d_dtype not in FP8_LIMITS:
        raise ValueError(f"d_dtype: got {d_dtype}, need one of {', '.join(map(str, FP8_LIMITS))}")
    largest, rcp = FP8_LIMITS[d_dtype]
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // SF_VEC, SF_VEC)
    amax = blocks.abs().amax(dim=2)
    scale = (amax * rcp) * norm_const if row_order else amax * (rcp * norm_const)
    byte = e8m0_round_up(scale)
    inverse = torch.clamp(norm_const * torch.exp2((E8M0_BIAS - byte).float()), max=FLT_MAX)
    inverse = torch.where(byte == E8M0_NAN, torch.nan, inverse)
    q = (blocks * inverse.unsqueeze(2)).clamp(-largest, largest).to(d_dtype)
    return q.reshape(rows, cols), byte.to(torch.uint8)


def quantize_d(
    d: torch.Tensor, d_dtype: torch.dtype, norm_const: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp32 D (M, 2N) -> (D_row, SFD_row, D_col, SFD_col): D_row/D_col (M, 2N) FP8 quantized
    in 1x32 blocks along rows / 32x1 blocks along M, their SFDs uint8 in the seed's dense
    layouts (SFD_col: rows = the 2N columns, blocks along M)."""
    d_row, row_bytes = quantize_blocks(d, d_dtype, norm_const, row_order=True)
    d_col_t, col_bytes = quantize_blocks(d.t(), d_dtype, norm_const, row_order=False)
    return (
        d_row,
        sf_from_block_exponents(row_bytes.unsqueeze(0)),
        d_col_t.t().contiguous(),
        sf_from_block_exponents(col_bytes.unsqueeze(0)),
    )


def quantize_operand(x: torch.Tensor, ab_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 or bf16 (L, rows, K) -> (FP8 (L, rows, K), uint8 SF (32, 4, RR, 4, RK, L)): an
    MXFP8 operand (norm_const 1, so it decodes as value * 2^(SF - 127))."""
    l, rows, k = x.shape
    one = torch.ones(1, dtype=torch.float32, device=x.device)
    q, block_bytes = quantize_blocks(x.float().reshape(l * rows, k), ab_dtype, one, row_order=True)
    return q.view(l, rows, k), sf_from_block_exponents(block_bytes.view(l, rows, -1))
