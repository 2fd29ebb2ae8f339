"""Blackwell (sm_100a, sm_103a): the shipped cuDNN FE kernels through dglu's runtime, every
output element against the float64 reference (the harness the Hopper suite uses), and,
where cuDNN FE is importable on the machine, against cudnn.grouped_gemm_dglu_wrapper_sm100
itself on the same inputs. Skipped on other devices (nothing here has run on Blackwell
hardware yet: the CPU tiers check the cubins' parity with cuDNN FE's, not their results)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from configs import BF16, FP16, FP32, Config
from harness import Case, case_inputs, run_case, run_wrapper
from inputs import Shape, initial_dprob

pytestmark = pytest.mark.gpu

BLACKWELL = {(10, 0), (10, 3)}
PAIR, SINGLE = (256, 256), (128, 128)


def _blackwell() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() in BLACKWELL


requires_blackwell = pytest.mark.skipif(not _blackwell(), reason="needs a Blackwell GPU (compute capability 10.0 or 10.3)")

# M a multiple of 256 (cuDNN FE's rule), L a shipped expert count, an empty expert, N and K
# that leave partial tiles
UNEVEN = Shape(n=352, k=200, expert_rows=(256, 512, 0, 256, 768, 0, 256, 256))
ONE_EXPERT = Shape(n=96, k=64, expert_rows=(512,))
CONFIGS = [
    *(Config(act, BF16, BF16, dbias, tile, cluster=(2, 1) if tile == PAIR else (1, 1))
      for act in ("dswiglu", "dgeglu", "dgeglu_dsv4") for dbias in (True, False) for tile in (PAIR, SINGLE)),
    *(Config("dswiglu", BF16, BF16, True, tile, weight_mode="discrete", b_major=major, cluster=cluster)
      for major in ("k", "n") for tile, cluster in ((PAIR, (2, 1)), (SINGLE, (1, 1)))),
    Config("dswiglu", BF16, BF16, True, PAIR, scheduler="dynamic", cluster=(2, 1)),
    Config("dswiglu", FP32, FP16, False, PAIR, cluster=(2, 1)),
    Config("dswiglu", FP16, FP32, False, SINGLE),
]


@requires_blackwell
@pytest.mark.parametrize("api", ["class", "wrapper"])
@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_shipped_blackwell_variants(config: Config, api: str, seed: int) -> None:
    run_case(Case(config, UNEVEN, seed, api=api))


@requires_blackwell
def test_one_expert(seed: int) -> None:
    run_case(Case(CONFIGS[0], ONE_EXPERT, seed))


@requires_blackwell
@pytest.mark.skipif(importlib.util.find_spec("cudnn") is None, reason="cuDNN FE is not installed here")
@pytest.mark.parametrize("config", [CONFIGS[0], CONFIGS[2], CONFIGS[4], CONFIGS[12]], ids=str)
def test_matches_cudnn_fe_itself(config: Config, seed: int) -> None:
    """dglu's wrapper and cuDNN FE's on the same inputs: D_row and dprob to bf16 rounding
    (the cubins differ only in N and K being symbolic), dbias to the reduction's."""
    from cudnn import grouped_gemm_dglu_wrapper_sm100

    x = case_inputs(Case(config, UNEVEN, seed))
    dprob_ours, dprob_theirs = initial_dprob(UNEVEN.m, seed, "cuda"), initial_dprob(UNEVEN.m, seed, "cuda")
    ours = run_wrapper(config, x, dprob_ours, config.tile)
    theirs = grouped_gemm_dglu_wrapper_sm100(
        a_tensor=x.a, c_tensor=x.c, sfa_tensor=None, padded_offsets=x.padded_offsets, alpha_tensor=x.alpha,
        beta_tensor=x.beta, prob_tensor=x.prob, dprob_tensor=dprob_theirs, b_tensor=x.b, d_dtype=config.d_dtype,
        generate_dbias=config.dbias, mma_tiler_mn=config.tile, cluster_shape_mn=config.cluster,
        **config.act_kwargs(), use_dynamic_sched=config.scheduler == "dynamic",
    )
    torch.cuda.synchronize()
    valid = UNEVEN.valid_m
    torch.testing.assert_close(ours["d_row_tensor"][:valid].float(), theirs["d_row_tensor"][:valid].float(), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(dprob_ours[:valid], dprob_theirs[:valid], rtol=1e-3, atol=1e-3)
    if config.dbias:
        torch.testing.assert_close(ours["dbias_tensor"].float(), theirs["dbias_tensor"].float(), rtol=2e-2, atol=2e-2)


@requires_blackwell
def test_an_expert_count_not_shipped_says_how_to_build_it(seed: int) -> None:
    import dglu

    shape = Shape(n=96, k=64, expert_rows=(256, 256, 256))  # L = 3
    x = case_inputs(Case(CONFIGS[0], shape, seed))
    with pytest.raises(dglu.VariantNotFoundError, match="--experts 3"):
        run_wrapper(CONFIGS[0], x, initial_dprob(shape.m, seed, "cuda"), PAIR)
