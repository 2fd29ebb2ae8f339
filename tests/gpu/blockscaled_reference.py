"""Reference of the block-scaled (MXFP8) contract (docs/blockscaled_contract.md).

- the seed's scale-factor layout: ``sf_offset`` and the SF tensors built from and read back
  to per-block E8M0 exponents (SFA, SFB, SFD_row, SFD_col and discrete_col_sfd's SFD_col);
- E8M0 decode and round-up encode, FP8 decode of A/B with their block scales to float64;
- the float64 op on the decoded operands (reusing reference.py's GEMM and activations) and
  dbias from the unquantized D;
- a bit-exact fp32 emulation of the D quantizer, in the contract's operation order.

Everything runs on the CPU (or any torch device). SF tensors are uint8 views; a caller that
needs the E8M0 dtype takes ``.view(torch.float8_e8m0fnu)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from reference import Expected, dglu_backward

SF_VEC = 32  # elements per scale factor (MXFP8)
ATOM_ROWS = 128  # rows covered by one 512-byte SF atom
ATOM_BLOCKS = 4  # 32-element blocks covered by one SF atom
ATOM_BYTES = 512
E8M0_BIAS = 127
E8M0_NAN = 0xFF
E8M0_MAX_FINITE = 0xFE
FLT_MAX = torch.finfo(torch.float32).max

# contiguous (L, RR, RK, 32, 4, 4) permuted to the logical (32, 4, RR, 4, RK, L), and back
_TO_LOGICAL = (3, 4, 1, 5, 2, 0)
_TO_STORAGE = (5, 2, 4, 0, 1, 3)


@dataclass(frozen=True)
class Fp8Format:
    """One FP8 storage dtype and the constants the quantizer uses with it."""

    dtype: torch.dtype
    max_finite: float
    mantissa_bits: int
    min_normal_exponent: int
    rcp_max: float  # f32(1/max) in the quantizer's scale: 1/448 for e4m3, 1/128 for e5m2


FP8_FORMATS: dict[torch.dtype, Fp8Format] = {
    torch.float8_e4m3fn: Fp8Format(torch.float8_e4m3fn, 448.0, 3, -6, 1 / 448),
    torch.float8_e5m2: Fp8Format(torch.float8_e5m2, 57344.0, 2, -14, 1 / 128),
}


def fp8_format(dtype: torch.dtype) -> Fp8Format:
    """The Fp8Format of ``dtype``; a clear error for anything else."""
    if dtype not in FP8_FORMATS:
        raise ValueError(f"d_dtype: got {dtype}, need one of {sorted(map(str, FP8_FORMATS))}")
    return FP8_FORMATS[dtype]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- scale-factor layout ---------------------------------------------------------------


def sf_shape(rows: int, kc: int, l: int = 1) -> tuple[int, ...]:
    """The seed's logical SF shape (32, 4, ceil(rows/128), 4, ceil(ceil(kc/32)/4), L)."""
    return (32, 4, _ceil_div(rows, ATOM_ROWS), 4, _ceil_div(_ceil_div(kc, SF_VEC), ATOM_BLOCKS), l)


def sf_strides(rows: int, kc: int, l: int = 1) -> tuple[int, ...]:
    """Byte strides of the permuted allocation: (16, 4, RK*512, 1, 512, RR*RK*512)."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc, l)
    return (16, 4, rk * ATOM_BYTES, 1, ATOM_BYTES, rr * rk * ATOM_BYTES)


def sf_offset(row: int, k_block: int, l: int, rows: int, kc: int) -> int:
    """Byte offset of the scale of (row, 32-block k_block, batch l) in the allocation."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc)
    atom = (l * rr + row // ATOM_ROWS) * rk + k_block // ATOM_BLOCKS
    return atom * ATOM_BYTES + (row % 32) * 16 + ((row // 32) % 4) * 4 + k_block % ATOM_BLOCKS


def sf_allocate(rows: int, kc: int, l: int = 1, fill: int = E8M0_NAN) -> torch.Tensor:
    """A uint8 SF tensor in the seed's shape and strides, every byte (padding too) ``fill``."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc, l)
    storage = torch.full((l, rr, rk, 32, 4, 4), fill, dtype=torch.uint8)
    return storage.permute(_TO_LOGICAL)


def sf_storage(sf: torch.Tensor) -> torch.Tensor:
    """The allocation's bytes in memory order (flat); ``sf_offset`` indexes it."""
    storage = sf.permute(_TO_STORAGE)
    if not storage.is_contiguous():
        raise ValueError(f"sf: strides {sf.stride()} are not the seed's permuted allocation")
    return storage.reshape(-1)


def _padded_blocks(exponents: torch.Tensor, rr: int, rk: int, fill: int) -> torch.Tensor:
    """(L, rows, blocks) -> (L, rr*128, rk*4), padding filled."""
    l, rows, blocks = exponents.shape
    padded = torch.full((l, rr * ATOM_ROWS, rk * ATOM_BLOCKS), fill, dtype=torch.uint8)
    padded[:, :rows, :blocks] = exponents
    return padded


def sf_from_exponents(exponents: torch.Tensor, kc: int, fill: int = E8M0_NAN) -> torch.Tensor:
    """SF tensor holding ``exponents`` (L, rows, ceil(kc/32)) uint8 E8M0 bytes."""
    l, rows, blocks = exponents.shape
    if blocks != _ceil_div(kc, SF_VEC):
        raise ValueError(f"exponents: got {blocks} blocks per row, need ceil({kc}/32)")
    sf = sf_allocate(rows, kc, l, fill)
    _, _, rr, _, rk, _ = sf.shape
    padded = _padded_blocks(exponents.to(torch.uint8), rr, rk, fill)
    # padded[l, rr, q, i, rk, j]: row rr*128 + q*32 + i, block rk*4 + j
    sf.copy_(padded.reshape(l, rr, 4, 32, rk, 4).permute(3, 2, 1, 5, 4, 0))
    return sf


def sf_to_exponents(sf: torch.Tensor, rows: int, kc: int) -> torch.Tensor:
    """(L, rows, ceil(kc/32)) uint8 bytes of an SF tensor (inverse of sf_from_exponents)."""
    expected = sf_shape(rows, kc, sf.shape[-1])
    if tuple(sf.shape) != expected:
        raise ValueError(f"sf: got shape {tuple(sf.shape)}, need {expected} for ({rows}, {kc})")
    _, _, rr, _, rk, l = sf.shape
    padded = sf.view(torch.uint8).permute(5, 2, 1, 0, 4, 3).reshape(l, rr * ATOM_ROWS, rk * 4)
    return padded[:, :rows, : _ceil_div(kc, SF_VEC)].contiguous()


def discrete_col_sfd_offset(column: int, row: int, ends: Sequence[int], width: int) -> int:
    """Byte of SFD_col for D column ``column`` and D row ``row`` with discrete_col_sfd=True:
    expert g's own (32, 4, ceil(width/128), 4, G_g/128) block at byte RN*(s_g/128)*512."""
    start = 0
    for end in ends:
        if start <= row < end:
            rn = _ceil_div(width, ATOM_ROWS)
            return rn * (start // ATOM_ROWS) * ATOM_BYTES + sf_offset(
                column, (row - start) // SF_VEC, 0, width, end - start
            )
        start = end
    raise ValueError(f"row: got {row}, need one below valid_m = {ends[-1]}")


def discrete_col_sfd_to_exponents(sf: torch.Tensor, ends: Sequence[int], width: int) -> torch.Tensor:
    """(1, width, valid_m/32) uint8 bytes of an SFD_col written with discrete_col_sfd=True
    (inverse of discrete_col_sfd)."""
    flat = sf_storage(sf.view(torch.uint8))
    parts = []
    start = 0
    for end in ends:
        if end > start:
            template = sf_allocate(width, end - start, 1, 0).to(flat.device)
            base = _ceil_div(width, ATOM_ROWS) * (start // ATOM_ROWS) * ATOM_BYTES
            sf_storage(template).copy_(flat[base : base + template.numel()])
            parts.append(sf_to_exponents(template, width, end - start))
        start = end
    if not parts:
        return torch.zeros((1, width, 0), dtype=torch.uint8, device=flat.device)
    return torch.cat(parts, dim=2)


def discrete_col_sfd(exponents: torch.Tensor, ends: Sequence[int], fill: int = E8M0_NAN) -> torch.Tensor:
    """SFD_col with discrete_col_sfd=True from (1, 2N, valid_m/32) column-block bytes: the
    same allocation as the dense SFD_col, each expert's bytes in its own block."""
    _, width, _ = exponents.shape
    sf = sf_allocate(width, ends[-1], 1, fill)
    flat = sf_storage(sf)
    start = 0
    for end in ends:
        if end > start:
            expert = sf_from_exponents(exponents[:, :, start // SF_VEC : end // SF_VEC], end - start, fill)
            base = _ceil_div(width, ATOM_ROWS) * (start // ATOM_ROWS) * ATOM_BYTES
            flat[base : base + expert.numel()] = sf_storage(expert)
        start = end
    return sf


# --- E8M0 and FP8 decode -----------------------------------------------------------------


def e8m0_decode(bytes_: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> float64 2^(b-127); 255 is NaN."""
    b = bytes_.view(torch.uint8).to(torch.int64)
    value = torch.ldexp(torch.ones_like(b, dtype=torch.float64), b - E8M0_BIAS)
    return torch.where(b == E8M0_NAN, torch.nan, value)


def e8m0_round_up(x: torch.Tensor) -> torch.Tensor:
    """fp32 x >= 0 (or NaN, inf) -> the E8M0 byte of the smallest 2^e >= x, on fp32 bits:
    NaN -> 0xFF, inf -> 0xFE, 0 -> 0, never above 0xFE (no rounding into NaN)."""
    if x.dtype != torch.float32:
        raise ValueError(f"x: got {x.dtype}, need torch.float32")
    bits = x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if bool((bits >> 31).any()):
        raise ValueError("x: got a negative value; the scale is max|D| * rcp * norm_const >= 0")
    exponent, mantissa = bits >> 23, bits & 0x7FFFFF
    up = (mantissa > 0) & (exponent != E8M0_MAX_FINITE) & ~((exponent == 0) & (mantissa <= 0x400000))
    result = exponent + up.to(torch.int64)
    result = torch.where(torch.isinf(x), E8M0_MAX_FINITE, result)
    result = torch.where(torch.isnan(x), E8M0_NAN, result)
    return result.to(torch.uint8)


def fp8_decode(values: torch.Tensor) -> torch.Tensor:
    """FP8 tensor (e4m3fn or e5m2) -> float64 (exact)."""
    fp8_format(values.dtype)
    return values.to(torch.float64)


def dequantize_operand(values: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """fp8 (rows, K, L) with its SF tensor -> float64 value * 2^(SF(row, k//32, l) - 127)."""
    rows, k, l = values.shape
    scales = e8m0_decode(sf_to_exponents(sf, rows, k))  # (L, rows, blocks)
    per_element = scales.repeat_interleave(SF_VEC, dim=2)[:, :, :k].permute(1, 2, 0)
    return fp8_decode(values) * per_element


# --- the float64 op -----------------------------------------------------------------------


# The block-scaled dGeGLU consumes the saved C directly and ignores beta (the seed); every
# other activation's X is beta * C, as in the BF16 contract.
C_AS_STORED = frozenset({"dgeglu"})


def blockscaled_dglu_backward(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    c: torch.Tensor,
    ends: Sequence[int],
    alpha: torch.Tensor,
    beta: torch.Tensor,
    prob: torch.Tensor,
    act_func: str,
    act_params: Mapping[str, float],
) -> Expected:
    """The op in float64 on decoded operands: A (M, K, 1) and B (N, K, L) FP8 with their SF
    tensors, C (M, 2N, 1) in any dtype (FP8 decoded as stored). beta scales C but for
    dgeglu (C_AS_STORED)."""
    a64, b64 = dequantize_operand(a, sfa), dequantize_operand(b, sfb)
    c64 = c.reshape(c.shape[0], -1).to(torch.float64)
    return dglu_backward(
        a64, b64, c64, ends, alpha, beta, prob, act_func, act_params, c_scaled_by_beta=act_func not in C_AS_STORED
    )


def dbias(d: torch.Tensor, ends: Sequence[int]) -> torch.Tensor:
    """(L, 2N) float64: per expert the column sums of the unquantized D (valid_m, 2N)."""
    sums = torch.zeros((len(ends), d.shape[1]), dtype=torch.float64)
    start = 0
    for g, end in enumerate(ends):
        sums[g] = d[start:end].to(torch.float64).sum(0)
        start = end
    return sums


# --- the D quantizer (bit-exact fp32) ---------------------------------------------------


def _f32(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def block_scale_bytes(amax: torch.Tensor, fmt: Fp8Format, norm_const: float, row_order: bool) -> torch.Tensor:
    """E8M0 SFD bytes from fp32 block amaxes: round-up of f32(f32(amax*rcp)*nc) (row path)
    or of f32(amax*f32(rcp*nc)) (column path)."""
    rcp, nc = _f32(fmt.rcp_max), _f32(norm_const)
    x = (amax * rcp) * nc if row_order else amax * (rcp * nc)
    return e8m0_round_up(x)


def fp8_round_satfinite(x: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """fp32 -> FP8 round-to-nearest-even, out-of-range and inf to +-max, NaN kept (PTX
    cvt.rn.satfinite). torch rounds to nearest even but only e4m3fn saturates, so clamp."""
    return x.clamp(-fmt.max_finite, fmt.max_finite).to(fmt.dtype)


def quantize_blocks(
    d: torch.Tensor, fmt: Fp8Format, norm_const: float, row_order: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize fp32 (rows, cols) in 1x32 blocks along each row: (FP8 (rows, cols),
    E8M0 bytes (rows, cols/32))."""
    if d.dtype != torch.float32:
        raise ValueError(f"d: got {d.dtype}, need torch.float32 (the kernel's unquantized D)")
    rows, cols = d.shape
    if cols % SF_VEC:
        raise ValueError(f"d: got {cols} elements per block line, need a multiple of {SF_VEC}")
    amax = d.reshape(rows, cols // SF_VEC, SF_VEC).abs().amax(dim=2)
    e = block_scale_bytes(amax, fmt, norm_const, row_order)
    return quantize_with_bytes(d, e, fmt, norm_const), e


def quantizer_scale(block_bytes: torch.Tensor, norm_const: float) -> torch.Tensor:
    """fp32 s = min(f32(norm_const * 2^(127 - e)), FLT_MAX) of each E8M0 byte e (NaN for 0xFF):
    what the quantizer multiplies a block's D by."""
    e = block_bytes.view(torch.uint8).to(torch.int64)
    inverse = torch.ldexp(torch.ones_like(e, dtype=torch.float64), E8M0_BIAS - e)
    s = (_f32(norm_const) * inverse.to(torch.float32)).clamp(max=FLT_MAX)
    return torch.where(e == E8M0_NAN, torch.nan, s)


def quantize_with_bytes(
    d: torch.Tensor, block_bytes: torch.Tensor, fmt: Fp8Format, norm_const: float
) -> torch.Tensor:
    """fp32 D (rows, cols) -> FP8 fp8_round_satfinite(f32(D * s)), s from the given E8M0 byte
    of each 1x32 block along the rows (rows, cols/32)."""
    rows, cols = d.shape
    s = quantizer_scale(block_bytes, norm_const)
    q = fp8_round_satfinite(d.reshape(rows, cols // SF_VEC, SF_VEC) * s.unsqueeze(2), fmt)
    return q.reshape(rows, cols)


def block_byte_range(
    d: torch.Tensor, error: torch.Tensor, fmt: Fp8Format, norm_const: float, row_order: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lowest and highest SFD byte (rows, cols/32) of each 1x32 block along the rows of
    a D that differs from float64 ``d`` by at most ``error`` per element: the bytes of the
    smallest and largest block amax that allows, as the nearest fp32 below and above.
    The quantizer's byte is monotonic in amax, so a kernel computing such a D gives a byte
    in [low, high]; the two differ only where the scale input max|D| * rcp * norm_const
    lies within the error of a power of two (elsewhere the byte is exact)."""
    rows, cols = d.shape
    magnitude = d.to(torch.float64).abs().reshape(rows, cols // SF_VEC, SF_VEC)
    slack = error.to(torch.float64).reshape(rows, cols // SF_VEC, SF_VEC)
    low = (magnitude - slack).clamp(min=0).amax(dim=2)
    high = (magnitude + slack).amax(dim=2)
    low32 = _fp32_toward(low, -FLT_MAX)
    high32 = _fp32_toward(high, FLT_MAX)
    return (
        block_scale_bytes(low32, fmt, norm_const, row_order),
        block_scale_bytes(high32, fmt, norm_const, row_order),
    )


def _fp32_toward(x: torch.Tensor, limit: float) -> torch.Tensor:
    """float64 x as fp32, rounded toward ``limit`` (-FLT_MAX: down, FLT_MAX: up); >= 0 kept."""
    nearest = x.to(torch.float32)
    past = (nearest.double() > x) if limit < 0 else (nearest.double() < x)
    stepped = torch.nextafter(nearest, torch.full_like(nearest, limit))
    result = torch.where(past, stepped, nearest)
    return result.clamp(min=0) if limit < 0 else result


@dataclass(frozen=True)
class QuantizedD:
    """D_row and D_col (valid_m, 2N) FP8 and their SFD tensors (uint8, the seed's layouts),
    with the per-block bytes they were built from."""

    d_row: torch.Tensor
    d_col: torch.Tensor
    row_bytes: torch.Tensor  # (valid_m, 2N/32): byte of row m, column block j
    col_bytes: torch.Tensor  # (2N, valid_m/32): byte of column n, row block i
    sfd_row: torch.Tensor
    sfd_col: torch.Tensor
    sfd_col_discrete: torch.Tensor


def quantize_d(d: torch.Tensor, ends: Sequence[int], d_dtype: torch.dtype, norm_const: float) -> QuantizedD:
    """The kernel's quantizer on fp32 D (valid_m, 2N): both outputs, both SFD_col layouts."""
    fmt = fp8_format(d_dtype)
    if not (norm_const > 0 and norm_const < float("inf")):
        raise ValueError(f"norm_const: got {norm_const}, need a finite value > 0")
    valid_m, width = d.shape
    if valid_m != ends[-1]:
        raise ValueError(f"d: got {valid_m} rows, need valid_m = {ends[-1]}")
    d_row, row_bytes = quantize_blocks(d, fmt, norm_const, row_order=True)
    d_col_t, col_bytes = quantize_blocks(d.T.contiguous(), fmt, norm_const, row_order=False)
    return QuantizedD(
        d_row=d_row,
        d_col=d_col_t.T.contiguous(),
        row_bytes=row_bytes,
        col_bytes=col_bytes,
        sfd_row=sf_from_exponents(row_bytes.unsqueeze(0), width),
        sfd_col=sf_from_exponents(col_bytes.unsqueeze(0), valid_m),
        sfd_col_discrete=discrete_col_sfd(col_bytes.unsqueeze(0), ends),
    )


def dequantize_d(q: torch.Tensor, block_bytes: torch.Tensor, norm_const: float) -> torch.Tensor:
    """float64 Dq * 2^(e-127) / norm_const, blocks of 32 along each row of q (rows, cols)."""
    scale = e8m0_decode(block_bytes).repeat_interleave(SF_VEC, dim=1)
    return fp8_decode(q) * scale / norm_const


def fp8_step(y: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """float64 spacing of the FP8 grid at |y| (in FP8 units): 2^(floor(log2|y|) - mantissa
    bits), at least the subnormal spacing."""
    _, exponent = torch.frexp(y.to(torch.float64).abs())
    binade = torch.clamp(exponent.to(torch.int64) - 1, min=fmt.min_normal_exponent)
    return torch.ldexp(torch.ones_like(binade, dtype=torch.float64), binade - fmt.mantissa_bits)
