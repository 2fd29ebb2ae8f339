"""The mainloop decode's integer path (blocks/mxfp8_decode.py ``scaled_pair``), emulated bit
for bit on the CPU: for every FP8 byte and every scale byte it takes, PRMT (byte and its
replicated sign per 16-bit lane), shift and mask give the bf16 of value * 2^-120 (e4m3) or
2^-112 (e5m2) exactly, and one round-to-nearest-even multiply by the bf16 power of two
gives the same bits as the dequantizer's fp32 product rounded to bf16. The multiply's
rounding (mul.rn.bf16x2: the exact product rounded once) is what is emulated; the GPU tests
check the instruction itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the FP8 formats come from torch")

from dglu_build.kernels.blocks.mxfp8_decode import (  # noqa: E402
    BF16_EXPONENT_SHIFT,
    FAST_FORMATS,
    LANES,
    pair_selector,
)

FORMATS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
BYTES = torch.arange(256, dtype=torch.int64)


def prmt(a: int, b: int, selector: int) -> int:
    """PTX prmt.b32 (default mode): result byte i from nibble i of ``selector``; bit 3
    replicates the selected byte's sign bit."""
    source = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0xF
        byte = source[nibble & 7]
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def lanes_of(byte: torch.Tensor, kind: str) -> torch.Tensor:
    """The 16-bit lanes ``scaled_pair`` multiplies, for FP8 bytes (as int64)."""
    shift, mask = FAST_FORMATS[kind][:2]
    words = [prmt(int(b), int(b), pair_selector(0, 1)) for b in byte]
    lanes = [((w << shift) & 0xFFFFFFFF & mask) & 0xFFFF for w in words]
    return torch.tensor(lanes, dtype=torch.int64)


def bf16_value(bits: torch.Tensor) -> torch.Tensor:
    return bits.to(torch.int16).view(torch.bfloat16).to(torch.float64)


def fp8_value(byte: torch.Tensor, kind: str) -> torch.Tensor:
    return byte.to(torch.uint8).view(FORMATS[kind]).to(torch.float64)


def finite_bytes(kind: str) -> torch.Tensor:
    addend = FAST_FORMATS[kind][4] & 0xFF
    return BYTES[(((BYTES & 0x7F) + addend) & 0x80) == 0]


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_the_lane_is_the_value_times_a_fixed_power_of_two(kind: str) -> None:
    exponent_offset = FAST_FORMATS[kind][2]  # 127 - the format's bias
    finite = finite_bytes(kind)
    expected = fp8_value(finite, kind) * 2.0 ** -(exponent_offset)
    assert torch.equal(bf16_value(lanes_of(finite, kind)), expected)
    # the non-finite test flags exactly the inf and NaN codes
    flagged = set(BYTES.tolist()) - set(finite.tolist())
    assert flagged == {b for b in range(256) if not torch.isfinite(fp8_value(torch.tensor([b]), kind)).all()}


@pytest.mark.parametrize("kind", ["e4m3", "e5m2"])
def test_one_rounded_multiply_gives_the_dequantizers_bits(kind: str) -> None:
    offset, limit = FAST_FORMATS[kind][2:4]
    finite = finite_bytes(kind)
    lane = bf16_value(lanes_of(finite, kind))
    value = fp8_value(finite, kind)
    for scale in range(limit + 1):
        word = (scale + offset) * (LANES << BF16_EXPONENT_SHIFT)
        factor = bf16_value(torch.tensor([word & 0xFFFF]))
        assert word >> 16 == word & 0xFFFF  # both lanes
        # mul.rn.bf16x2: the exact product (float64 holds it) rounded once to bf16
        fast = (lane * factor).to(torch.bfloat16)
        # the dequantizer: fp32 value times fp32 2^(scale - 127), rounded to bf16
        reference = (value.to(torch.float32) * torch.tensor(2.0 ** (scale - 127), dtype=torch.float32)).to(
            torch.bfloat16
        )
        assert torch.equal(fast.view(torch.int16), reference.view(torch.int16)), scale
    # past the limit the multiplier would not be a normal bf16: those k-tiles take widen_words
    assert limit + offset == 254
