"""The block-scaled reference (tests/gpu/blockscaled_reference.py) against values worked out
by hand from docs/blockscaled_contract.md: SF layout offsets, E8M0 rounding, quantizer bytes,
and properties (round trips, layout-revealing inputs, half an FP8 step)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the block-scaled reference needs torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import blockscaled_reference as bs  # noqa: E402
from reference import ACTIVATIONS, dglu_backward  # noqa: E402

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FLT_MAX = torch.finfo(torch.float32).max
PARAMS = {"situ_beta1": 4.0, "situ_beta2": 25.0}


def _f32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def _bytes(x: torch.Tensor) -> list[int]:
    return x.view(torch.uint8).reshape(-1).tolist()


# --- layout ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "k_block", "l", "offset"),
    [
        (0, 0, 0, 0),
        (1, 0, 0, 16),  # r % 32 strides 16
        (32, 0, 0, 4),  # (r // 32) % 4 strides 4
        (0, 1, 0, 1),  # kb % 4 strides 1
        (0, 4, 0, 512),  # next atom along K
        (128, 0, 0, 1024),  # next 128 rows: RK = 2 atoms further
        (37, 5, 1, 3669),  # atom (1*3 + 0)*2 + 1 = 7: 3584 + 5*16 + 1*4 + 1
        (299, 6, 0, 2742),  # atom 2*2 + 1 = 5: 2560 + 11*16 + 1*4 + 2
    ],
)
def test_sf_offset_by_hand(row: int, k_block: int, l: int, offset: int) -> None:
    # rows 300 -> RR = 3; kc 200 -> 7 blocks -> RK = 2
    assert bs.sf_offset(row, k_block, l, rows=300, kc=200) == offset


def test_sf_shape_and_strides() -> None:
    sf = bs.sf_allocate(300, 200, 2)
    assert tuple(sf.shape) == (32, 4, 3, 4, 2, 2) == bs.sf_shape(300, 200, 2)
    assert sf.stride() == (16, 4, 1024, 1, 512, 3072) == bs.sf_strides(300, 200, 2)


def test_layout_revealing_exponents_land_at_their_offsets() -> None:
    rows, kc, l = 300, 200, 2
    blocks = 7
    index = torch.arange(l * rows * blocks).reshape(l, rows, blocks)
    exponents = (index % 251).to(torch.uint8)  # 251 prime: neighbours differ
    sf = bs.sf_from_exponents(exponents, kc, fill=0xFF)
    flat = bs.sf_storage(sf)
    for li in range(l):
        for r in (0, 1, 31, 32, 127, 128, 200, 299):
            for kb in range(blocks):
                assert flat[bs.sf_offset(r, kb, li, rows, kc)] == exponents[li, r, kb]
    assert torch.equal(bs.sf_to_exponents(sf, rows, kc), exponents)
    written = torch.zeros(flat.numel(), dtype=torch.bool)
    for li in range(l):
        for r in range(rows):
            for kb in range(blocks):
                written[bs.sf_offset(r, kb, li, rows, kc)] = True
    assert int(written.sum()) == l * rows * blocks  # offsets are distinct
    assert bool((flat[~written] == 0xFF).all())  # padding keeps the fill


def test_sf_to_exponents_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"sf: got shape"):
        bs.sf_to_exponents(bs.sf_allocate(128, 128), 256, 128)


@pytest.mark.parametrize(
    ("column", "row", "offset"),
    [
        (5, 300, 3153),  # expert 2 (256, 768): base 3*2*512; atom 0; 5*16 + 0 + (9 % 4)
        (200, 700, 6793),  # base 3072; atom 1*4 + 3; 8*16 + 2*4 + (21 % 4)
        (130, 10, 1056),  # expert 0: atom 1*2 + 0; 2*16 + 0 + 0
    ],
)
def test_discrete_col_sfd_offset_by_hand(column: int, row: int, offset: int) -> None:
    assert bs.discrete_col_sfd_offset(column, row, ends=[256, 256, 768], width=320) == offset


def test_discrete_col_sfd_places_each_expert_block() -> None:
    ends, width = [256, 256, 768], 320
    exponents = (torch.arange(width * 24).reshape(1, width, 24) % 253).to(torch.uint8)
    flat = bs.sf_storage(bs.discrete_col_sfd(exponents, ends))
    for n in (0, 5, 127, 130, 200, 319):
        for m in (0, 31, 255, 256, 300, 511, 700, 767):
            assert flat[bs.discrete_col_sfd_offset(n, m, ends, width)] == exponents[0, n, m // 32]


# --- E8M0 ----------------------------------------------------------------------------


def test_e8m0_decode_by_hand() -> None:
    got = bs.e8m0_decode(torch.tensor([127, 128, 0, 254, 120, 255], dtype=torch.uint8))
    assert got[:5].tolist() == [1.0, 2.0, 2.0**-127, 2.0**127, 2.0**-7]
    assert torch.isnan(got[5])


@pytest.mark.parametrize(
    ("x", "byte"),
    [
        (1.0, 127),  # exact power of two: no round-up
        (1.5, 128),
        (3 * 2.0**120, 249),  # 1.5 * 2^121: E = 248, rounded up
        (2.0**-126, 1),  # smallest normal, exact
        (2.0**-127, 0),  # subnormal mantissa 0x400000: 2^-127 itself
        (2.0**-127 + 2.0**-149, 1),  # mantissa 0x400001: rounds up to 2^-126
        (2.0**-149, 0),
        (0.0, 0),
        (FLT_MAX, 254),  # E = 0xFE never rounds up into NaN
        (float("inf"), 254),
        (float("nan"), 255),
    ],
)
def test_e8m0_round_up_by_hand(x: float, byte: int) -> None:
    assert _bytes(bs.e8m0_round_up(_f32([x]))) == [byte]


def test_e8m0_round_trips() -> None:
    every = torch.arange(255, dtype=torch.uint8)
    assert torch.equal(bs.e8m0_round_up(bs.e8m0_decode(every).float()), every)
    x = torch.ldexp(torch.rand(4096, generator=torch.Generator().manual_seed(1)) + 0.5,
                    torch.randint(-120, 120, (4096,), generator=torch.Generator().manual_seed(2)))
    scale = bs.e8m0_decode(bs.e8m0_round_up(x))
    assert bool((scale >= x.double()).all()) and bool((scale < 2 * x.double()).all())


def test_e8m0_round_up_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="x: got torch.float64"):
        bs.e8m0_round_up(torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="negative"):
        bs.e8m0_round_up(_f32([-1.0]))


# --- FP8 rounding ----------------------------------------------------------------------


def _nearest_even_fp8(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Brute force: the finite FP8 magnitude nearest |x|, ties to the even code, beyond max
    -> max; x's sign bit on top."""
    magnitudes = torch.arange(128, dtype=torch.uint8).view(dtype).double()
    finite = torch.isfinite(magnitudes)
    values, codes = magnitudes[finite], torch.arange(128)[finite]
    distance = (x.double().abs().clamp(max=values.max()).unsqueeze(1) - values).abs()
    nearest = distance == distance.min(dim=1, keepdim=True).values
    odd_penalty = (codes % 2) * 1000  # of two nearest codes, one is even
    chosen = torch.where(nearest, codes + odd_penalty, 1 << 20).min(dim=1).values % 1000
    sign = torch.signbit(x).to(torch.int64) * 0x80
    return (chosen + sign).to(torch.uint8)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_fp8_round_satfinite_is_nearest_even_with_saturation(dtype: torch.dtype) -> None:
    fmt = bs.fp8_format(dtype)
    grid = torch.arange(256, dtype=torch.uint8).view(dtype).float()
    grid = grid[torch.isfinite(grid)].sort().values
    midpoints = (grid[1:] + grid[:-1]) / 2  # exact in fp32: ties
    noise = torch.randn(2000, generator=torch.Generator().manual_seed(3)) * fmt.max_finite / 4
    beyond = _f32([fmt.max_finite * 1.01, -fmt.max_finite * 3, FLT_MAX, float("inf"), float("-inf")])
    x = torch.cat((grid, midpoints, noise, beyond))
    assert _bytes(bs.fp8_round_satfinite(x, fmt)) == _nearest_even_fp8(x, dtype).tolist()
    assert torch.isnan(bs.fp8_round_satfinite(_f32([float("nan")]), fmt).float()).all()


# --- the quantizer, by hand -------------------------------------------------------------


def _one_block(values: list[float]) -> torch.Tensor:
    return _f32(values + [0.0] * (32 - len(values))).reshape(1, 32)


@pytest.mark.parametrize(
    ("dtype", "norm_const", "values", "byte", "codes"),
    [
        # e5m2: rcp 1/128 exact, amax 128 -> x = 1 exactly -> 127, s = 1
        (E5M2, 1.0, [128.0, -1.0], 127, [0x58, 0xBC]),
        # amax one ulp above 128 -> x above 1 -> 128, s = 1/2; 64.0000038 rounds to 64
        (E5M2, 1.0, [128.00001525878906, 2.0], 128, [0x54, 0x3C]),
        # e4m3: amax 448 -> f32(448 * f32(1/448)) = 1 (f32(1/448) is 1 + 4.5e-8 above) -> 127
        (E4M3, 1.0, [448.0, -1.0], 127, [0x7E, 0xB8]),
        # amax 1 = 2^0: x = f32(1/448) = 1.14 * 2^-9 -> 2^-8 -> 119, s = 256:
        # 1 -> 256 (0x78); 0.3 -> 76.8 -> 80 (0x6A); 2^-20 -> 2^-12, below 2^-10: 0
        (E4M3, 1.0, [1.0, 0.3, 2.0**-20], 119, [0x78, 0x6A, 0x00]),
        # norm_const 3: amax 448 -> x = 3 -> 4 -> 129, s = 3/4: 448 -> 336 (0x7A)
        (E4M3, 3.0, [448.0], 129, [0x7A]),
        # saturation: x overflows past 2^127 -> 254, s = 448 * 2^-127:
        # FLT_MAX -> 896 -> 448 (0x7E), 2^126 -> 224 (0x76)
        (E4M3, 448.0, [FLT_MAX, 2.0**126, -FLT_MAX], 254, [0x7E, 0x76, 0xFE]),
        # e5m2 saturates where torch alone would give inf: FLT_MAX * 2^-111 -> 57344 (0x7B)
        (E5M2, 65536.0, [FLT_MAX, 2.0**126], 254, [0x7B, 0x78]),
        # an inf element: x inf -> 254, inf -> max, 1 * nc * 2^-127 -> 0
        (E4M3, 1.0, [float("inf"), 1.0], 254, [0x7E, 0x00]),
        # all zero: byte 0, every code 0
        (E4M3, 1.0, [], 0, []),
    ],
)
def test_quantize_block_by_hand(dtype, norm_const, values, byte, codes) -> None:
    fmt = bs.fp8_format(dtype)
    for row_order in (True, False):
        q, e = bs.quantize_blocks(_one_block(values), fmt, norm_const, row_order)
        assert _bytes(e) == [byte]
        assert _bytes(q) == codes + [0] * (32 - len(codes))


def test_row_and_column_scale_orders_differ_by_hand() -> None:
    """norm_const 0.1, amax 4480: row f32(4480 * f32(1/448)) = 10, then 10 * f32(0.1) =
    1 + 1.5e-8 rounds to 1 -> 127; column f32(f32(1/448) * f32(0.1)) * 4480 = 1 + 6e-8,
    past half an ulp of 1 -> 1 + 2^-23 -> 128."""
    fmt, amax = bs.fp8_format(E4M3), _f32([4480.0])
    assert _bytes(bs.block_scale_bytes(amax, fmt, 0.1, row_order=True)) == [127]
    assert _bytes(bs.block_scale_bytes(amax, fmt, 0.1, row_order=False)) == [128]


def test_quantize_d_rejects_bad_arguments() -> None:
    d = torch.zeros(256, 64)
    with pytest.raises(ValueError, match="d_dtype: got torch.bfloat16"):
        bs.quantize_d(d, [256], torch.bfloat16, 1.0)
    with pytest.raises(ValueError, match="norm_const: got 0.0"):
        bs.quantize_d(d, [256], E4M3, 0.0)
    with pytest.raises(ValueError, match="d: got 256 rows, need valid_m = 512"):
        bs.quantize_d(d, [256, 512], E4M3, 1.0)
    with pytest.raises(ValueError, match="need torch.float32"):
        bs.quantize_d(d.double(), [256], E4M3, 1.0)


# --- the quantizer, layouts and properties -------------------------------------------


def test_layout_revealing_d_names_its_sfd_bytes() -> None:
    """|D[m, n]| = 2^u(m, n), e5m2, norm_const 1: a block's byte is 120 + max u over it."""
    ends, width = [256, 256, 768], 96  # 2N = 96: a partial SF atom
    m, n = torch.meshgrid(torch.arange(768), torch.arange(width), indexing="ij")
    u = (m * 13 + n * 7) % 41 - 20
    sign = torch.where((m + n) % 3 == 0, -1.0, 1.0)
    q = bs.quantize_d((sign * torch.ldexp(torch.ones(768, width), u)).float(), ends, E5M2, 1.0)
    row_max = u.reshape(768, width // 32, 32).amax(2)
    col_max = u.T.reshape(width, 768 // 32, 32).amax(2)
    row_flat, col_flat = bs.sf_storage(q.sfd_row), bs.sf_storage(q.sfd_col)
    discrete_flat = bs.sf_storage(q.sfd_col_discrete)
    for r in range(0, 768, 7):
        for j in range(width // 32):
            assert row_flat[bs.sf_offset(r, j, 0, 768, width)] == 120 + row_max[r, j]
    for c in range(width):
        for i in range(768 // 32):
            expected = 120 + col_max[c, i]
            assert col_flat[bs.sf_offset(c, i, 0, width, 768)] == expected
            assert discrete_flat[bs.discrete_col_sfd_offset(c, 32 * i, ends, width)] == expected


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("norm_const", [1.0, 0.01, 3.0])
def test_dequantized_d_within_half_an_fp8_step(dtype: torch.dtype, norm_const: float) -> None:
    gen = torch.Generator().manual_seed(4)
    exponent = torch.randint(-20, 20, (512, 128), generator=gen)
    d64 = torch.randn(512, 128, generator=gen, dtype=torch.float64) * torch.ldexp(
        torch.ones(512, 128, dtype=torch.float64), exponent
    )
    d64[0:32, 32:64] = 0.0  # an all-zero block in both directions
    fmt = bs.fp8_format(dtype)
    q = bs.quantize_d(d64.float(), [256, 512], dtype, norm_const)
    for codes, block_bytes, d in ((q.d_row, q.row_bytes, d64), (q.d_col.T, q.col_bytes, d64.T)):
        scale = norm_const / bs.e8m0_decode(block_bytes).repeat_interleave(32, dim=1)  # s exactly
        y = d * scale
        bound = (0.5 * bs.fp8_step(y, fmt) + y.abs() * 2.0**-22) / scale
        assert bool(((bs.dequantize_d(codes, block_bytes, norm_const) - d).abs() <= bound).all())
    assert q.row_bytes[0, 1] == 0 and q.col_bytes[32, 0] == 0


# --- operands and the float64 op --------------------------------------------------------


def _fp8_operand(rows: int, k: int, l: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    values = (torch.randn(rows, k, l, generator=gen) * 4).to(E4M3)
    exponents = torch.randint(127 - 8, 127 + 9, (l, rows, -(-k // 32)), generator=gen).to(torch.uint8)
    return values, exponents, bs.sf_from_exponents(exponents, k)


def test_dequantize_operand_uses_each_blocks_scale() -> None:
    values, exponents, sf = _fp8_operand(300, 200, 2, seed=5)  # K 200: a partial block
    got = bs.dequantize_operand(values, sf)
    for r, k, l in ((0, 0, 0), (130, 70, 1), (299, 199, 0), (37, 160, 1)):
        want = float(values[r, k, l].float()) * 2.0 ** (int(exponents[l, r, k // 32]) - 127)
        assert float(got[r, k, l]) == want


@pytest.mark.parametrize("act_func", sorted(ACTIVATIONS))
def test_blockscaled_op_is_the_bf16_reference_on_decoded_operands(act_func: str) -> None:
    ends, n, k = [256, 256, 512], 32, 96
    a, _, sfa = _fp8_operand(512, k, 1, seed=6)
    b, _, sfb = _fp8_operand(n, k, 3, seed=7)
    gen = torch.Generator().manual_seed(8)
    c = torch.randn(512, 2 * n, 1, generator=gen).to(E4M3)
    alpha, beta = torch.tensor([0.5, 2.0, -1.5]), torch.tensor([0.375, 3.0, 0.25])
    prob = torch.rand(512, 1, 1, generator=gen)
    params = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0, **PARAMS}
    got = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, ends, alpha, beta, prob, act_func, params)
    # X by hand (beta exact in fp32 products here), then the BF16 reference with beta 1: the
    # block-scaled dGeGLU reads C as stored (the seed), the other activations beta * C
    x64 = c.reshape(512, -1).double()
    if act_func != "dgeglu":
        x64[256:] *= 0.25  # expert 0 owns rows 0..255, expert 1 none, expert 2 rows 256..511
        x64[:256] *= 0.375
    want = dglu_backward(
        bs.dequantize_operand(a, sfa), bs.dequantize_operand(b, sfb), x64, ends, alpha, torch.ones(3), prob,
        act_func, params,
    )
    assert torch.equal(got.d, want.d) and torch.equal(got.dprob, want.dprob)


def test_gemm_and_dbias_by_hand() -> None:
    """A = 1 at scale 2, B = 1 at scale 1/2, K = 64, alpha = 2: R = 4 * 64. dSwiGLU on C = 1,
    beta = prob = 1, s = sigmoid(1): D gate = R s (1 + (1 - s)), D input = R s; dbias sums
    the 256 rows."""
    ends, n, k = [256], 32, 64
    a = torch.ones(256, k, 1).to(E4M3)
    b = torch.ones(n, k, 1).to(E4M3)
    sfa = bs.sf_from_exponents(torch.full((1, 256, 2), 128, dtype=torch.uint8), k)
    sfb = bs.sf_from_exponents(torch.full((1, n, 2), 126, dtype=torch.uint8), k)
    c = torch.ones(256, 2 * n, 1, dtype=torch.bfloat16)
    alpha, beta, prob = torch.tensor([2.0]), torch.tensor([1.0]), torch.ones(256, 1, 1)
    got = bs.blockscaled_dglu_backward(a, sfa, b, sfb, c, ends, alpha, beta, prob, "dswiglu", PARAMS)
    s = 1 / (1 + torch.exp(torch.tensor(-1.0, dtype=torch.float64)))
    r = 4.0 * 64  # alpha^2 * sum of 64 products 2 * 1/2
    assert torch.allclose(got.d[:, 0], r * s * (1 + (1 - s)), rtol=0, atol=1e-12)
    assert torch.allclose(got.d[:, 32], r * s, rtol=0, atol=1e-12)
    sums = bs.dbias(got.d, ends)
    assert torch.allclose(sums[0, 32], 256 * r * s, rtol=1e-15, atol=0)


# --- helpers the GPU checks use ---------------------------------------------------------


def test_discrete_col_sfd_to_exponents_inverts_discrete_col_sfd() -> None:
    ends, width = [256, 256, 768, 1280], 320  # an empty expert; 2N not a multiple of 128
    exponents = (torch.arange(width * 40).reshape(1, width, 40) % 251).to(torch.uint8)
    sf = bs.discrete_col_sfd(exponents, ends).view(torch.float8_e8m0fnu)
    assert torch.equal(bs.discrete_col_sfd_to_exponents(sf, ends, width), exponents)


def test_quantizer_scale_by_hand() -> None:
    e = torch.tensor([127, 119, 254, 0, 255], dtype=torch.uint8)
    s = bs.quantizer_scale(e, 1.0)
    assert s.dtype == torch.float32
    assert s[:4].tolist() == [1.0, 256.0, 2.0**-127, 2.0**127] and torch.isnan(s[4])
    assert bs.quantizer_scale(e, 3.0)[3].item() == FLT_MAX  # 3 * 2^127 overflows: clamped


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("row_order", [True, False])
def test_quantize_with_bytes_is_the_quantizer_given_its_bytes(dtype, row_order) -> None:
    gen = torch.Generator().manual_seed(9)
    d = (torch.randn(64, 96, generator=gen) * torch.ldexp(torch.ones(64, 96), torch.randint(-9, 9, (64, 96), generator=gen)))
    fmt = bs.fp8_format(dtype)
    q, e = bs.quantize_blocks(d, fmt, 0.01, row_order)
    assert _bytes(bs.quantize_with_bytes(d, e, fmt, 0.01)) == _bytes(q)
    # one byte higher halves s: the codes of a block whose byte was raised change
    raised = e.clone()
    raised[0, 0] += 1
    other = bs.quantize_with_bytes(d, raised, fmt, 0.01)
    assert torch.equal(other[:, 32:].view(torch.uint8), q[:, 32:].view(torch.uint8))
    assert torch.equal(other[0, :32].float(), bs.fp8_round_satfinite(d[0, :32] * bs.quantizer_scale(raised[0, :1], 0.01), fmt).float())


@pytest.mark.parametrize(
    ("dtype", "amax", "relative_error", "low", "high"),
    [
        (E5M2, 128.0, 0.0, 127, 127),  # x = 1 exactly, no error: one byte
        (E5M2, 128.0, 1e-6, 127, 128),  # x = 1 within the error: either byte
        (E5M2, 100.0, 1e-6, 127, 127),  # x = 0.78, far from a power of two
        (E4M3, 448.0, 1e-6, 127, 128),  # x = f32(448 * f32(1/448)) = 1 within the error
        (E4M3, 1.0, 1e-3, 119, 119),  # x = 1.14 * 2^-9: the error does not reach 2^-8 or 2^-9
        (E4M3, 0.0, 0.0, 0, 0),  # all zero
    ],
)
def test_block_byte_range_by_hand(dtype, amax, relative_error, low, high) -> None:
    d = torch.zeros(1, 32, dtype=torch.float64)
    d[0, 5] = -amax
    d[0, 6] = amax / 2
    error = d.abs() * relative_error
    fmt = bs.fp8_format(dtype)
    for row_order in (True, False):
        got = bs.block_byte_range(d, error, fmt, 1.0, row_order)
        assert (_bytes(got[0]), _bytes(got[1])) == ([low], [high])
        exact = bs.quantize_blocks(d.float(), fmt, 1.0, row_order)[1]
        assert low <= _bytes(exact)[0] <= high


def test_block_byte_range_brackets_every_perturbed_quantizer() -> None:
    """Bytes of D perturbed within the error lie in [low, high] (the range is tight: random
    data mostly gives one byte)."""
    gen = torch.Generator().manual_seed(10)
    d = torch.randn(256, 64, generator=gen, dtype=torch.float64) * 3
    error = d.abs() * 2.0**-12 + 2.0**-30
    fmt = bs.fp8_format(E4M3)
    low, high = bs.block_byte_range(d, error, fmt, 3.0, True)
    for _ in range(4):
        noise = (torch.rand(d.shape, generator=gen, dtype=torch.float64) * 2 - 1) * error
        got = bs.quantize_blocks((d + noise).float(), fmt, 3.0, True)[1]
        assert bool(((got >= low) & (got <= high)).all())
    assert int((high != low).sum()) <= 2
