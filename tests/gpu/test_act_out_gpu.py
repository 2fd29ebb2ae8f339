"""act_out variants (act_out=True): the kernel also writes prob * GLU(C) (M, N, 1) in bf16.

Each shipped act_out variant (bf16 C and D, dswiglu and dgeglu, dense static, dbias on and
off) runs through the wrapper on one problem with uneven and empty experts and rows past
valid_m: act_out must match prob * GLU(C) of the float64 reference element by element
within bf16 rounding, and D must equal bit for bit what the variant without act_out gives
on the same inputs. dprob and dbias are sums the fast path adds with float atomics, in an
order that varies from run to run (deterministic=True is the bitwise mode): they must agree
to fp32 rounding (dprob) and one bf16 step (dbias).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import BF16, WIDE, Config  # noqa: E402
from harness import Case, case_inputs, run_wrapper  # noqa: E402
from inputs import Shape, initial_dprob  # noqa: E402

from dglu.torch.activations import Activation  # noqa: E402
from dglu.torch.reference import act_out_reference  # noqa: E402

pytestmark = pytest.mark.gpu

SEED = 1511
SHAPE = Shape(n=512, k=256, expert_rows=(768, 0, 256, 1536), extra_rows=64)
CONFIGS = [Config(act, BF16, BF16, dbias, WIDE) for act in ("dswiglu", "dgeglu") for dbias in (True, False)]
BF16_EPS = 2.0**-8  # bf16's relative rounding error bound (half an ulp of 1)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_act_out_matches_the_reference_and_leaves_the_other_outputs_unchanged(config: Config) -> None:
    x = case_inputs(Case(config, SHAPE, SEED))
    dprob_plain, dprob_aout = initial_dprob(SHAPE.m, SEED), initial_dprob(SHAPE.m, SEED)
    plain = run_wrapper(config, x, dprob_plain)
    out = run_wrapper(config, x, dprob_aout, act_out=True)
    torch.cuda.synchronize()
    assert len(plain) == 7 and len(out) == 8 and list(out.keys())[-1] == "act_out_tensor"
    act = out["act_out_tensor"]
    assert act.shape == (SHAPE.m, SHAPE.n, 1) and act.dtype == torch.bfloat16
    valid = SHAPE.ends[-1]
    activation = Activation(config.act_func, **config.act_params)
    expected = act_out_reference(x.c, x.padded_offsets, x.beta, x.prob, activation)[:valid]
    got = act.view(SHAPE.m, SHAPE.n)[:valid].double()
    # bf16 rounding of the value, plus the fp32 approximations of sigmoid (rcp, exp) with a
    # floor for values near 0
    bound = expected.abs() * (BF16_EPS + 2.0**-16) + 2.0**-20 * expected.abs().max()
    bad = (got - expected).abs() > bound
    assert not bad.any(), f"{config}: {int(bad.sum())} act_out elements off, first at {bad.nonzero()[0].tolist()}"
    # rows past valid_m are owned by no expert: left uninitialised by both calls
    d_row, plain_d_row = (o["d_row_tensor"][:valid].view(torch.uint8) for o in (out, plain))
    assert torch.equal(d_row, plain_d_row)
    torch.testing.assert_close(dprob_aout, dprob_plain, rtol=2.0**-18, atol=2.0**-18 * float(dprob_plain.abs().max()))
    if config.dbias:
        dbias = plain["dbias_tensor"].float()
        torch.testing.assert_close(out["dbias_tensor"].float(), dbias, rtol=2 * BF16_EPS, atol=BF16_EPS * float(dbias.abs().max()))  # one bf16 step


@pytest.mark.parametrize("config", CONFIGS[:2], ids=str)
def test_a_caller_provided_activation_tensor_gets_the_same_bytes(config: Config) -> None:
    """cuDNN FE 1.32.0's activation_tensor: the act_out variant fills the caller's (M, N, 1)
    bf16 tensor (poisoned first) with what act_out=True's own output holds; rows past
    valid_m stay as the caller left them."""
    x = case_inputs(Case(config, SHAPE, SEED))
    own = run_wrapper(config, x, initial_dprob(SHAPE.m, SEED), act_out=True)["act_out_tensor"]
    given = torch.full((SHAPE.m, SHAPE.n, 1), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = run_wrapper(config, x, initial_dprob(SHAPE.m, SEED), activation_tensor=given)
    torch.cuda.synchronize()
    assert len(out) == 7  # the caller holds the activation
    valid = SHAPE.ends[-1]
    assert torch.equal(given[:valid].view(torch.uint8), own[:valid].view(torch.uint8))
    assert given[valid:].isnan().all()
