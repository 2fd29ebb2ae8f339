"""Cubin parity with cuDNN FE's block-scaled compile: for configurations cuDNN FE's own
``GroupedGemmDgluBlockScaledAPI(...).check_support(); .compile()`` builds (on CPU torch
tensors, its device queries stubbed: bench.cudnn_fe), dglu's compile step writes a
byte-identical cubin, both naming the kernels as dglu does.

Dense weights without dbias: cuDNN FE's default path traces M, N and K symbolic, as dglu's
shipped variants are, so there the cubin compared is the one dglu ships. With dbias (cuDNN
FE: a static (L, 2N, 1) dbias) and discrete weights (cuDNN FE: static N and K) dglu's
compile step is run in cuDNN FE's configuration (``shapes="cudnn"``); the shipped variants
differ from it only there (dbias's 2N, and K and 2N of A, C, D and SFA, symbolic), which the
launch-parity tier covers (test_sm100_blockscaled_launch_parity.py)."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu.contract.keys import ACT_PARAM_DEFAULTS  # noqa: E402
from dglu_build.kernels.sm100_blockscaled.compile import compile_cubin  # noqa: E402
from dglu_build.kernels.sm100_blockscaled.config import Config  # noqa: E402
from bench.cudnn_fe import cudnn_fe_blockscaled_compile  # noqa: E402

pytestmark = pytest.mark.slow


class Case(NamedTuple):
    """One configuration: the variant's key fields and the problem's N and K (values)."""

    name: str
    key: dict[str, Any]
    n: int
    k: int

    @property
    def shapes(self) -> str:
        """dglu's shipped compile where cuDNN FE's default path is the same, else cuDNN FE's."""
        return "cudnn" if self.key["dbias"] or self.key["weight_mode"] == "discrete" else "symbolic"


def _key(**fields: Any) -> dict[str, Any]:
    base = {
        "arch": "sm_100a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
        "act_params": {}, "dbias": False, "weight_mode": "dense", "b_major": "k", "tile_m": 256, "tile_n": 256,
        "cluster_m": 2, "cluster_n": 1, "scheduler": "static", "experts": 8,
    }
    if "act_func" in fields and "act_params" not in fields:
        fields["act_params"] = dict(ACT_PARAM_DEFAULTS[fields["act_func"]])
    return {**base, **fields}


NVFP4 = {"ab_dtype": "e2m1x2", "d_dtype": "bf16"}
CASES = [
    Case("mxfp8_dswiglu_dense", _key(), 2048, 4096),
    Case("nvfp4_dswiglu_dense", _key(**NVFP4), 2048, 4096),
    Case("mxfp8_dsituglu_dense_sm103a", _key(arch="sm_103a", act_func="dsituglu", experts=16), 1536, 2048),
    Case("nvfp4_dgeglu_dense_128x256", _key(**NVFP4, act_func="dgeglu", tile_m=128, cluster_m=1), 1024, 2048),
    Case("mxfp8_dswiglu_dense_dbias", _key(dbias=True), 2048, 4096),
    Case("nvfp4_dsituglu_dense_dbias_sm103a", _key(**NVFP4, act_func="dsituglu", dbias=True, arch="sm_103a"), 1024, 1024),
    Case("mxfp8_dgeglu_discrete_dbias", _key(act_func="dgeglu", weight_mode="discrete", dbias=True), 2048, 1024),
    Case("nvfp4_dsituglu_discrete", _key(**NVFP4, act_func="dsituglu", weight_mode="discrete"), 1024, 2048),
    Case("mxfp8_dswiglu_discrete_n_major_dynamic", _key(weight_mode="discrete", b_major="n", scheduler="dynamic",
                                                      experts=4), 1024, 1024),
    # e5m2 A/B (with e4m3 D: e5m2 D fails in CuTe DSL 4.8.1) on the dynamic scheduler, dense: the shipped cubin
    Case("mxfp8_e5m2_dgeglu_dense_dynamic", _key(ab_dtype="e5m2", act_func="dgeglu", scheduler="dynamic"), 1024, 2048),
    # N-major dense B (cuDNN FE's canonical (L, K, N) form): the shipped cubin
    Case("mxfp8_dswiglu_dense_n_major", _key(b_major="n"), 2048, 4096),
    Case("mxfp8_dsituglu_dense_n_major_dbias_128x256_sm103a", _key(b_major="n", act_func="dsituglu", dbias=True,
                                                                   tile_m=128, cluster_m=1, arch="sm_103a"), 1024, 2048),
    # the options cuDNN FE's kernel compiles in (key fields): dense, so the shipped cubin
    Case("mxfp8_dswiglu_dense_discrete_col_sfd", _key(discrete_col_sfd=True), 2048, 4096),
    Case("mxfp8_dgeglu_dense_single_group", _key(act_func="dgeglu", use_single_group_runtime_offsets=True, experts=1),
         1536, 2048),
    Case("nvfp4_dswiglu_dense_single_group_128x256", _key(**NVFP4, use_single_group_runtime_offsets=True, experts=1,
                                                          tile_m=128, cluster_m=1), 1024, 2048),
    Case("mxfp8_dsituglu_discrete_discrete_col_sfd_single_group", _key(
        act_func="dsituglu", weight_mode="discrete", discrete_col_sfd=True, use_single_group_runtime_offsets=True,
        experts=1), 1024, 1024),
]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_dglu_compiles_cudnn_fes_block_scaled_configuration_byte_for_byte(case):
    prefix = f"dglu_parity_{case.name}"
    config = Config.parse(case.key)
    ours, _ = compile_cubin(config, prefix, case.shapes, n=case.n, k=case.k)
    theirs = cudnn_fe_blockscaled_compile(config, case.n, case.k, symbol_prefix=prefix).cubin
    assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest()
    assert ours == theirs


def test_the_cases_cover_both_recipes_three_activations_dense_discrete_and_both_architectures():
    keys = [case.key for case in CASES]
    assert {key["ab_dtype"] for key in keys} == {"e4m3", "e5m2", "e2m1x2"}
    assert {(key["weight_mode"], key["scheduler"]) for key in keys} >= {("dense", "dynamic"), ("discrete", "dynamic")}
    assert {key["act_func"] for key in keys} == {"dswiglu", "dgeglu", "dsituglu"}
    assert {key["dbias"] for key in keys} == {True, False}
    assert {key["weight_mode"] for key in keys} == {"dense", "discrete"}
    assert {key["arch"] for key in keys} == {"sm_100a", "sm_103a"}
    assert {case.shapes for case in CASES} == {"symbolic", "cudnn"}
    assert {(key["ab_dtype"], key["weight_mode"]) for key in keys} >= {
        (ab, mode) for ab in ("e4m3", "e2m1x2") for mode in ("dense", "discrete")}
    assert {key.get("discrete_col_sfd", False) for key in keys} == {True, False}
    assert {key.get("use_single_group_runtime_offsets", False) for key in keys} == {True, False}
