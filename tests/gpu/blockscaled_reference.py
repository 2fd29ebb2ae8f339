"""Reference of the block-scaled contract (docs/blockscaled_contract.md): MXFP8 and NVFP4.

A ``ScaleFormat`` is one kind of scale factor: E8M0 bytes per 32 elements (MXFP8) or E4M3
bytes per 16 elements (NVFP4), with its decode and the fp32 -> byte encode the D quantizer
uses (E8M0 round-up, E4M3 round-to-nearest-even satfinite). Everything below takes one
(default E8M0_X32, the MXFP8 recipe), so one path serves both:

- the seed's scale-factor layout: ``sf_offset`` and the SF tensors built from and read back
  to per-block scale bytes (SFA, SFB, SFD_row, SFD_col and discrete_col_sfd's SFD_col), for
  sf_vec_size 32 or 16;
- scale decode and encode; operand decode to float64: FP8, or FP4 E2M1 two per byte
  (float4_e2m1fn_x2 / uint8: element 2j in the low nibble, 2j+1 in the high one), times
  each block's scale;
- the float64 op on the decoded operands (reusing reference.py's GEMM and activations),
  dbias from the unquantized D and amax (per expert max |dgate|, max |dup|);
- an fp32 emulation of the D quantizer, in the contract's operation order: bit-exact for
  E8M0 scales; for E4M3 scales the kernel's reciprocal (rcp.approx) is emulated by the
  correctly rounded one.

Everything runs on the CPU (or any torch device). SF tensors are uint8 views; a caller that
needs the scale dtype takes ``.view(scales.dtype)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from reference import Expected, dglu_backward

SF_VEC = 32  # elements per scale factor (MXFP8); NVFP4 has 16
ATOM_ROWS = 128  # rows covered by one 512-byte SF atom
ATOM_BLOCKS = 4  # scale blocks (of sf_vec_size elements) covered by one SF atom
ATOM_BYTES = 512
E8M0_BIAS = 127
E8M0_NAN = 0xFF  # also NaN as an E4M3 (e4m3fn) byte: the SF poison and padding fill for both
E8M0_MAX_FINITE = 0xFE
E4M3_MAX = 448.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; bit 3 is the sign
FP4_DTYPES = (torch.float4_e2m1fn_x2, torch.uint8)  # two E2M1 per byte
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


def sf_shape(rows: int, kc: int, l: int = 1, vec: int = SF_VEC) -> tuple[int, ...]:
    """The seed's logical SF shape (32, 4, ceil(rows/128), 4, ceil(ceil(kc/vec)/4), L),
    vec = sf_vec_size."""
    return (32, 4, _ceil_div(rows, ATOM_ROWS), 4, _ceil_div(_ceil_div(kc, vec), ATOM_BLOCKS), l)


def sf_strides(rows: int, kc: int, l: int = 1, vec: int = SF_VEC) -> tuple[int, ...]:
    """Byte strides of the permuted allocation: (16, 4, RK*512, 1, 512, RR*RK*512)."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc, l, vec)
    return (16, 4, rk * ATOM_BYTES, 1, ATOM_BYTES, rr * rk * ATOM_BYTES)


def sf_offset(row: int, k_block: int, l: int, rows: int, kc: int, vec: int = SF_VEC) -> int:
    """Byte offset of the scale of (row, vec-element block k_block, batch l) in the allocation."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc, 1, vec)
    atom = (l * rr + row // ATOM_ROWS) * rk + k_block // ATOM_BLOCKS
    return atom * ATOM_BYTES + (row % 32) * 16 + ((row // 32) % 4) * 4 + k_block % ATOM_BLOCKS


def sf_allocate(rows: int, kc: int, l: int = 1, fill: int = E8M0_NAN, vec: int = SF_VEC) -> torch.Tensor:
    """A uint8 SF tensor in the seed's shape and strides, every byte (padding too) ``fill``."""
    _, _, rr, _, rk, _ = sf_shape(rows, kc, l, vec)
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


def sf_from_exponents(exponents: torch.Tensor, kc: int, fill: int = E8M0_NAN, vec: int = SF_VEC) -> torch.Tensor:
    """SF tensor holding ``exponents`` (L, rows, ceil(kc/vec)) uint8 scale bytes (E8M0
    exponents, or E4M3 codes with vec 16)."""
    l, rows, blocks = exponents.shape
    if blocks != _ceil_div(kc, vec):
        raise ValueError(f"exponents: got {blocks} blocks per row, need ceil({kc}/{vec})")
    sf = sf_allocate(rows, kc, l, fill, vec)
    _, _, rr, _, rk, _ = sf.shape
    padded = _padded_blocks(exponents.to(torch.uint8), rr, rk, fill)
    # padded[l, rr, q, i, rk, j]: row rr*128 + q*32 + i, block rk*4 + j
    sf.copy_(padded.reshape(l, rr, 4, 32, rk, 4).permute(3, 2, 1, 5, 4, 0))
    return sf


def sf_to_exponents(sf: torch.Tensor, rows: int, kc: int, vec: int = SF_VEC) -> torch.Tensor:
    """(L, rows, ceil(kc/vec)) uint8 bytes of an SF tensor (inverse of sf_from_exponents)."""
    expected = sf_shape(rows, kc, sf.shape[-1], vec)
    if tuple(sf.shape) != expected:
        raise ValueError(f"sf: got shape {tuple(sf.shape)}, need {expected} for ({rows}, {kc}), sf_vec_size {vec}")
    _, _, rr, _, rk, l = sf.shape
    padded = sf.view(torch.uint8).permute(5, 2, 1, 0, 4, 3).reshape(l, rr * ATOM_ROWS, rk * 4)
    return padded[:, :rows, : _ceil_div(kc, vec)].contiguous()


def _expert_block_base(width: int, start: int, vec: int) -> int:
    """Byte where the discrete SFD_col block of the expert whose rows start at ``start``
    begins: RN = ceil(width/128) atoms per 4*vec rows before it (RN*(s_g/128)*512 for vec 32;
    the blocks tile the allocation, which for vec 16 is the natural extension)."""
    return _ceil_div(width, ATOM_ROWS) * (start // (vec * ATOM_BLOCKS)) * ATOM_BYTES


def discrete_col_sfd_offset(column: int, row: int, ends: Sequence[int], width: int, vec: int = SF_VEC) -> int:
    """Byte of SFD_col for D column ``column`` and D row ``row`` with discrete_col_sfd=True:
    expert g's own (32, 4, ceil(width/128), 4, G_g/(4*vec)) block at _expert_block_base."""
    start = 0
    for end in ends:
        if start <= row < end:
            return _expert_block_base(width, start, vec) + sf_offset(
                column, (row - start) // vec, 0, width, end - start, vec
            )
        start = end
    raise ValueError(f"row: got {row}, need one below valid_m = {ends[-1]}")


def discrete_col_sfd_to_exponents(
    sf: torch.Tensor, ends: Sequence[int], width: int, vec: int = SF_VEC
) -> torch.Tensor:
    """(1, width, valid_m/vec) uint8 bytes of an SFD_col written with discrete_col_sfd=True
    (inverse of discrete_col_sfd)."""
    flat = sf_storage(sf.view(torch.uint8))
    parts = []
    start = 0
    for end in ends:
        if end > start:
            template = sf_allocate(width, end - start, 1, 0, vec).to(flat.device)
            base = _expert_block_base(width, start, vec)
            sf_storage(template).copy_(flat[base : base + template.numel()])
            parts.append(sf_to_exponents(template, width, end - start, vec))
        start = end
    if not parts:
        return torch.zeros((1, width, 0), dtype=torch.uint8, device=flat.device)
    return torch.cat(parts, dim=2)


def discrete_col_sfd(
    exponents: torch.Tensor, ends: Sequence[int], fill: int = E8M0_NAN, vec: int = SF_VEC
) -> torch.Tensor:
    """SFD_col with discrete_col_sfd=True from (1, 2N, valid_m/vec) column-block bytes: the
    same allocation as the dense SFD_col, each expert's bytes in its own block."""
    _, width, _ = exponents.shape
    sf = sf_allocate(width, ends[-1], 1, fill, vec)
    flat = sf_storage(sf)
    start = 0
    for end in ends:
        if end > start:
            expert = sf_from_exponents(exponents[:, :, start // vec : end // vec], end - start, fill, vec)
            base = _expert_block_base(width, start, vec)
            flat[base : base + expert.numel()] = sf_storage(expert)
        start = end
    return sf


# --- scale formats, FP8 and FP4 decode --------------------------------------------------


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


def e4m3_decode(bytes_: torch.Tensor) -> torch.Tensor:
    """E4M3 (e4m3fn) bytes -> float64 (exact); 0x7F and 0xFF are NaN."""
    return bytes_.view(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)


def e4m3_round_satfinite(x: torch.Tensor) -> torch.Tensor:
    """fp32 x -> E4M3 bytes, round to nearest even, beyond +-448 (and inf) to +-448, NaN kept
    (PTX cvt.rn.satfinite.e4m3x2.f32, how the kernel encodes an E4M3 scale)."""
    if x.dtype != torch.float32:
        raise ValueError(f"x: got {x.dtype}, need torch.float32")
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)


@dataclass(frozen=True)
class ScaleFormat:
    """One kind of block scale factor: its storage dtype, how many elements one byte scales
    (sf_vec_size), its decode to float64 and the fp32 -> byte encode of the D quantizer."""

    name: str
    dtype: torch.dtype
    vec: int
    decode: Callable[[torch.Tensor], torch.Tensor]
    encode: Callable[[torch.Tensor], torch.Tensor]


E8M0_X32 = ScaleFormat("e8m0 per 32 (MXFP8)", torch.float8_e8m0fnu, 32, e8m0_decode, e8m0_round_up)
E4M3_X16 = ScaleFormat("e4m3 per 16 (NVFP4)", torch.float8_e4m3fn, 16, e4m3_decode, e4m3_round_satfinite)


def fp8_decode(values: torch.Tensor) -> torch.Tensor:
    """FP8 tensor (e4m3fn or e5m2) -> float64 (exact)."""
    fp8_format(values.dtype)
    return values.to(torch.float64)


def e2m1_decode(packed: torch.Tensor) -> torch.Tensor:
    """FP4 bytes (float4_e2m1fn_x2 or uint8), shape (..., n) -> float64 (..., 2n): element 2j
    is the low nibble of byte j, element 2j + 1 the high nibble; nibble bit 3 is the sign."""
    b = packed.view(torch.uint8).to(torch.int64)
    nibbles = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)
    table = torch.tensor([*E2M1_MAGNITUDES, *(-v for v in E2M1_MAGNITUDES)], dtype=torch.float64)
    return table.to(packed.device)[nibbles]


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """Float x -> int64 E2M1 codes 0..15, round to nearest with ties to the even code, beyond
    +-6 (and inf) to +-6, the sign kept for -0 (PTX cvt.rn.satfinite.e2m1x2.f32)."""
    if bool(torch.isnan(x).any()):
        raise ValueError("x: got NaN, which E2M1 cannot hold")
    grid = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float64, device=x.device)
    magnitude = x.to(torch.float64).abs().clamp(max=grid[-1])
    low = (torch.searchsorted(grid, magnitude, right=True) - 1).clamp(max=len(grid) - 2)
    below, above = magnitude - grid[low], grid[low + 1] - magnitude
    up = (above < below) | ((above == below) & (low % 2 == 1))
    return (low + up.to(torch.int64)) | (torch.signbit(x).to(torch.int64) << 3)


def e2m1_pack(x: torch.Tensor) -> torch.Tensor:
    """Float (..., 2n) -> (..., n) float4_e2m1fn_x2, two rounded values per byte as
    e2m1_decode reads them (element 2j low nibble)."""
    if x.shape[-1] % 2:
        raise ValueError(f"x: got {x.shape[-1]} values in the last dim, need an even count")
    codes = e2m1_codes(x)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.to(torch.uint8).view(torch.float4_e2m1fn_x2)


def operand_decode(values: torch.Tensor) -> torch.Tensor:
    """A/B values -> float64 (exact): FP8 as stored; FP4 (rows, K/2, L) unpacked to (rows, K, L)."""
    if values.dtype in FP4_DTYPES:
        return e2m1_decode(values.transpose(1, 2)).transpose(1, 2)
    return fp8_decode(values)


def dequantize_operand(values: torch.Tensor, sf: torch.Tensor, scales: ScaleFormat = E8M0_X32) -> torch.Tensor:
    """FP8 (rows, K, L) or FP4 (rows, K/2, L) with its SF tensor -> float64 (rows, K, L):
    each value times the decoded scale of its block, SF(row, k // sf_vec_size, l)."""
    decoded = operand_decode(values)
    rows, k, l = decoded.shape
    per_block = scales.decode(sf_to_exponents(sf, rows, k, scales.vec))  # (L, rows, blocks)
    per_element = per_block.repeat_interleave(scales.vec, dim=2)[:, :, :k].permute(1, 2, 0)
    return decoded * per_element


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
    scales: ScaleFormat = E8M0_X32,
) -> Expected:
    """The op in float64 on decoded operands: A (M, K, 1) and B (N, K, L) FP8, or FP4 packed
    along K ((M, K/2, 1), (N, K/2, L)), with their SF tensors of ``scales``; C (M, 2N, 1) in
    any dtype (FP8 decoded as stored). beta scales C but for dgeglu (C_AS_STORED)."""
    a64, b64 = dequantize_operand(a, sfa, scales), dequantize_operand(b, sfb, scales)
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


def expert_amax(d: torch.Tensor, ends: Sequence[int]) -> torch.Tensor:
    """(L, 2) float64: per expert [max |dgate|, max |dup|] of the unquantized D (valid_m, 2N),
    dgate in D's even 32-column blocks, dup in the odd ones. The kernel atomic-maxes into
    amax, which cuDNN FE's wrapper fills with -inf first: an expert with no rows keeps -inf."""
    rows, width = d.shape
    halves = d.to(torch.float64).abs().reshape(rows, width // 64, 2, 32).transpose(1, 2).reshape(rows, 2, -1)
    result = torch.full((len(ends), 2), -torch.inf, dtype=torch.float64)
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            result[g] = halves[start:end].amax(dim=(0, 2))
        start = end
    return result


# --- the D quantizer (fp32) ---------------------------------------------------------------


def _f32(x: float) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def block_scale_bytes(
    amax: torch.Tensor, fmt: Fp8Format, norm_const: float, row_order: bool, scales: ScaleFormat = E8M0_X32
) -> torch.Tensor:
    """SFD bytes from fp32 block amaxes: the scale encode (E8M0 round-up, E4M3 nearest even)
    of f32(f32(amax*rcp)*nc) (row path) or of f32(amax*f32(rcp*nc)) (column path)."""
    rcp, nc = _f32(fmt.rcp_max), _f32(norm_const)
    x = (amax * rcp) * nc if row_order else amax * (rcp * nc)
    return scales.encode(x)


def fp8_round_satfinite(x: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """fp32 -> FP8 round-to-nearest-even, out-of-range and inf to +-max, NaN kept (PTX
    cvt.rn.satfinite). torch rounds to nearest even but only e4m3fn saturates, so clamp."""
    return x.clamp(-fmt.max_finite, fmt.max_finite).to(fmt.dtype)


def quantize_blocks(
    d: torch.Tensor, fmt: Fp8Format, norm_const: float, row_order: bool, scales: ScaleFormat = E8M0_X32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize fp32 (rows, cols) in 1 x sf_vec_size blocks along each row: (FP8 (rows, cols),
    scale bytes (rows, cols/sf_vec_size))."""
    if d.dtype != torch.float32:
        raise ValueError(f"d: got {d.dtype}, need torch.float32 (the kernel's unquantized D)")
    rows, cols = d.shape
    if cols % scales.vec:
        raise ValueError(f"d: got {cols} elements per block line, need a multiple of {scales.vec}")
    amax = d.reshape(rows, cols // scales.vec, scales.vec).abs().amax(dim=2)
    e = block_scale_bytes(amax, fmt, norm_const, row_order, scales)
    return quantize_with_bytes(d, e, fmt, norm_const, scales), e


def quantizer_scale(block_bytes: torch.Tensor, norm_const: float, scales: ScaleFormat = E8M0_X32) -> torch.Tensor:
    """fp32 s = min(f32(norm_const * f32(1 / scale)), FLT_MAX) of each scale byte (NaN for a
    NaN byte; FLT_MAX for an E4M3 zero): what the quantizer multiplies a block's D by. For
    E8M0 1/scale = 2^(127 - e) is exact; for E4M3 it is the correctly rounded reciprocal
    where the kernel uses rcp.approx, which may differ in the last bit."""
    decoded = scales.decode(block_bytes)
    inverse = (1.0 / decoded).to(torch.float32)  # 1/0 = inf, clamped below
    s = (_f32(norm_const) * inverse).clamp(max=FLT_MAX)
    return torch.where(torch.isnan(decoded), torch.nan, s)


def quantize_with_bytes(
    d: torch.Tensor, block_bytes: torch.Tensor, fmt: Fp8Format, norm_const: float, scales: ScaleFormat = E8M0_X32
) -> torch.Tensor:
    """fp32 D (rows, cols) -> FP8 fp8_round_satfinite(f32(D * s)), s from the given scale
    byte of each 1 x sf_vec_size block along the rows (rows, cols/sf_vec_size)."""
    rows, cols = d.shape
    s = quantizer_scale(block_bytes, norm_const, scales)
    q = fp8_round_satfinite(d.reshape(rows, cols // scales.vec, scales.vec) * s.unsqueeze(2), fmt)
    return q.reshape(rows, cols)


def block_byte_range(
    d: torch.Tensor,
    error: torch.Tensor,
    fmt: Fp8Format,
    norm_const: float,
    row_order: bool,
    scales: ScaleFormat = E8M0_X32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The lowest and highest SFD byte (rows, cols/sf_vec_size) of each block along the rows
    of a D that differs from float64 ``d`` by at most ``error`` per element: the bytes of the
    smallest and largest block amax that allows, as the nearest fp32 below and above.
    The quantizer's byte is monotonic in amax (both encodes are, on bytes of scales >= 0),
    so a kernel computing such a D gives a byte in [low, high]; the two differ only where
    the scale input max|D| * rcp * norm_const lies within the error of a rounding boundary
    (a power of two for E8M0, an E4M3 midpoint for E4M3; elsewhere the byte is exact)."""
    rows, cols = d.shape
    vec = scales.vec
    magnitude = d.to(torch.float64).abs().reshape(rows, cols // vec, vec)
    slack = error.to(torch.float64).reshape(rows, cols // vec, vec)
    low = (magnitude - slack).clamp(min=0).amax(dim=2)
    high = (magnitude + slack).amax(dim=2)
    low32 = _fp32_toward(low, -FLT_MAX)
    high32 = _fp32_toward(high, FLT_MAX)
    return (
        block_scale_bytes(low32, fmt, norm_const, row_order, scales),
        block_scale_bytes(high32, fmt, norm_const, row_order, scales),
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
    row_bytes: torch.Tensor  # (valid_m, 2N/vec): byte of row m, column block j
    col_bytes: torch.Tensor  # (2N, valid_m/vec): byte of column n, row block i
    sfd_row: torch.Tensor
    sfd_col: torch.Tensor
    sfd_col_discrete: torch.Tensor


def quantize_d(
    d: torch.Tensor, ends: Sequence[int], d_dtype: torch.dtype, norm_const: float, scales: ScaleFormat = E8M0_X32
) -> QuantizedD:
    """The kernel's quantizer on fp32 D (valid_m, 2N): both outputs, both SFD_col layouts.
    cuDNN FE 1.32.0 runs it for E8M0 scales only (FP8 A/B and D); with E4M3 scales this is
    its kernel's generic quantizer, which that release's checks never select."""
    fmt = fp8_format(d_dtype)
    if not (norm_const > 0 and norm_const < float("inf")):
        raise ValueError(f"norm_const: got {norm_const}, need a finite value > 0")
    valid_m, width = d.shape
    if valid_m != ends[-1]:
        raise ValueError(f"d: got {valid_m} rows, need valid_m = {ends[-1]}")
    d_row, row_bytes = quantize_blocks(d, fmt, norm_const, True, scales)
    d_col_t, col_bytes = quantize_blocks(d.T.contiguous(), fmt, norm_const, False, scales)
    return QuantizedD(
        d_row=d_row,
        d_col=d_col_t.T.contiguous(),
        row_bytes=row_bytes,
        col_bytes=col_bytes,
        sfd_row=sf_from_exponents(row_bytes.unsqueeze(0), width, vec=scales.vec),
        sfd_col=sf_from_exponents(col_bytes.unsqueeze(0), valid_m, vec=scales.vec),
        sfd_col_discrete=discrete_col_sfd(col_bytes.unsqueeze(0), ends, vec=scales.vec),
    )


def dequantize_d(
    q: torch.Tensor, block_bytes: torch.Tensor, norm_const: float, scales: ScaleFormat = E8M0_X32
) -> torch.Tensor:
    """float64 Dq * scale / norm_const, blocks of sf_vec_size along each row of q (rows, cols)."""
    scale = scales.decode(block_bytes).repeat_interleave(scales.vec, dim=1)
    return fp8_decode(q) * scale / norm_const


def fp8_step(y: torch.Tensor, fmt: Fp8Format) -> torch.Tensor:
    """float64 spacing of the FP8 grid at |y| (in FP8 units): 2^(floor(log2|y|) - mantissa
    bits), at least the subnormal spacing."""
    _, exponent = torch.frexp(y.to(torch.float64).abs())
    binade = torch.clamp(exponent.to(torch.int64) - 1, min=fmt.min_normal_exponent)
    return torch.ldexp(torch.ones_like(binade, dtype=torch.float64), binade - fmt.mantissa_bits)
