"""The block-scaled reference (tests/gpu/blockscaled_reference.py) for NVFP4: E2M1 values two
per byte, E4M3 scales per 16 elements in the seed's permuted layout, amax, and the D quantizer
with E4M3 scales, against values worked out by hand; and an emulated NVFP4 kernel (the
reference D rounded to BF16) that passes the GPU D check while each planted layout or rounding
bug fails it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the block-scaled reference needs torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import blockscaled_reference as bs  # noqa: E402
from blockscaled_checks import check_amax  # noqa: E402
from checks import check_d, d_allowed  # noqa: E402
from reference import ACTIVATIONS, dglu_backward  # noqa: E402

NV = bs.E4M3_X16
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FLT_MAX = torch.finfo(torch.float32).max
PARAMS = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0,
          "situ_beta1": 4.0, "situ_beta2": 25.0}


def _bytes(x: torch.Tensor) -> list[int]:
    return x.view(torch.uint8).reshape(-1).tolist()


# --- layout with sf_vec_size 16 ---------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "k_block", "l", "offset"),
    [
        (0, 0, 0, 0),
        (1, 0, 0, 16),  # r % 32 strides 16
        (32, 0, 0, 4),  # (r // 32) % 4 strides 4
        (0, 1, 0, 1),  # 16-block kb % 4 strides 1
        (0, 4, 0, 512),  # next atom along K: 64 elements, not MXFP8's 128
        (128, 0, 0, 2048),  # next 128 rows: RK = 4 atoms further
        (37, 5, 1, 6741),  # atom (1*3 + 0)*4 + 1 = 13: 6656 + 5*16 + 1*4 + 1
        (299, 12, 0, 5812),  # atom 2*4 + 3 = 11: 5632 + 11*16 + 1*4 + 0
    ],
)
def test_sf_offset_by_hand(row: int, k_block: int, l: int, offset: int) -> None:
    # rows 300 -> RR = 3; kc 200 -> 13 blocks of 16 -> RK = 4
    assert bs.sf_offset(row, k_block, l, rows=300, kc=200, vec=16) == offset


def test_sf_shape_and_strides() -> None:
    sf = bs.sf_allocate(300, 200, 2, vec=16)
    assert tuple(sf.shape) == (32, 4, 3, 4, 4, 2) == bs.sf_shape(300, 200, 2, vec=16)
    assert sf.stride() == (16, 4, 2048, 1, 512, 6144) == bs.sf_strides(300, 200, 2, vec=16)


def test_layout_revealing_bytes_land_at_their_offsets() -> None:
    rows, kc, l = 300, 200, 2
    blocks = -(-kc // 16)
    index = torch.arange(l * rows * blocks).reshape(l, rows, blocks)
    scale_bytes = (index % 251).to(torch.uint8)  # no 0xFF: padding stays distinguishable
    sf = bs.sf_from_exponents(scale_bytes, kc, vec=16)
    flat = bs.sf_storage(sf)
    for g, r, kb in ((0, 0, 0), (1, 37, 5), (0, 299, 12), (1, 128, 4), (0, 31, 3)):
        assert int(flat[bs.sf_offset(r, kb, g, rows, kc, vec=16)]) == int(scale_bytes[g, r, kb])
    assert torch.equal(bs.sf_to_exponents(sf, rows, kc, vec=16), scale_bytes)
    assert int((flat == bs.E8M0_NAN).sum()) == flat.numel() - scale_bytes.numel()  # padding: NaN as E4M3 too


def test_the_mxfp8_layout_is_refused_for_nvfp4_bytes() -> None:
    sf = bs.sf_allocate(256, 128, 1, vec=16)  # RK 2
    with pytest.raises(ValueError, match="sf_vec_size 32"):
        bs.sf_to_exponents(sf, 256, 128)  # the MXFP8 reading wants RK 1


def test_discrete_col_sfd_round_trips_with_16_row_blocks() -> None:
    ends, width = [256, 256, 768], 64
    gen = torch.Generator().manual_seed(3)
    scale_bytes = torch.randint(0, 0x7F, (1, width, ends[-1] // 16), generator=gen).to(torch.uint8)
    sf = bs.discrete_col_sfd(scale_bytes, ends, vec=16)
    assert torch.equal(bs.discrete_col_sfd_to_exponents(sf, ends, width, vec=16), scale_bytes)
    flat = bs.sf_storage(sf)
    # expert 2 starts at row 256: expert 0's 256 rows take RN * 256/64 = 4 atoms before it
    assert bs.discrete_col_sfd_offset(5, 256 + 16 * 3, ends, width, vec=16) == 2048 + 5 * 16 + 3
    assert int(flat[2048 + 5 * 16 + 3]) == int(scale_bytes[0, 5, 256 // 16 + 3])


# --- E2M1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("byte", "values"),
    [
        (0x00, (0.0, 0.0)),
        (0x21, (0.5, 1.0)),  # low nibble first
        (0x12, (1.0, 0.5)),
        (0x7F, (-6.0, 6.0)),
        (0x53, (1.5, 3.0)),
        (0xC6, (4.0, -2.0)),
    ],
)
def test_e2m1_decode_by_hand(byte: int, values: tuple[float, float]) -> None:
    got = bs.e2m1_decode(torch.tensor([byte], dtype=torch.uint8).view(torch.float4_e2m1fn_x2))
    assert got.tolist() == list(values)


def test_e2m1_negative_zero_keeps_its_sign() -> None:
    got = bs.e2m1_decode(torch.tensor([0x80], dtype=torch.uint8))
    assert got.tolist() == [0.0, 0.0] and torch.signbit(got).tolist() == [False, True]


@pytest.mark.parametrize(
    ("x", "code"),
    [
        (0.25, 0),  # tie 0 / 0.5 -> even code 0
        (0.2, 0),
        (0.3, 1),
        (0.75, 2),  # tie 0.5 / 1 -> code 2
        (1.25, 2),  # tie 1 / 1.5 -> code 2
        (1.75, 4),  # tie 1.5 / 2 -> code 4
        (2.5, 4),  # tie 2 / 3 -> code 4
        (3.5, 6),  # tie 3 / 4 -> code 6
        (5.0, 6),  # tie 4 / 6 -> code 6
        (5.5, 7),
        (7.0, 7),  # beyond 6 saturates
        (float("inf"), 7),
        (-0.0, 8),
        (-2.9, 13),  # -3
        (-100.0, 15),
    ],
)
def test_e2m1_rounds_to_nearest_even_and_saturates(x: float, code: int) -> None:
    assert int(bs.e2m1_codes(torch.tensor([x], dtype=torch.float32))[0]) == code


def test_e2m1_codes_match_a_brute_force_nearest_even() -> None:
    grid = torch.arange(-8 * 64, 8 * 64 + 1, dtype=torch.float64) / 64  # every 1/64 in [-8, 8]
    table = bs.e2m1_decode(torch.arange(256, dtype=torch.uint8)).reshape(-1, 2)[:16, 0]  # codes 0..15
    for x, code in zip(grid.tolist(), bs.e2m1_codes(grid).tolist()):
        distance = [abs(min(max(x, -6.0), 6.0) - float(v)) for v in table]
        best = min(distance)
        sign = 8 if x < 0 else 0
        candidates = [c for c, d in enumerate(distance) if d == best and c & 8 == sign]
        want = min(candidates, key=lambda c: (c % 2, c)) if candidates else sign  # ties: even code
        assert code == want, x


def test_e2m1_pack_round_trips_every_byte_and_puts_element_0_low() -> None:
    every = torch.arange(256, dtype=torch.uint8)
    assert _bytes(bs.e2m1_pack(bs.e2m1_decode(every))) == list(range(256))
    assert _bytes(bs.e2m1_pack(torch.tensor([6.0, 0.5]))) == [0x17]
    with pytest.raises(ValueError, match="even count"):
        bs.e2m1_pack(torch.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        bs.e2m1_codes(torch.tensor([float("nan")]))


# --- E4M3 scales ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("x", "byte"),
    [
        (1.0, 0x38),
        (1.0625, 0x38),  # tie 1 / 1.125 -> even mantissa
        (1.1875, 0x3A),  # tie 1.125 / 1.25 -> even mantissa 2
        (448.0, 0x7E),
        (500.0, 0x7E),  # satfinite
        (float("inf"), 0x7E),
        (2.0**-9, 0x01),  # smallest subnormal
        (2.0**-10, 0x00),  # tie 0 / 2^-9 -> 0
        (3 * 2.0**-10, 0x02),  # tie 2^-9 / 2^-8 -> even
        (0.0, 0x00),
        (float("nan"), 0x7F),
    ],
)
def test_e4m3_scale_encode_by_hand(x: float, byte: int) -> None:
    assert _bytes(bs.e4m3_round_satfinite(torch.tensor([x], dtype=torch.float32))) == [byte]


def test_e4m3_decode_by_hand() -> None:
    got = bs.e4m3_decode(torch.tensor([0x38, 0x3A, 0x7E, 0x01, 0x00, 0xB8], dtype=torch.uint8))
    assert got.tolist() == [1.0, 1.25, 448.0, 2.0**-9, 0.0, -1.0]
    assert torch.isnan(bs.e4m3_decode(torch.tensor([0x7F, 0xFF], dtype=torch.uint8))).all()


@pytest.mark.parametrize(
    ("byte", "norm_const", "s"),
    [
        (0x38, 1.0, 1.0),
        (0x30, 3.0, 6.0),  # 3 / 0.5
        (0x3C, 1.0, float(torch.tensor(1 / 1.5, dtype=torch.float32))),  # rounded reciprocal
        (0x00, 1.0, FLT_MAX),  # a zero scale (an all-zero block): 1/0 clamped
        (0x01, 2.0**120, FLT_MAX),  # overflow clamped
    ],
)
def test_e4m3_quantizer_scale_by_hand(byte: int, norm_const: float, s: float) -> None:
    got = bs.quantizer_scale(torch.tensor([byte], dtype=torch.uint8), norm_const, NV)
    assert got.dtype == torch.float32 and float(got[0]) == s
    assert torch.isnan(bs.quantizer_scale(torch.tensor([0x7F], dtype=torch.uint8), 1.0, NV)).all()


def test_e4m3_block_quantized_by_hand() -> None:
    """e5m2 D (rcp 1/128 exact), one 16-element block with amax 160: x = 1.25 -> byte 0x3A,
    s = f32(1/1.25); 160 s = 128 (e5m2 0x58), 40 s = 32 (0x50), 0 stays 0."""
    fmt = bs.fp8_format(E5M2)
    d = torch.zeros(1, 16)
    d[0, 0], d[0, 3] = 160.0, -40.0
    q, block_bytes = bs.quantize_blocks(d, fmt, 1.0, True, NV)
    assert _bytes(block_bytes) == [0x3A]
    assert _bytes(q)[0] == 0x58 and _bytes(q)[3] == 0xD0 and _bytes(q)[1] == 0


def test_e4m3_scales_are_not_e8m0_scales() -> None:
    """The same D under both scale formats: E4M3 bytes are round-to-nearest of x itself, E8M0
    bytes round x up to a power of two, and the codes differ accordingly."""
    gen = torch.Generator().manual_seed(9)
    d = torch.randn(64, 64, generator=gen) * 50
    fmt = bs.fp8_format(E4M3)
    q16, bytes16 = bs.quantize_blocks(d, fmt, 1.0, True, NV)
    q32, bytes32 = bs.quantize_blocks(d, fmt, 1.0, True)
    assert bytes16.shape == (64, 4) and bytes32.shape == (64, 2)
    x = d.reshape(64, 4, 16).abs().amax(2) * torch.tensor(1 / 448, dtype=torch.float32)
    assert torch.equal(bs.e4m3_decode(bytes16), x.to(E4M3).double())
    assert not torch.equal(q16, q32)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("norm_const", [1.0, 0.01, 3.0])
def test_e4m3_scaled_d_within_half_an_fp8_step_or_saturated(dtype: torch.dtype, norm_const: float) -> None:
    """Dq / s is D within half an FP8 step of D * s, except that an E4M3 scale rounded down
    (to nearest, unlike E8M0's round-up) can push a block's largest |D * s| past the FP8
    maximum, where it saturates: that excess is the extra error."""
    gen = torch.Generator().manual_seed(4)
    ends = [256, 512]
    exponent = torch.randint(-12, 12, (512, 128), generator=gen)
    d64 = torch.randn(512, 128, generator=gen, dtype=torch.float64) * torch.ldexp(
        torch.ones(512, 128, dtype=torch.float64), exponent
    )
    d64[0:16, 16:32] = 0.0  # an all-zero block in both directions
    fmt = bs.fp8_format(dtype)
    q = bs.quantize_d(d64.float(), ends, dtype, norm_const, NV)
    saturated = 0
    for codes, block_bytes, d in ((q.d_row, q.row_bytes, d64), (q.d_col.T, q.col_bytes, d64.T)):
        s = bs.quantizer_scale(block_bytes, norm_const, NV).double().repeat_interleave(16, dim=1)
        y = d * s
        excess = (y.abs() - fmt.max_finite).clamp(min=0)
        saturated += int((excess > 0).sum())
        bound = (0.5 * bs.fp8_step(y, fmt) + y.abs() * 2.0**-21 + excess) / s
        assert bool(((bs.fp8_decode(codes) / s - d).abs() <= bound).all())
    if dtype == E4M3:  # the premise: rounding the scale to nearest does saturate some (e5m2's
        assert saturated > 0  # rcp 1/128 leaves it headroom up to 57344)
    assert q.row_bytes[0, 1] == 0 and q.col_bytes[16, 0] == 0  # all-zero blocks: scale byte 0
    assert _bytes(q.d_row[0:16, 16:32]) == [0] * 256


def test_e4m3_byte_range_brackets_the_quantizer_and_layouts_hold() -> None:
    gen = torch.Generator().manual_seed(10)
    ends = [256, 256, 512]
    d = torch.randn(512, 96, generator=gen) * torch.rand(512, 1, generator=gen) * 100
    fmt = bs.fp8_format(E4M3)
    q = bs.quantize_d(d, ends, E4M3, 3.0, NV)
    error = torch.full(d.shape, 1e-3, dtype=torch.float64)
    low, high = bs.block_byte_range(d.double(), error, fmt, 3.0, True, NV)
    assert bool(((low <= q.row_bytes) & (q.row_bytes <= high)).all())
    assert float((low == high).double().mean()) > 0.9  # exact away from the E4M3 midpoints
    assert torch.equal(bs.sf_to_exponents(q.sfd_row, 512, 96, vec=16)[0], q.row_bytes)
    assert torch.equal(bs.sf_to_exponents(q.sfd_col, 96, 512, vec=16)[0], q.col_bytes)
    assert torch.equal(bs.discrete_col_sfd_to_exponents(q.sfd_col_discrete, ends, 96, vec=16)[0], q.col_bytes)


# --- amax ----------------------------------------------------------------------------------


def test_expert_amax_by_hand() -> None:
    ends = [256, 256, 512]
    d = torch.zeros(512, 128, dtype=torch.float64)
    d[3, 5] = -7.0  # expert 0, gate (columns 0..31)
    d[100, 40] = 2.0  # expert 0, up (32..63)
    d[300, 70] = 9.0  # expert 2, gate (64..95)
    d[511, 127] = -4.0  # expert 2, up (96..127)
    assert bs.expert_amax(d, ends).tolist() == [[7.0, 2.0], [-float("inf"), -float("inf")], [9.0, 4.0]]


# --- FP4 operands and the op, and planted bugs ------------------------------------------


def _fp4_operand(rows: int, k: int, l: int, seed: int):
    """(rows, K/2, L) FP4 values, (L, rows, K/16) E4M3 scale bytes in [2^-4, 2^4], the SF tensor."""
    gen = torch.Generator().manual_seed(seed)
    values = bs.e2m1_pack((torch.randn(l, rows, k, generator=gen) * 3)).permute(1, 2, 0)
    scales = torch.exp2(torch.randint(-4, 5, (l, rows, -(-k // 16)), generator=gen).float())
    scales = scales * (1 + torch.randint(0, 8, scales.shape, generator=gen) / 8)
    scale_bytes = bs.e4m3_round_satfinite(scales)
    return values, scale_bytes, bs.sf_from_exponents(scale_bytes, k, vec=16)


def test_dequantize_fp4_operand_uses_each_16_blocks_scale() -> None:
    values, scale_bytes, sf = _fp4_operand(300, 208, 2, seed=5)  # K 208: a partial atom
    got = bs.dequantize_operand(values, sf, NV)
    assert got.shape == (300, 208, 2)
    flat = bs.sf_storage(sf)
    for r, k, l in ((0, 0, 0), (130, 70, 1), (299, 207, 0), (37, 161, 1), (5, 15, 0), (5, 16, 0)):
        byte = values[r, k // 2, l].view(torch.uint8).item()
        code = byte & 0xF if k % 2 == 0 else byte >> 4
        value = bs.E2M1_MAGNITUDES[code & 7] * (-1 if code & 8 else 1)
        scale = float(bs.e4m3_decode(flat[bs.sf_offset(r, k // 16, l, 300, 208, vec=16)]))
        assert float(got[r, k, l]) == value * scale


SHAPE_ENDS, N, K = [256, 256, 512], 64, 96


def _nvfp4_problem(seed: int):
    a, _, sfa = _fp4_operand(512, K, 1, seed)
    b, _, sfb = _fp4_operand(N, K, 3, seed + 1)
    gen = torch.Generator().manual_seed(seed + 2)
    c = torch.randn(512, 2 * N, 1, generator=gen).to(torch.bfloat16)
    alpha, beta = torch.tensor([0.5, 2.0, -1.5]), torch.tensor([1.5, 3.0, 0.25])
    prob = torch.rand(512, 1, 1, generator=gen) - 0.25
    return a, sfa, b, sfb, c, alpha, beta, prob


@pytest.mark.parametrize("act_func", sorted(ACTIVATIONS))
def test_nvfp4_op_is_the_bf16_reference_on_decoded_operands(act_func: str) -> None:
    a, sfa, b, sfb, c, alpha, beta, prob = _nvfp4_problem(6)
    got = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, SHAPE_ENDS, alpha, beta, prob, act_func, PARAMS, NV)
    # X = beta * C by hand (but for dgeglu, which reads C as stored), then the BF16 reference
    # with beta 1: independent of where the reference applies beta
    x64 = c.reshape(512, -1).double()
    if act_func != "dgeglu":
        x64[:256] *= 1.5  # expert 0 owns rows 0..255, expert 1 none, expert 2 rows 256..511
        x64[256:] *= 0.25
    want = dglu_backward(bs.dequantize_operand(a, sfa, NV), bs.dequantize_operand(b, sfb, NV), x64, SHAPE_ENDS,
                         alpha, torch.ones(3), prob, act_func, PARAMS)
    assert torch.equal(got.d, want.d) and torch.equal(got.dprob, want.dprob)


def _swap_nibbles(x: torch.Tensor) -> torch.Tensor:
    u = x.view(torch.uint8)
    return ((u >> 4) | (u << 4)).view(x.dtype)


def _mxfp8_block_mapping(sf: torch.Tensor, rows: int) -> torch.Tensor:
    """The bytes re-laid as if one scale covered 32 elements (each 32-block takes the first
    16-block's byte): a kernel reading the NVFP4 SF with MXFP8's block size."""
    scale_bytes = bs.sf_to_exponents(sf, rows, K, vec=16)
    return bs.sf_from_exponents(scale_bytes[:, :, 0::2].repeat_interleave(2, dim=2), K, vec=16)


def _neighbour_rows(sf: torch.Tensor, rows: int) -> torch.Tensor:
    """Rows r and r ^ 32 swapped: the (r // 32) % 4 and r % 32 strides confused."""
    scale_bytes = bs.sf_to_exponents(sf, rows, K, vec=16)
    order = torch.arange(rows) ^ 32
    return bs.sf_from_exponents(scale_bytes[:, order], K, vec=16)


def _e8m0_rounded_scales(sf: torch.Tensor, rows: int) -> torch.Tensor:
    """Each E4M3 scale rounded up to a power of two (an E8M0-style encode of the scales)."""
    scale_bytes = bs.sf_to_exponents(sf, rows, K, vec=16)
    up = torch.exp2(torch.ceil(torch.log2(bs.e4m3_decode(scale_bytes)))).float()
    return bs.sf_from_exponents(bs.e4m3_round_satfinite(up), K, vec=16)


BUGS = {
    "A nibbles swapped": lambda a, sfa, b, sfb: (_swap_nibbles(a), sfa, b, sfb),
    "B nibbles swapped": lambda a, sfa, b, sfb: (a, sfa, _swap_nibbles(b), sfb),
    "SFA read with 32-element blocks": lambda a, sfa, b, sfb: (a, _mxfp8_block_mapping(sfa, 512), b, sfb),
    "SFB rows r and r^32 confused": lambda a, sfa, b, sfb: (a, sfa, b, _neighbour_rows(sfb, N)),
    "SFA scales rounded to powers of two": lambda a, sfa, b, sfb: (a, _e8m0_rounded_scales(sfa, 512), b, sfb),
}


def _emulated_d(act_func: str, operands) -> torch.Tensor:
    """What a kernel computing D exactly from these operands stores: BF16 D (valid_m, 2N, 1)."""
    a, sfa, b, sfb = operands
    _, _, _, _, c, alpha, beta, prob = _nvfp4_problem(6)
    out = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, SHAPE_ENDS, alpha, beta, prob, act_func, PARAMS, NV)
    return out.d.to(torch.bfloat16).unsqueeze(2)


@pytest.mark.parametrize("act_func", ["dswiglu", "dsituglu"])
def test_the_emulated_nvfp4_kernel_passes(act_func: str) -> None:
    a, sfa, b, sfb, c, alpha, beta, prob = _nvfp4_problem(6)
    expected = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, SHAPE_ENDS, alpha, beta, prob, act_func, PARAMS, NV)
    check_d(_emulated_d(act_func, (a, sfa, b, sfb)), expected, "emulated NVFP4")


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_nvfp4_bugs_fail(bug: str) -> None:
    a, sfa, b, sfb, c, alpha, beta, prob = _nvfp4_problem(6)
    expected = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, SHAPE_ENDS, alpha, beta, prob, "dswiglu", PARAMS, NV)
    with pytest.raises(AssertionError, match="^d_row"):
        check_d(_emulated_d("dswiglu", BUGS[bug](a, sfa, b, sfb)), expected, bug)


# --- amax (NVFP4's 16-bit D) and planted bugs ------------------------------------------


def _emulated_amax(d: torch.Tensor) -> torch.Tensor:
    """What the kernel leaves in amax from cuDNN FE's -inf start: fp32 per-expert
    [max |dgate|, max |dup|] of the D it computed, -inf for an expert with no rows."""
    return bs.expert_amax(d.squeeze(2).double(), SHAPE_ENDS).float().reshape(-1, 2, 1)


def _signed_amax(d: torch.Tensor) -> torch.Tensor:
    """max of D rather than of |D|."""
    halves = d.squeeze(2).double().reshape(d.shape[0], -1, 2, 32).transpose(1, 2).reshape(d.shape[0], 2, -1)
    out = torch.full((len(SHAPE_ENDS), 2), -torch.inf, dtype=torch.float64)
    start = 0
    for g, end in enumerate(SHAPE_ENDS):
        if end > start:
            out[g] = halves[start:end].amax(dim=(0, 2))
        start = end
    return out.float().reshape(-1, 2, 1)


AMAX_BUGS = {
    "an empty expert written 0 (a zeroed start)": lambda d: _emulated_amax(d).nan_to_num(neginf=0.0),
    "the max of D, not of |D|": _signed_amax,
    "dgate's and dup's amax swapped": lambda d: _emulated_amax(d)[:, [1, 0]],
    "each expert's amax one expert late": lambda d: torch.cat([_emulated_amax(d)[-1:], _emulated_amax(d)[:-1]]),
}


def _nvfp4_expected_and_d():
    a, sfa, b, sfb, c, alpha, beta, prob = _nvfp4_problem(6)
    expected = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, SHAPE_ENDS, alpha, beta, prob, "dswiglu", PARAMS, NV)
    return expected, _emulated_d("dswiglu", (a, sfa, b, sfb))


def test_the_emulated_nvfp4_amax_passes_with_minus_infinity_for_the_empty_expert() -> None:
    expected, d = _nvfp4_expected_and_d()
    amax = _emulated_amax(d)
    assert amax[1].tolist() == [[-float("inf")], [-float("inf")]]  # expert 1 has no rows
    check_amax(amax, expected, d_allowed(expected, torch.bfloat16), SHAPE_ENDS, "emulated NVFP4")


@pytest.mark.parametrize("bug", sorted(AMAX_BUGS))
def test_planted_amax_bugs_fail(bug: str) -> None:
    expected, d = _nvfp4_expected_and_d()
    with pytest.raises(AssertionError, match="^amax"):
        check_amax(AMAX_BUGS[bug](d), expected, d_allowed(expected, torch.bfloat16), SHAPE_ENDS, bug)
