"""Blackwell block-scaled (family sm100_blockscaled): the shipped cuDNN FE kernels, MXFP8 and
NVFP4, called through dglu's public API (the seed-compatible wrapper dglu.grouped_gemm_dglu
and the class API dglu.GroupedGemmDglu: check_support, compile, execute), every output
element against the float64 reference (blockscaled_reference), and against
cudnn.grouped_gemm_dglu_wrapper_sm100 itself where cuDNN FE is importable. Skipped on other
devices: nothing here has run on Blackwell hardware yet (the CPU tiers check the cubins'
parity with cuDNN FE's compile and the launches' parity with its host code).

MXFP8 inputs are blockscaled_inputs' (FP8 A/B, E8M0 scales 2^U[-8, 8] per 32-block, zero D
blocks both ways); NVFP4 inputs are made here: A and B rounded to E2M1 (two a byte, element
2j in the low nibble), E4M3 scales per 16 elements drawn from 2^U[-4, 4] * (1 + j/8). Shapes:
M a multiple of 256, L = 8 (a shipped expert count) with empty experts, N and K leaving
partial tiles and scale-factor atoms. The class API writes into poisoned outputs; dprob
accumulates onto non-zero contents; the wrapper's amax starts at -inf (as cuDNN FE's), the
class API's is the caller's, filled with -inf here, so an empty expert keeps -inf.
"""

from __future__ import annotations

import importlib.util
import itertools

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")

import blockscaled_reference as bs  # noqa: E402
import dglu  # noqa: E402
from blockscaled_checks import check_accumulated, check_amax, check_quantized_d  # noqa: E402
from blockscaled_configs import MxConfig  # noqa: E402
from blockscaled_inputs import make_mx_inputs, poisoned_outputs  # noqa: E402
from checks import assert_within, d_allowed  # noqa: E402
from inputs import Shape, initial_dbias, initial_dprob, make_inputs  # noqa: E402

pytestmark = pytest.mark.gpu

FAMILY = "sm100_blockscaled"
BLACKWELL = {(10, 0): "sm_100a", (10, 3): "sm_103a"}
DEVICE = "cuda"
# L = 8 with two empty experts; 2N = 320 and K = 160 leave partial SF atoms
SHAPE = Shape(n=160, k=160, expert_rows=(256, 0, 512, 256, 0, 256, 768, 256))
E4M3_SCALES = bs.E4M3_X16
ACTIVATIONS = ("dswiglu", "dgeglu", "dsituglu")
TILE = {"mma_tiler_mn": (256, 256), "cluster_shape_mn": (2, 1)}  # the shipped variants' tile
APIS = ("wrapper", "class")


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


def _weights(x, discrete: bool, call: str) -> dict:
    """B and SFB for ``call`` ("samples", "execute" or "wrapper"): dense tensors, or the
    discrete experts' pointers."""
    if not discrete:
        return {"sample_b": x.b, "sample_sfb": x.sfb} if call == "samples" else {"b_tensor": x.b, "sfb_tensor": x.sfb}
    n, k, l = x.b.shape
    if call == "samples":
        return {"num_experts": l, "b_shape": (n, k), "b_dtype": x.b.dtype}
    pointers = {"b_ptrs": x.experts.b_ptrs, "sfb_ptrs": x.sfb_ptrs}
    return pointers if call == "execute" else {**pointers, "n": n, "b_dtype": x.b.dtype}


def _run_class(samples: dict, execute: dict, options: dict) -> None:
    """The class API: built from the samples (``samples``: the execute tensors' names with
    ``sample_`` in front, but weights), checked, compiled, executed, waited for."""
    op = dglu.GroupedGemmDglu(**samples, **options)
    assert op.check_support() is True
    op.compile()
    op.execute(**execute)
    torch.cuda.synchronize()


def _mx_call(config: MxConfig, x, api: str, dprob: torch.Tensor, norm_const: torch.Tensor,
             dbias_before: torch.Tensor | None = None):
    """(D_row, D_col, SFD_row, SFD_col, dbias) of one MXFP8 call through ``api``: the
    wrapper's outputs (its other outputs checked: dprob the caller's, no amax for FP8 D), or
    the class API's writes into poisoned outputs, dbias accumulated onto ``dbias_before``."""
    r = x.rest
    options = {"sf_vec_size": 32, **config.act_kwargs(), **config.launch_kwargs(), **TILE}
    if api == "wrapper":
        out = dglu.grouped_gemm_dglu(
            x.a, x.c, x.sfa, padded_offsets=r.padded_offsets, alpha_tensor=r.alpha, beta_tensor=r.beta,
            prob_tensor=r.prob, dprob_tensor=dprob, norm_const_tensor=norm_const, d_dtype=config.d_dtype,
            generate_dbias=config.dbias, **_weights(x, config.discrete, "wrapper"), **options,
        )
        torch.cuda.synchronize()
        d_row, d_col, dprob_out, dbias, amax, sfd_row, sfd_col = out
        assert dprob_out is dprob and amax is None and (dbias is not None) == config.dbias
        return d_row, d_col, sfd_row, sfd_col, dbias
    dbias = None if dbias_before is None else dbias_before.clone()
    out = poisoned_outputs(config, SHAPE, dprob, dbias, DEVICE)
    tensors = {"d_row": out.d_row, "d_col": out.d_col, "sfa": x.sfa, "padded_offsets": r.padded_offsets,
               "alpha": r.alpha, "beta": r.beta, "prob": r.prob, "dprob": dprob, "dbias": dbias,
               "sfd_row": out.sfd_row, "sfd_col": out.sfd_col, "norm_const": norm_const}
    samples = {"sample_a": x.a, "sample_c": x.c, **{f"sample_{name}": t for name, t in tensors.items()},
               **_weights(x, config.discrete, "samples")}
    execute = {"a_tensor": x.a, "c_tensor": x.c, **{_execute_name(name): t for name, t in tensors.items()},
               **_weights(x, config.discrete, "execute")}
    _run_class(samples, execute, options)
    return out.d_row, out.d_col, out.sfd_row, out.sfd_col, dbias


def _execute_name(name: str) -> str:
    """execute()'s name of a tensor: padded_offsets as it is, the others with _tensor."""
    return name if name == "padded_offsets" else f"{name}_tensor"


@requires_blackwell
@pytest.mark.parametrize(("act", "dbias", "mode", "api"),
                         list(itertools.product(ACTIVATIONS, (True, False), ("dense", "discrete"), APIS)))
def test_mxfp8_shipped_variants(act: str, dbias: bool, mode: str, api: str, seed: int) -> None:
    config = MxConfig(act, dbias=dbias, weight_mode=mode)
    variant = _variant("e4m3", config.act_func, dbias, mode)
    x = make_mx_inputs(config, SHAPE, seed, DEVICE)
    dprob_before = initial_dprob(SHAPE.m, seed, DEVICE)
    dprob = dprob_before.clone()
    norm_const = torch.tensor([0.5], dtype=torch.float32, device=DEVICE)
    # the class API accumulates onto the caller's dbias; the wrapper's starts at zero
    dbias_before = initial_dbias(SHAPE.l, SHAPE.n, seed, DEVICE) if dbias and api == "class" else None
    d_row, d_col, sfd_row, sfd_col, dbias_out = _mx_call(config, x, api, dprob, norm_const, dbias_before)
    if dbias and api == "wrapper":
        dbias_before = torch.zeros_like(dbias_out)
    r = x.rest
    expected = bs.blockscaled_dglu_backward(x.a, x.sfa, x.b, x.sfb, x.c, SHAPE.ends, r.alpha, r.beta, r.prob,
                                            config.act_func, config.act_params)
    context = f"{variant.name} via the {api} API, seed {seed}"
    # the SFD padding is checked where the test poisoned it (the class API's outputs)
    check_quantized_d(d_row, d_col, sfd_row, sfd_col, expected, SHAPE.ends, torch.float8_e4m3fn, 0.5, False, context,
                      check_padding=api == "class")
    check_accumulated(dprob, dprob_before, dbias_out, dbias_before, expected, SHAPE.ends, SHAPE.n, context)


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


def _nvfp4_call(api: str, inputs, dbias: bool, dprob: torch.Tensor, dbias_before: torch.Tensor | None = None):
    """(D_row, amax, dbias) of one dense NVFP4 call through ``api``: the wrapper's outputs
    (amax allocated by it, starting at -inf), or the class API's writes into a NaN D_row, the
    caller's amax, filled with -inf, and dbias accumulated onto ``dbias_before``."""
    rest, a, sfa, b, sfb, act_func, act_params = inputs
    m, width = SHAPE.m, 2 * SHAPE.n
    options = {"sf_vec_size": 16, "act_func": act_func, **act_params, **TILE}
    if api == "wrapper":
        out = dglu.grouped_gemm_dglu(
            a, rest.c, sfa, padded_offsets=rest.padded_offsets, alpha_tensor=rest.alpha, beta_tensor=rest.beta,
            prob_tensor=rest.prob, dprob_tensor=dprob, b_tensor=b, sfb_tensor=sfb, d_dtype=torch.bfloat16,
            generate_dbias=dbias, **options,
        )
        torch.cuda.synchronize()
        d_row, d_col, dprob_out, dbias_out, amax, sfd_row, sfd_col = out
        assert dprob_out is dprob and d_col is sfd_row is sfd_col is None and (dbias_out is not None) == dbias
        return d_row, amax, dbias_out
    d_row = torch.full((m, width, 1), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    amax = torch.full((SHAPE.l, 2, 1), -torch.inf, dtype=torch.float32, device=DEVICE)
    dbias_out = None if dbias_before is None else dbias_before.clone()
    tensors = {"d_row": d_row, "sfa": sfa, "padded_offsets": rest.padded_offsets, "alpha": rest.alpha,
               "beta": rest.beta, "prob": rest.prob, "dprob": dprob, "b": b, "sfb": sfb, "dbias": dbias_out,
               "amax": amax}
    samples = {"sample_a": a, "sample_c": rest.c, **{f"sample_{name}": t for name, t in tensors.items()}}
    execute = {"a_tensor": a, "c_tensor": rest.c, **{_execute_name(name): t for name, t in tensors.items()}}
    _run_class(samples, execute, options)
    return d_row, amax, dbias_out


@requires_blackwell
@pytest.mark.parametrize(("act", "dbias", "api"), list(itertools.product(ACTIVATIONS, (True, False), APIS)))
def test_nvfp4_shipped_dense_variants(act: str, dbias: bool, api: str, seed: int) -> None:
    inputs = nvfp4_inputs(act, seed)
    rest, a, sfa, b, sfb, act_func, act_params = inputs
    variant = _variant("e2m1x2", act_func, dbias, "dense")
    dprob_before = initial_dprob(SHAPE.m, seed, DEVICE)
    dprob = dprob_before.clone()
    dbias_before = initial_dbias(SHAPE.l, SHAPE.n, seed, DEVICE) if dbias and api == "class" else None
    d_row, amax, dbias_out = _nvfp4_call(api, inputs, dbias, dprob, dbias_before)
    if dbias and api == "wrapper":
        dbias_before = torch.zeros_like(dbias_out)
    expected = bs.blockscaled_dglu_backward(a, sfa, b, sfb, rest.c, SHAPE.ends, rest.alpha, rest.beta, rest.prob,
                                            act_func, act_params, E4M3_SCALES)
    context = f"{variant.name} via the {api} API, seed {seed}"
    valid, width = SHAPE.valid_m, 2 * SHAPE.n
    allowed = d_allowed(expected, torch.bfloat16)
    assert_within("d_row", d_row[:valid].reshape(valid, width), expected.d, allowed, context)
    check_amax(amax, expected, allowed, SHAPE.ends, context)  # -inf for the empty experts, as cuDNN FE's
    check_accumulated(dprob, dprob_before, dbias_out, dbias_before, expected, SHAPE.ends, SHAPE.n, context)


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8)


requires_cudnn = pytest.mark.skipif(importlib.util.find_spec("cudnn") is None, reason="cuDNN FE is not installed here")


@requires_blackwell
@requires_cudnn
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_nvfp4_matches_cudnn_fe_itself(act: str, seed: int) -> None:
    """dglu's wrapper and cuDNN FE's on the same NVFP4 inputs (its dense default path compiles
    the same cubin: tests/cpu/test_sm100_blockscaled_parity.py): D_row bitwise, amax bitwise
    (-inf for the empty experts in both), dprob to the atomics' order."""
    from cudnn import grouped_gemm_dglu_wrapper_sm100

    inputs = nvfp4_inputs(act, seed)
    rest, a, sfa, b, sfb, act_func, act_params = inputs
    _variant("e2m1x2", act_func, False, "dense")
    dprob_ours, dprob_theirs = initial_dprob(SHAPE.m, seed, DEVICE), initial_dprob(SHAPE.m, seed, DEVICE)
    d_row, amax, _ = _nvfp4_call("wrapper", inputs, False, dprob_ours)
    theirs = grouped_gemm_dglu_wrapper_sm100(
        a_tensor=a, c_tensor=rest.c, sfa_tensor=sfa, padded_offsets=rest.padded_offsets, alpha_tensor=rest.alpha,
        beta_tensor=rest.beta, prob_tensor=rest.prob, dprob_tensor=dprob_theirs, b_tensor=b, sfb_tensor=sfb,
        d_dtype=torch.bfloat16, sf_vec_size=16, act_func=act_func, **act_params,
    )
    torch.cuda.synchronize()
    valid = SHAPE.valid_m
    assert torch.equal(_bytes(d_row[:valid]), _bytes(theirs["d_row_tensor"][:valid]))
    assert torch.equal(_bytes(amax), _bytes(theirs["amax_tensor"]))
    torch.testing.assert_close(dprob_ours[:valid], dprob_theirs[:valid], rtol=1e-3, atol=1e-3)


@requires_blackwell
@requires_cudnn
@pytest.mark.parametrize(("act", "mode"), list(itertools.product(ACTIVATIONS, ("dense", "discrete"))))
def test_mxfp8_matches_cudnn_fe_itself(act: str, mode: str, seed: int) -> None:
    """dglu's wrapper and cuDNN FE's on the same MXFP8 inputs: D_row, D_col, SFD_row and
    SFD_col bitwise, dprob to the atomics' order."""
    from cudnn import grouped_gemm_dglu_wrapper_sm100

    config = MxConfig(act, dbias=False, weight_mode=mode)
    _variant("e4m3", config.act_func, False, mode)
    x = make_mx_inputs(config, SHAPE, seed, DEVICE)
    norm_const = torch.tensor([0.5], dtype=torch.float32, device=DEVICE)
    dprob_ours, dprob_theirs = initial_dprob(SHAPE.m, seed, DEVICE), initial_dprob(SHAPE.m, seed, DEVICE)
    ours = _mx_call(config, x, "wrapper", dprob_ours, norm_const)
    r = x.rest
    theirs = grouped_gemm_dglu_wrapper_sm100(
        a_tensor=x.a, c_tensor=x.c, sfa_tensor=x.sfa, padded_offsets=r.padded_offsets, alpha_tensor=r.alpha,
        beta_tensor=r.beta, prob_tensor=r.prob, dprob_tensor=dprob_theirs, norm_const_tensor=norm_const,
        d_dtype=config.d_dtype, sf_vec_size=32, **_weights(x, config.discrete, "wrapper"), **config.act_kwargs(),
    )
    torch.cuda.synchronize()
    valid = SHAPE.valid_m
    for name, mine in zip(("d_row", "d_col"), ours[:2], strict=True):
        assert torch.equal(_bytes(mine[:valid]), _bytes(theirs[f"{name}_tensor"][:valid])), name
    for name, mine in zip(("sfd_row", "sfd_col"), ours[2:4], strict=True):
        assert torch.equal(_bytes(mine), _bytes(theirs[f"{name}_tensor"])), name
    torch.testing.assert_close(dprob_ours[:valid], dprob_theirs[:valid], rtol=1e-3, atol=1e-3)
