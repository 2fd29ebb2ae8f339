"""Blackwell block-scaled (family sm100_blockscaled): the shipped cuDNN FE kernels, MXFP8 and
NVFP4, launched by dglu's runtime from their manifest entries (its lower half: the
manifest's checks, then load and launch, as the launch-parity tier drives it on the CPU),
every output element against the float64 reference (blockscaled_reference), and against
cudnn.grouped_gemm_dglu_wrapper_sm100 itself where cuDNN FE is importable. Skipped on other
devices: nothing here has run on Blackwell hardware yet (the CPU tiers check the cubins'
parity with cuDNN FE's compile and the launches' parity with its host code).

MXFP8 inputs are blockscaled_inputs' (FP8 A/B, E8M0 scales 2^U[-8, 8] per 32-block, zero D
blocks both ways); NVFP4 inputs are made here: A and B rounded to E2M1 (two a byte, element
2j in the low nibble), E4M3 scales per 16 elements drawn from 2^U[-4, 4] * (1 + j/8). Shapes:
M a multiple of 256, L = 8 (a shipped expert count) with empty experts, N and K leaving
partial tiles and scale-factor atoms. Outputs are poisoned; dprob accumulates onto non-zero
contents; amax starts at -inf (the front door's job, not yet wired for Blackwell:
docs/blackwell.md), so an empty expert keeps -inf.
"""

from __future__ import annotations

import importlib.util
import itertools

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")

import blockscaled_reference as bs  # noqa: E402
from blockscaled_checks import check_accumulated, check_quantized_d  # noqa: E402
from blockscaled_configs import MxConfig  # noqa: E402
from blockscaled_inputs import make_mx_inputs, poisoned_outputs  # noqa: E402
from checks import assert_within, d_allowed  # noqa: E402
from inputs import Shape, initial_dprob, make_inputs  # noqa: E402

pytestmark = pytest.mark.gpu

FAMILY = "sm100_blockscaled"
BLACKWELL = {(10, 0): "sm_100a", (10, 3): "sm_103a"}
DEVICE = "cuda"
# L = 8 with two empty experts; 2N = 320 and K = 160 leave partial SF atoms
SHAPE = Shape(n=160, k=160, expert_rows=(256, 0, 512, 256, 0, 256, 768, 256))
E4M3_SCALES = bs.E4M3_X16
ACTIVATIONS = ("dswiglu", "dgeglu", "dsituglu")


def _arch() -> str | None:
    if not torch.cuda.is_available():
        return None
    return BLACKWELL.get(torch.cuda.get_device_capability())


requires_blackwell = pytest.mark.skipif(_arch() is None, reason="needs a Blackwell GPU (compute capability 10.0 or 10.3)")


def _variant(ab_dtype: str, act_func: str, dbias: bool, weight_mode: str):
    """The installed variant of these key fields for the device (cuDNN FE's default tile)."""
    from dglu.contract.reader import full_variant
    from dglu.manifest import installed_variants

    for entry in installed_variants():
        key = entry.key
        if (entry.family, key.arch, key.ab_dtype, key.act_func, key.dbias, key.weight_mode, key.experts,
                key.tile_m, key.tile_n) == (FAMILY, _arch(), ab_dtype, act_func, dbias, weight_mode, SHAPE.l, 256, 256):
            return full_variant(entry)
    pytest.skip(f"no {FAMILY} variant {ab_dtype} {act_func} dbias={dbias} {weight_mode} L={SHAPE.l} installed")


def _launch(variant, tensors: dict[str, torch.Tensor], given: dict | None = None, clear: tuple[str, ...] = ()) -> None:
    """dglu's runtime below the front door: the manifest's checks, load, launch, wait."""
    from dglu import runner, validation

    problem = validation.describe_tensors(variant, {role: (role, t) for role, t in tensors.items()}, given or {})
    stream = torch.cuda.current_stream().cuda_stream
    runner.run_variant(runner.load_variant(variant, torch.cuda.current_device()), problem, stream, clear)
    torch.cuda.synchronize()


def _weights(x, discrete: bool) -> tuple[dict[str, torch.Tensor], dict]:
    if not discrete:
        return {"b": x.b, "sfb": x.sfb}, {}
    n, k, _ = x.b.shape
    return {"b_ptrs": x.experts.b_ptrs, "sfb_ptrs": x.sfb_ptrs}, {"n": (n, "n")}


@requires_blackwell
@pytest.mark.parametrize(("act", "dbias", "mode"), list(itertools.product(ACTIVATIONS, (True, False), ("dense", "discrete"))))
def test_mxfp8_shipped_variants(act: str, dbias: bool, mode: str, seed: int) -> None:
    config = MxConfig(act, dbias=dbias, weight_mode=mode)
    variant = _variant("e4m3", config.act_func, dbias, mode)
    x = make_mx_inputs(config, SHAPE, seed, DEVICE)
    dprob_before = initial_dprob(SHAPE.m, seed, DEVICE)
    dbias_out = torch.zeros((SHAPE.l, 2 * SHAPE.n, 1), dtype=torch.bfloat16, device=DEVICE) if dbias else None
    out = poisoned_outputs(config, SHAPE, dprob_before.clone(), dbias_out, DEVICE)
    norm_const = torch.tensor([0.5], dtype=torch.float32, device=DEVICE)
    weights, given = _weights(x, mode == "discrete")
    r = x.rest
    tensors = {
        "a": x.a, "sfa": x.sfa, **weights, "c": x.c, "d_row": out.d_row, "d_col": out.d_col, "sfd_row": out.sfd_row,
        "sfd_col": out.sfd_col, "norm_const": norm_const, "padded_offsets": r.padded_offsets, "alpha": r.alpha,
        "beta": r.beta, "prob": r.prob, "dprob": out.dprob, **({"dbias": out.dbias} if dbias else {}),
    }
    _launch(variant, tensors, given)
    expected = bs.blockscaled_dglu_backward(x.a, x.sfa, x.b, x.sfb, x.c, SHAPE.ends, r.alpha, r.beta, r.prob,
                                            config.act_func, config.act_params)
    context = f"{variant.name} seed {seed}"
    check_quantized_d(out.d_row, out.d_col, out.sfd_row, out.sfd_col, expected, SHAPE.ends, torch.float8_e4m3fn,
                      0.5, False, context)
    dbias_before = torch.zeros_like(out.dbias) if dbias else None
    check_accumulated(out.dprob, dprob_before, out.dbias, dbias_before, expected, SHAPE.ends, SHAPE.n, context)


def _e4m3_scales(count: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """E4M3 scale bytes 2^U[-4, 4] * (1 + j/8), j in 0..7 (exact in E4M3)."""
    exponent = torch.randint(-4, 5, count, generator=gen, device=gen.device).double()
    mantissa = 1 + torch.randint(0, 8, count, generator=gen, device=gen.device).double() / 8
    return bs.e4m3_round_satfinite((mantissa * 2**exponent).float())


def _sf_on_device(sf: torch.Tensor) -> torch.Tensor:
    moved = torch.empty_strided(sf.shape, sf.stride(), dtype=torch.uint8, device=DEVICE)
    moved.copy_(sf)
    return moved.view(torch.float8_e4m3fn)


def nvfp4_inputs(act: str, seed: int):
    """(rest, A (M, K/2, 1), SFA, B (N, K/2, L), SFB): FP4 operands in the seed's layouts."""
    from configs import ACTIVATIONS as PARAMS

    act_func, act_params = PARAMS[act]
    rest = make_inputs(SHAPE, act_func, dict(act_params), seed, device=DEVICE, c_dtype=torch.bfloat16,
                       c_scaled_by_beta=act_func not in bs.C_AS_STORED)
    gen = torch.Generator(device=DEVICE).manual_seed(seed + 11)
    m, n, k, l = SHAPE.m, SHAPE.n, SHAPE.k, SHAPE.l
    a = bs.e2m1_pack(3 * torch.randn(m, k, generator=gen, device=DEVICE)).reshape(m, k // 2, 1)
    b = bs.e2m1_pack(3 * torch.randn(l, n, k, generator=gen, device=DEVICE)).permute(1, 2, 0)  # (N, K/2, L)
    blocks = -(-k // E4M3_SCALES.vec)
    sfa = _sf_on_device(bs.sf_from_exponents(_e4m3_scales((1, m, blocks), gen).cpu(), k, vec=E4M3_SCALES.vec))
    sfb = _sf_on_device(bs.sf_from_exponents(_e4m3_scales((l, n, blocks), gen).cpu(), k, vec=E4M3_SCALES.vec))
    return rest, a, sfa, b, sfb, act_func, dict(act_params)


@requires_blackwell
@pytest.mark.parametrize(("act", "dbias"), list(itertools.product(ACTIVATIONS, (True, False))))
def test_nvfp4_shipped_dense_variants(act: str, dbias: bool, seed: int) -> None:
    rest, a, sfa, b, sfb, act_func, act_params = nvfp4_inputs(act, seed)
    variant = _variant("e2m1x2", act_func, dbias, "dense")
    m, width = SHAPE.m, 2 * SHAPE.n
    d_row = torch.full((m, width, 1), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    dprob_before = initial_dprob(m, seed, DEVICE)
    dprob = dprob_before.clone()
    amax = torch.full((SHAPE.l, 2, 1), -torch.inf, dtype=torch.float32, device=DEVICE)
    dbias_out = torch.zeros((SHAPE.l, width, 1), dtype=torch.bfloat16, device=DEVICE) if dbias else None
    tensors = {
        "a": a, "sfa": sfa, "b": b, "sfb": sfb, "c": rest.c, "d_row": d_row, "amax": amax,
        "padded_offsets": rest.padded_offsets, "alpha": rest.alpha, "beta": rest.beta, "prob": rest.prob,
        "dprob": dprob, **({"dbias": dbias_out} if dbias else {}),
    }
    _launch(variant, tensors)
    expected = bs.blockscaled_dglu_backward(a, sfa, b, sfb, rest.c, SHAPE.ends, rest.alpha, rest.beta, rest.prob,
                                            act_func, act_params, E4M3_SCALES)
    context = f"{variant.name} seed {seed}"
    valid = SHAPE.valid_m
    allowed = d_allowed(expected, torch.bfloat16)
    assert_within("d_row", d_row[:valid].reshape(valid, width), expected.d, allowed, context)
    want_amax = bs.expert_amax(expected.d, SHAPE.ends)
    got_amax = amax.reshape(SHAPE.l, 2).double().cpu()
    empty = torch.isinf(want_amax)
    assert torch.equal(torch.isinf(got_amax), empty), (context, got_amax, want_amax)
    bound = bs.expert_amax(allowed, SHAPE.ends).masked_fill(empty, 0)
    assert ((got_amax - want_amax).masked_fill(empty, 0).abs() <= bound).all(), (context, got_amax, want_amax)
    check_accumulated(dprob, dprob_before, dbias_out, torch.zeros_like(dbias_out) if dbias else None, expected,
                      SHAPE.ends, SHAPE.n, context)


@requires_blackwell
@pytest.mark.skipif(importlib.util.find_spec("cudnn") is None, reason="cuDNN FE is not installed here")
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_nvfp4_matches_cudnn_fe_itself(act: str, seed: int) -> None:
    """dglu's launch of the shipped cubin and cuDNN FE's wrapper on the same NVFP4 inputs
    (its dense default path compiles the same cubin: tests/cpu/test_sm100_blockscaled_parity.py):
    D_row bitwise, amax bitwise, dprob to the atomics' order."""
    from cudnn import grouped_gemm_dglu_wrapper_sm100

    rest, a, sfa, b, sfb, act_func, act_params = nvfp4_inputs(act, seed)
    variant = _variant("e2m1x2", act_func, False, "dense")
    m, width = SHAPE.m, 2 * SHAPE.n
    d_row = torch.empty((m, width, 1), dtype=torch.bfloat16, device=DEVICE)
    dprob_ours, dprob_theirs = initial_dprob(m, seed, DEVICE), initial_dprob(m, seed, DEVICE)
    amax = torch.full((SHAPE.l, 2, 1), -torch.inf, dtype=torch.float32, device=DEVICE)
    _launch(variant, {"a": a, "sfa": sfa, "b": b, "sfb": sfb, "c": rest.c, "d_row": d_row, "amax": amax,
                      "padded_offsets": rest.padded_offsets, "alpha": rest.alpha, "beta": rest.beta,
                      "prob": rest.prob, "dprob": dprob_ours})
    theirs = grouped_gemm_dglu_wrapper_sm100(
        a_tensor=a, c_tensor=rest.c, sfa_tensor=sfa, padded_offsets=rest.padded_offsets, alpha_tensor=rest.alpha,
        beta_tensor=rest.beta, prob_tensor=rest.prob, dprob_tensor=dprob_theirs, b_tensor=b, sfb_tensor=sfb,
        d_dtype=torch.bfloat16, sf_vec_size=16, act_func=act_func, **act_params,
    )
    torch.cuda.synchronize()
    valid = SHAPE.valid_m
    assert torch.equal(d_row[:valid], theirs["d_row_tensor"][:valid])
    assert torch.equal(amax, theirs["amax_tensor"])
    torch.testing.assert_close(dprob_ours[:valid], dprob_theirs[:valid], rtol=1e-3, atol=1e-3)
