"""From a call's tensors and arguments to the variant it runs (dglu.api's selection step).

The device and the installed variants are stand-ins: an H200 and a hand-written artifact
directory with the kinds of variants the wheel ships (dtype pairs, tiles, activations and
their constants, discrete weights of both b_majors, the dynamic scheduler, a 2x1 cluster),
listed in name order as the build writes them (so "dynamic" before "static"). What is
checked: the request each call makes (a call that asks for nothing special gets the
dense, static, 1x1 variant), and the missing-variant error naming the arguments behind
each field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")
import stand_ins  # noqa: E402
from conftest_runtime import GEGLU_DEFAULTS, variant_key, variant_name, write_artifacts
from dglu import call
from dglu.errors import VariantNotFoundError
from dglu.manifest import read_manifest
from conftest_runtime import bf16_policy
from dglu.options import check_options
from dglu.weights import DiscreteWeights

DSV4 = {"geglu_alpha": 1.0, "glu_clamp_max": 10.0, "glu_clamp_min": -10.0, "linear_offset": 0.0}
SITU = {"situ_beta1": 4.0, "situ_beta2": 25.0}
KEYS = [
    variant_key(scheduler="dynamic"),
    variant_key(cluster_m=2),
    variant_key(weight_mode="discrete", b_major="k"),
    variant_key(weight_mode="discrete", b_major="n"),
    variant_key(c_dtype="fp32", d_dtype="bf16", tile_n=64),
    variant_key(tile_n=64),
    variant_key(),
    variant_key(c_dtype="fp16", d_dtype="fp16"),
    variant_key(c_dtype="bf16", d_dtype="fp32", tile_n=64),
    variant_key(act_func="dgeglu", dbias=False),
    variant_key(act_func="dgeglu", act_params=DSV4, dbias=False),
    variant_key(act_func="dsituglu", act_params=SITU, dbias=False),
]
DEFAULTS = dict(
    acc_dtype=None,
    mma_tiler_mn=None,
    cluster_shape_mn=None,
    sf_vec_size=16,
    vector_f32=False,
    m_aligned=256,
    discrete_col_sfd=False,
    act_func="dswiglu",
    **GEGLU_DEFAULTS,
    **SITU,
    b_major="k",
    epilogue_op=None,
    use_dynamic_sched=False,
)


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_artifacts(tmp_path, KEYS)
    variants = read_manifest(tmp_path).variants
    stand_ins.install(monkeypatch, variants, tmp_path)
    return variants


TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def select(c_dtype="bf16", d_dtype="bf16", dbias=True, weights="dense", **arguments):
    options = check_options(**{**DEFAULTS, **arguments}, policy=bf16_policy())
    discrete = DiscreteWeights(n=96, n_from="n") if weights == "discrete" else None
    config = call.OpConfig(weights, discrete, options, d_dtype, dbias, bf16_policy())
    tensors = {
        "a": ("a_tensor", torch.zeros(1, 8, dtype=torch.bfloat16)),
        "c": ("c_tensor", torch.zeros(1, 8, dtype=TORCH_DTYPES[c_dtype])),
        "padded_offsets": ("padded_offsets", torch.zeros(4, dtype=torch.int32)),
    }
    return call.select(config, tensors, call.WRAPPER_SOURCES)


@pytest.mark.parametrize(
    ("call", "key"),
    [
        ({}, KEYS[6]),  # 128x128 over 128x64, whatever their order; static, 1x1, dense
        ({"mma_tiler_mn": (128, 64)}, KEYS[5]),
        ({"c_dtype": "fp32"}, KEYS[4]),
        ({"c_dtype": "fp16", "d_dtype": "fp16"}, KEYS[7]),
        ({"d_dtype": "fp32"}, KEYS[8]),
        ({"act_func": "dgeglu", "dbias": False}, KEYS[9]),
        ({"act_func": "dgeglu", "dbias": False, **DSV4}, KEYS[10]),
        ({"act_func": "dsituglu", "dbias": False}, KEYS[11]),
        ({"use_dynamic_sched": True}, KEYS[0]),
        ({"use_dynamic_sched": False, "cluster_shape_mn": (1, 1)}, KEYS[6]),
        ({"cluster_shape_mn": (2, 1)}, KEYS[1]),
        ({"weights": "discrete"}, KEYS[2]),
        ({"weights": "discrete", "b_major": "n"}, KEYS[3]),
    ],
    ids=lambda v: variant_name(v) if isinstance(v, dict) and "arch" in v else str(v),
)
def test_a_call_selects_the_variant_of_its_dtypes_and_constants(installed, call, key) -> None:
    assert select(**call).name == variant_name(key)


@pytest.mark.parametrize(
    ("call", "fragments"),
    [
        (
            {"c_dtype": "fp32", "mma_tiler_mn": (128, 128)},
            ["c_dtype=fp32 (from c_tensor)", "tile_n=128 (from mma_tiler_mn)", "--tile 128x128"],
        ),
        (
            {"c_dtype": "fp16", "d_dtype": "fp32"},
            ["d_dtype=fp32 (from d_dtype)", "--c-dtype fp16 --d-dtype fp32"],
        ),
        (
            {"act_func": "dsituglu", "dbias": False, "situ_beta2": 12.0},
            [
                "act_params={'situ_beta1': 4.0, 'situ_beta2': 12.0} (from situ_beta1, situ_beta2)",
                "--act-param situ_beta2=12.0",
            ],
        ),
        (
            {"act_func": "dgeglu", "dbias": True, **DSV4},
            ["dbias=True (from generate_dbias)", "(from geglu_alpha, glu_clamp_max,", "--dbias"],
        ),
        ({"dbias": False}, ["act_params={} (from act_func)", "--no-dbias"]),
        (
            {"weights": "discrete", "mma_tiler_mn": (128, 64)},
            ["weight_mode=discrete (from b_tensor or b_ptrs)", "--weight-mode discrete"],
        ),
        (
            {"weights": "discrete", "b_major": "n", "dbias": False},
            [
                "weight_mode=discrete (from b_tensor or b_ptrs), b_major=n (from b_major)",
                "--no-dbias --weight-mode discrete --b-major n",
            ],
        ),
        (
            {"use_dynamic_sched": True, "cluster_shape_mn": (2, 1)},
            [
                "cluster_m=2 (from cluster_shape_mn)",
                "scheduler=dynamic (from use_dynamic_sched)",
                "--cluster 2x1 --scheduler dynamic",
            ],
        ),
    ],
)
def test_a_missing_variant_names_the_arguments_behind_it(installed, call, fragments) -> None:
    with pytest.raises(VariantNotFoundError) as error:
        select(**call)
    message = str(error.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message}"


# the dispatch table: N above 2048 on the 2x1 cluster, N up to 1024 on the 128x64 tile
RULES = [
    {"arch": "sm_90a", "when": {"min_m": 1024, "min_n": 2049}, "choose": {"cluster_m": 2, "cluster_n": 1}},
    {"arch": "sm_90a", "when": {"max_n": 1024}, "choose": {"tile_m": 128, "tile_n": 64}},
]


def select_shaped(m: int, n: int, k: int, experts: int = 4, **arguments):
    """select() for tensors of a problem's shapes (meta tensors: nothing allocated)."""
    options = check_options(**{**DEFAULTS, **arguments}, policy=bf16_policy())
    config = call.OpConfig("dense", None, options, "bf16", True, bf16_policy())
    tensors = {
        "a": ("a_tensor", torch.empty(m, k, 1, dtype=torch.bfloat16, device="meta")),
        "c": ("c_tensor", torch.empty(m, 2 * n, 1, dtype=torch.bfloat16, device="meta")),
        "padded_offsets": ("padded_offsets", torch.empty(experts, dtype=torch.int32, device="meta")),
    }
    return call.select(config, tensors, call.WRAPPER_SOURCES)


@pytest.fixture
def dispatched(installed, tmp_path: Path):
    from dglu.contract.dispatch import DISPATCH_FILE, dispatch_text, read_rule

    (tmp_path / DISPATCH_FILE).write_text(dispatch_text([read_rule(rule, "test") for rule in RULES]))
    return installed


def test_an_open_launch_shape_takes_the_dispatch_rule_of_its_problem(dispatched) -> None:
    assert select_shaped(4096, 2880, 512).name == variant_name(KEYS[1])  # 2x1
    assert select_shaped(4096, 768, 512).name == variant_name(KEYS[5])  # 128x64
    # no rule holds (N between the rules, or too few rows for the first): the 1x1 default
    assert select_shaped(4096, 2048, 512).name == variant_name(KEYS[6])
    assert select_shaped(512, 2880, 512).name == variant_name(KEYS[6])


def test_a_given_launch_shape_and_other_arguments_win_over_the_rule(dispatched) -> None:
    # the tile given: no rule applies
    assert select_shaped(4096, 2880, 512, mma_tiler_mn=(128, 128)).name == variant_name(KEYS[6])
    # the cluster given, the tile open: the rule narrows only what the cluster allows
    assert select_shaped(4096, 768, 512, cluster_shape_mn=(1, 1)).name == variant_name(KEYS[5])
    assert select_shaped(4096, 768, 512, cluster_shape_mn=(2, 1)).name == variant_name(KEYS[1])
    # no variant of the rule's choice for the dynamic scheduler: its 1x1 variant
    assert select_shaped(4096, 2880, 512, use_dynamic_sched=True).name == variant_name(KEYS[0])


def test_without_a_dispatch_table_an_open_launch_shape_is_one_cta_with_the_largest_tile(installed) -> None:
    assert select_shaped(4096, 2880, 512).name == variant_name(KEYS[6])
    assert select_shaped(4096, 768, 512).name == variant_name(KEYS[6])


# rules tried in turn: one choosing a consumer no installed variant has (as a ping-pong rule
# is to a block-scaled call), then one whose variant is not installed (128x256), then one
# that serves
RULES_IN_TURN = [
    {"arch": "sm_90a", "when": {}, "choose": {"consumer": "pingpong"}},
    {"arch": "sm_90a", "when": {"max_n": 1024}, "choose": {"tile_m": 128, "tile_n": 64}},
    {"arch": "sm_90a", "when": {"min_n": 2049}, "choose": {"tile_m": 128, "tile_n": 256}},
    {"arch": "sm_90a", "when": {"min_n": 2049}, "choose": {"cluster_m": 2, "cluster_n": 1}},
]


def test_the_first_rule_a_matching_variant_takes_decides(installed, tmp_path: Path) -> None:
    from dglu.contract.dispatch import DISPATCH_FILE, dispatch_text, read_rule

    (tmp_path / DISPATCH_FILE).write_text(dispatch_text([read_rule(rule, "test") for rule in RULES_IN_TURN]))
    assert select_shaped(4096, 768, 512).name == variant_name(KEYS[5])  # past the ping-pong rule: 128x64
    assert select_shaped(4096, 2880, 512).name == variant_name(KEYS[1])  # past 128x256: 2x1
    assert select_shaped(4096, 2048, 512).name == variant_name(KEYS[6])  # only the ping-pong rule holds
    assert select_shaped(4096, 2880, 512, use_dynamic_sched=True).name == variant_name(KEYS[0])
