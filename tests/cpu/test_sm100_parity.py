"""Cubin parity with cuDNN FE: for static configurations cuDNN FE's own BF16 path builds
(``GroupedGemmDgluBf16API(...).check_support(); .compile()`` on CPU torch tensors, its
three device queries stubbed: bench.cudnn_fe), dglu's compile step, given the same N, K and L, writes a byte-identical
cubin. The shipped variants differ from these in one way only: N and K are symbolic
(checked against their own cubins in test_default_build.py and launched as cuDNN FE's host
code launches them in test_sm100_launch_parity.py)."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu_build.kernels.sm100_bf16.config import Config  # noqa: E402
from dglu_build.kernels.sm100_bf16.compile import compile_cubin  # noqa: E402
from bench.cudnn_fe import cudnn_fe_compile  # noqa: E402

pytestmark = pytest.mark.slow

class Case(NamedTuple):
    """One static configuration: the variant's key fields and the problem's N, K, L."""

    name: str
    key: dict[str, Any]
    n: int
    k: int


def _key(**fields: Any) -> dict[str, Any]:
    base = {
        "arch": "sm_100a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
        "act_params": {}, "dbias": False, "weight_mode": "dense", "b_major": "k", "tile_m": 256, "tile_n": 256,
        "cluster_m": 2, "cluster_n": 1, "scheduler": "static", "experts": 8,
    }
    return {**base, **fields}


SEED_GEGLU = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0}
DSV4_GEGLU = {"geglu_alpha": 1.0, "glu_clamp_max": 10.0, "glu_clamp_min": -10.0, "linear_offset": 0.0}
CASES = [
    Case("dswiglu_dense_256x256", _key(), 2048, 4096),
    Case("dgeglu_dense_dbias_256x256", _key(act_func="dgeglu", act_params=SEED_GEGLU, dbias=True), 1536, 2048),
    Case("dgeglu_dsv4_dense_256x256_sm103a", _key(arch="sm_103a", act_func="dgeglu", act_params=DSV4_GEGLU, experts=16), 1024, 2048),
    Case("dswiglu_discrete_dbias_256x256", _key(weight_mode="discrete", dbias=True), 2048, 1024),
    Case("dswiglu_discrete_n_major_256x256", _key(weight_mode="discrete", b_major="n", experts=4), 1024, 1024),
    Case("dswiglu_dense_n_major_dynamic_256x256", _key(b_major="n", scheduler="dynamic"), 1024, 2048),
    Case("dswiglu_dense_dbias_128x128_1cta", _key(tile_m=128, tile_n=128, cluster_m=1, dbias=True), 1024, 1024),
    Case("dgeglu_discrete_128x128_fp32_cd", _key(tile_m=128, tile_n=128, cluster_m=1, act_func="dgeglu", act_params=SEED_GEGLU,
                                                 weight_mode="discrete", c_dtype="fp32", d_dtype="fp32"), 512, 1024),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_dglu_compiles_cudnn_fes_static_configuration_byte_for_byte(case):
    prefix = f"dglu_parity_{case.name}"
    config = Config.parse(case.key)
    ours, _ = compile_cubin(config, prefix, static_nk=(case.n, case.k))
    theirs = cudnn_fe_compile(config, case.n, case.k, symbol_prefix=prefix).cubin
    assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest()
    assert ours == theirs


def test_the_cases_cover_both_activations_dbias_discrete_and_two_tiles():
    keys = [case.key for case in CASES]
    assert {key["act_func"] for key in keys} == {"dswiglu", "dgeglu"}
    assert {key["dbias"] for key in keys} == {True, False}
    assert {key["weight_mode"] for key in keys} == {"dense", "discrete"}
    assert {(key["tile_m"], key["tile_n"]) for key in keys} >= {(256, 256), (128, 128)}
    assert {key["arch"] for key in keys} == {"sm_100a", "sm_103a"}
