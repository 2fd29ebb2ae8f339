"""The MXFP8 GPU checks (tests/gpu/blockscaled_checks.py) on the CPU, over an emulated kernel:
the reference's fp32 D quantized by the reference quantizer into the seed's layouts passes;
each planted bug (a swapped SFD block, a byte off by 2, the dense SFD_col layout where the
per-expert one is asked, a code two steps off, a padding byte written, a non-zero code in an
all-zero block) fails. Also the premise of the layout-revealing GPU test."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the block-scaled checks need torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

import blockscaled_reference as bs  # noqa: E402
from blockscaled_checks import check_accumulated, check_quantized_d  # noqa: E402
from blockscaled_configs import DEFAULT, MxConfig  # noqa: E402
from blockscaled_inputs import layout_revealing_inputs, make_mx_inputs  # noqa: E402
from checks import d_allowed  # noqa: E402
from inputs import Shape  # noqa: E402

SHAPE = Shape(n=96, k=160, expert_rows=(256, 0, 512))
CONFIG = MxConfig("dgeglu", weight_mode="discrete", b_major="n")


def emulated(discrete_col_sfd: bool, norm_const: float):
    """(expected, outputs) of a kernel that computes D exactly and quantizes it as the
    reference does; outputs: d_row, d_col, sfd_row, sfd_col (uint8 views as e8m0)."""
    x = make_mx_inputs(CONFIG, SHAPE, 11, device="cpu")
    r = x.rest
    expected = bs.blockscaled_dglu_backward(
        x.a, x.sfa, x.b, x.sfb, x.c, SHAPE.ends, r.alpha, r.beta, r.prob, CONFIG.act_func, CONFIG.act_params
    )
    q = bs.quantize_d(expected.d.float(), SHAPE.ends, CONFIG.d_dtype, norm_const)
    sfd_col = q.sfd_col_discrete if discrete_col_sfd else q.sfd_col
    outputs = [q.d_row.unsqueeze(2), q.d_col.unsqueeze(2), q.sfd_row.view(torch.float8_e8m0fnu),
               sfd_col.view(torch.float8_e8m0fnu)]
    return expected, outputs


def run_checks(expected, outputs, discrete_col_sfd: bool, norm_const: float) -> None:
    check_quantized_d(*outputs, expected, SHAPE.ends, CONFIG.d_dtype, norm_const, discrete_col_sfd, "emulated")


@pytest.mark.parametrize("discrete_col_sfd", [False, True])
@pytest.mark.parametrize("norm_const", [1.0, 0.01, 3.0])
def test_the_reference_quantization_passes(discrete_col_sfd: bool, norm_const: float) -> None:
    expected, outputs = emulated(discrete_col_sfd, norm_const)
    run_checks(expected, outputs, discrete_col_sfd, norm_const)


def _bytes_of(sf: torch.Tensor) -> torch.Tensor:
    return bs.sf_storage(sf.view(torch.uint8))


def _swap_blocks(outputs) -> None:
    flat = _bytes_of(outputs[2])
    a, b = bs.sf_offset(0, 0, 0, SHAPE.m, 2 * SHAPE.n), bs.sf_offset(0, 2, 0, SHAPE.m, 2 * SHAPE.n)
    if flat[a] == flat[b]:
        flat[a] += 3
    flat[a], flat[b] = flat[b].clone(), flat[a].clone()


def _raise_a_byte(outputs) -> None:
    _bytes_of(outputs[3])[bs.sf_offset(5, 3, 0, 2 * SHAPE.n, SHAPE.m)] += 2


def _write_padding(outputs) -> None:
    # SFD_row: 2N = 192 is 6 blocks, so the atom's blocks 6 and 7 (of rows 0..127) are padding
    _bytes_of(outputs[2])[bs.sf_offset(0, 6, 0, SHAPE.m, 2 * SHAPE.n)] = 127


def _code_two_steps_off(outputs) -> None:
    d_row = outputs[0].view(torch.uint8)
    row = 1  # prob[0] = 0 (every 7th row): row 1 holds non-zero codes
    column = int(d_row[row, :, 0].ne(0).nonzero()[0])
    d_row[row, column, 0] += 2


def _code_in_a_zero_block(outputs) -> None:
    outputs[1].view(torch.uint8)[0, 0, 0] = 0x01  # row 0 has prob 0: all-zero blocks both ways


BUGS = {
    "swapped SFD_row blocks": (_swap_blocks, False, "sfd_row"),
    "SFD_col byte off by 2": (_raise_a_byte, False, "sfd_col"),
    "SFD_row padding written": (_write_padding, False, "sfd_row padding"),
    "D_row code two steps off": (_code_two_steps_off, False, "d_row (FP8 codes)"),
    "D_col code in an all-zero block": (_code_in_a_zero_block, False, "d_col"),
    "dense SFD_col where the per-expert layout is asked": (lambda outputs: None, True, "sfd_col"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_bugs_fail(bug: str) -> None:
    plant, ask_discrete, name = BUGS[bug]
    expected, outputs = emulated(discrete_col_sfd=False, norm_const=1.0)
    plant(outputs)
    with pytest.raises(AssertionError, match="^" + re.escape(name)):
        run_checks(expected, outputs, ask_discrete, 1.0)


def test_dbias_from_the_unquantized_d_passes_and_a_dropped_row_fails() -> None:
    expected, _ = emulated(False, 1.0)
    before = torch.randn(SHAPE.l, 2 * SHAPE.n, 1).to(torch.bfloat16)
    dprob_before = torch.randn(SHAPE.m, 1, 1)
    dprob = dprob_before + expected.dprob.float().reshape(-1, 1, 1)
    sums = bs.dbias(expected.d.float(), SHAPE.ends)
    dbias = (before.double() + sums.unsqueeze(2)).to(torch.bfloat16)
    check_accumulated(dprob, dprob_before, dbias, before, expected, SHAPE.ends, SHAPE.n, "emulated")
    without_row = expected.d.clone()
    without_row[1] = 0.0  # row 0 has prob 0: drop row 1
    dropped = before.double() + bs.dbias(without_row.float(), SHAPE.ends).unsqueeze(2)
    with pytest.raises(AssertionError, match="^dbias"):
        check_accumulated(dprob, dprob_before, dropped.to(torch.bfloat16), before, expected, SHAPE.ends,
                          SHAPE.n, "emulated")


@pytest.mark.parametrize("config", [DEFAULT, MxConfig("dgeglu", weight_mode="discrete")], ids=str)
def test_layout_revealing_inputs_give_exact_distinct_bytes(config: MxConfig) -> None:
    """The GPU test's premise: no block's scale input near a power of two, many distinct
    bytes, all-zero blocks."""
    shape = Shape(n=96, k=160, expert_rows=(512, 0, 256, 256))
    x = layout_revealing_inputs(config, shape, 1, device="cpu")
    r = x.rest
    expected = bs.blockscaled_dglu_backward(
        x.a, x.sfa, x.b, x.sfb, x.c, shape.ends, r.alpha, r.beta, r.prob, config.act_func, config.act_params
    )
    error = d_allowed(expected, torch.float32)
    fmt = bs.fp8_format(config.d_dtype)
    for d, err, row_order in ((expected.d, error, True), (expected.d.T, error.T, False)):
        low, high = bs.block_byte_range(d, err, fmt, 1.0, row_order)
        assert torch.equal(low, high)
        assert low.unique().numel() >= 16 and bool((low == 0).any())
