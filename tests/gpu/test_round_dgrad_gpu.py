"""round_dgrad_to_input_dtype=True on the GPU: R = alpha^2 A B^T rounded to bf16 before the
epilogue (cuDNN FE 1.32.0's option, a runtime flag of every BF16 variant).

On exact GEMM data (inputs.py's exact_gemm; the reference then knows the kernels' fp32 R
bit for bit, reference.py) every output element is checked against the rounding reference,
through both APIs, for each activation, 16-bit and fp32 D, dbias, the deterministic and
discrete variants and an act_out variant. The same inputs without the option must give
another result, measurably: the unrounded reference rejects the rounded result, the
rounding reference the unrounded one, and fp32 D differs in most elements.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from checks import check_d, check_dprob  # noqa: E402
from configs import BF16, FP16, FP32, NARROW, SLIM, WIDE, Config  # noqa: E402
from harness import Case, case_inputs, expected_for, run_case, run_wrapper  # noqa: E402
from inputs import Shape, initial_dprob  # noqa: E402

from dglu.torch.activations import Activation  # noqa: E402
from dglu.torch.reference import act_out_reference  # noqa: E402

pytestmark = pytest.mark.gpu

# N not a multiple of 64 (a half-filled n-tile), K not a multiple of 64, an empty expert
SHAPE = Shape(n=160, k=200, expert_rows=(256, 0, 768, 256), extra_rows=64)
CONFIGS = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dgeglu", BF16, BF16, True, WIDE),
    Config("dgeglu_dsv4", BF16, BF16, False, WIDE),
    Config("dsituglu", BF16, BF16, True, WIDE),
    Config("dswiglu", BF16, FP32, True, NARROW),
    Config("dgeglu", FP16, FP32, False, NARROW),
    Config("dgeglu", FP32, BF16, True, NARROW),
    Config("dswiglu", BF16, BF16, True, WIDE, deterministic=True),
    Config("dgeglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major="n"),
    Config("dswiglu", BF16, BF16, True, WIDE, scheduler="dynamic"),
    Config("dgeglu", BF16, BF16, True, SLIM, cluster=(2, 1)),
]


@pytest.mark.parametrize("api", ["class", "wrapper"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_rounded_r_matches_the_rounding_reference(config: Config, api: str, seed: int) -> None:
    run_case(Case(config, SHAPE, seed, api=api, exact_gemm=True, round_dgrad=True))


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_the_option_changes_the_result_measurably(config: Config, seed: int) -> None:
    """Each result is rejected by the other setting's reference (fp32 D: on D itself)."""
    case = Case(config, SHAPE, seed, api="wrapper", exact_gemm=True)
    x = case_inputs(case)
    results = {}
    for rounded in (True, False):
        dprob = initial_dprob(SHAPE.m, seed)
        before = dprob.clone()
        out = run_wrapper(config, x, dprob, round_dgrad_to_input_dtype=rounded)
        torch.cuda.synchronize()
        results[rounded] = (out["d_row_tensor"], dprob, before)
    for rounded, (d_row, dprob, before) in results.items():
        other = expected_for(config, SHAPE, x, round_dgrad=not rounded)
        context = f"{case.describe()}, R rounded: {rounded}, checked against the other reference"
        with pytest.raises(AssertionError, match="^dprob: .* elements outside tolerance"):
            check_dprob(dprob, before, other, SHAPE.n, context)
        if config.d_dtype == FP32:
            with pytest.raises(AssertionError, match="^d_row: .* elements outside tolerance"):
                check_d(d_row, other, context)
    if config.d_dtype == FP32:
        valid = SHAPE.valid_m
        on, off = (results[r][0][:valid].reshape(valid, -1) for r in (True, False))
        nonzero = off != 0
        assert float((on != off)[nonzero].double().mean()) > 0.5


@pytest.mark.parametrize("dbias", [True, False])
def test_act_out_is_unchanged_by_the_rounding(dbias: bool, seed: int) -> None:
    """act_out (prob * GLU(X)) does not depend on R: bit for bit the same with the option,
    while D follows the rounding reference."""
    config = Config("dgeglu", BF16, BF16, dbias, WIDE)
    case = Case(config, SHAPE, seed, api="wrapper", exact_gemm=True, round_dgrad=True)
    x = case_inputs(case)
    outputs = {}
    for rounded in (True, False):
        dprob = initial_dprob(SHAPE.m, seed)
        outputs[rounded] = run_wrapper(config, x, dprob, act_out=True, round_dgrad_to_input_dtype=rounded)
    torch.cuda.synchronize()
    valid = SHAPE.valid_m
    act_on, act_off = (outputs[r]["act_out_tensor"][:valid].view(torch.int16) for r in (True, False))
    assert torch.equal(act_on, act_off)
    activation = Activation(config.act_func, **config.act_params)
    want = act_out_reference(x.c, x.padded_offsets, x.beta, x.prob, activation)[:valid]
    got = outputs[True]["act_out_tensor"].view(SHAPE.m, SHAPE.n)[:valid].double()
    assert bool(((got - want).abs() <= want.abs() * (2.0**-8 + 2.0**-16) + 2.0**-20 * want.abs().max()).all())
    check_d(outputs[True]["d_row_tensor"], expected_for(config, SHAPE, x, round_dgrad=True), case.describe())
