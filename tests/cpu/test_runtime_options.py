"""dglu.options: configuration arguments, and what this backend refuses."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from conftest_runtime import bf16_policy
from dglu.front import dtype_name
from dglu.options import check_m_aligned, check_options

SEED_DEFAULTS = dict(
    acc_dtype=None,
    mma_tiler_mn=None,
    cluster_shape_mn=None,
    sf_vec_size=16,
    vector_f32=False,
    m_aligned=256,
    discrete_col_sfd=False,
    act_func="dswiglu",
    geglu_alpha=1.702,
    glu_clamp_max=7.0,
    glu_clamp_min=-7.0,
    linear_offset=1.0,
    situ_beta1=4.0,
    situ_beta2=25.0,
    b_major="k",
    epilogue_op=None,
    use_dynamic_sched=False,
)


def options(**changes):
    return check_options(**{**SEED_DEFAULTS, **changes}, policy=bf16_policy())


def test_defaults_select_dswiglu_static_and_leave_the_launch_shape_open() -> None:
    chosen = options()
    assert (chosen.act_func, chosen.act_params, chosen.b_major) == ("dswiglu", (), "k")
    # tile and cluster both the selection's (the dispatch table's rule, else one CTA)
    assert (chosen.tile, chosen.cluster, chosen.scheduler) == (None, None, "static")
    assert options(mma_tiler_mn=(128, 128)).cluster == (1, 1)
    assert options(mma_tiler_mn=(256, 256)).cluster == (2, 1)


def test_dgeglu_compiles_in_its_constants() -> None:
    chosen = options(
        act_func="dgeglu", geglu_alpha=1.0, glu_clamp_max=10, glu_clamp_min=-10, linear_offset=0.0
    )
    assert dict(chosen.act_params) == {
        "geglu_alpha": 1.0,
        "glu_clamp_max": 10.0,
        "glu_clamp_min": -10.0,
        "linear_offset": 0.0,
    }


def test_dsituglu_compiles_in_its_betas() -> None:
    chosen = options(act_func="dsituglu", situ_beta1=2, situ_beta2=30.5)
    assert chosen.act_params == (("situ_beta1", 2.0), ("situ_beta2", 30.5))
    assert options(act_func="dsituglu").act_params == (("situ_beta1", 4.0), ("situ_beta2", 25.0))


def test_tile_cluster_and_scheduler() -> None:
    chosen = options(mma_tiler_mn=(128, 64), cluster_shape_mn=[1, 1])
    assert (chosen.tile, chosen.cluster, chosen.scheduler) == ((128, 64), (1, 1), "static")
    chosen = options(cluster_shape_mn=(2, 1), use_dynamic_sched=False)
    assert (chosen.tile, chosen.cluster, chosen.scheduler) == (None, (2, 1), "static")
    chosen = options(use_dynamic_sched=True)
    assert (chosen.cluster, chosen.scheduler) == (None, "dynamic")


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("cd_major", "m", ValueError),
        ("m_aligned", 0, ValueError),
        ("m_aligned", 256.0, ValueError),
        ("sf_vec_size", 32, ValueError),
        ("discrete_col_sfd", True, ValueError),
        ("epilogue_op", "relu", ValueError),
        ("vector_f32", True, NotImplementedError),
        ("act_func", "drelu", ValueError),
        ("b_major", "m", ValueError),
        ("use_dynamic_sched", 1, ValueError),
        ("use_dynamic_sched", None, ValueError),
        ("cluster_shape_mn", (2, 1, 1), ValueError),
        ("cluster_shape_mn", (0, 1), ValueError),
        ("acc_dtype", "torch.float16", ValueError),
        ("mma_tiler_mn", (128,), ValueError),
        ("mma_tiler_mn", (128, 0), ValueError),
        ("cluster_shape_mn", (True, 1), ValueError),
        ("geglu_alpha", 2.0, ValueError),  # not used by the default dswiglu
        ("situ_beta1", 3.0, ValueError),
        ("linear_offset", math.nan, ValueError),
    ],
)
def test_refused_arguments_name_themselves(name, value, error) -> None:
    with pytest.raises(error) as raised:
        options(**{name: value})
    assert str(raised.value).startswith(f"{name}:")
    assert repr(value) in str(raised.value) or str(value) in str(raised.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"act_func": "dsituglu", "situ_beta1": 0.0}, "situ_beta1: must be positive"),
        ({"act_func": "dsituglu", "situ_beta2": -25.0}, "situ_beta2: must be positive"),
        ({"act_func": "dsituglu", "linear_offset": 0.0}, "linear_offset: act_func='dsituglu'"),
        ({"act_func": "dgeglu", "situ_beta2": 20.0}, "situ_beta2: act_func='dgeglu'"),
        (
            {"act_func": "dgeglu", "glu_clamp_min": 7.0},
            "glu_clamp_min: must be below glu_clamp_max (7.0), got 7.0",
        ),
    ],
)
def test_activation_constants_are_checked_for_their_activation(changes, message) -> None:
    with pytest.raises(ValueError) as raised:
        options(**changes)
    assert str(raised.value).startswith(message), str(raised.value)


def test_output_dtype_names_follow_the_familys_rule() -> None:
    torch = pytest.importorskip("torch")
    policy = bf16_policy()
    assert dtype_name(policy, "d_dtype", None) == "bf16"
    assert dtype_name(policy, "d_dtype", torch.float32) == "fp32"
    with pytest.raises(ValueError, match="^d_dtype: expected torch.bfloat16.*got torch.int8"):
        dtype_name(policy, "d_dtype", torch.int8)


def test_m_aligned_must_be_the_variants() -> None:
    variant = SimpleNamespace(name="v128", m_aligned=128)
    check_m_aligned(options(m_aligned=128), variant)
    with pytest.raises(ValueError) as raised:
        check_m_aligned(options(), variant)
    assert str(raised.value) == (
        "m_aligned: must be 128 (variant v128's experts own 128-row aligned ranges), got 256"
    )
