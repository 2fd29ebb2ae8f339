"""Launch parity with cuDNN FE for the block-scaled family, on the CPU: for the same calls,
the launches dglu's runtime makes from a shipped sm100_blockscaled variant's manifest entry
equal the launches of the host code the DSL generates from cuDNN FE's kernel, both through
the stand-in libcuda.so.1 (launch_trace/; the checks in launch_trace/parity.py, as
tests/cpu/test_sm100_launch_parity.py for BF16).

Against the DSL's host code for the same symbolic cubin: kernel symbols and order; grid,
block, dynamic shared memory, the cluster attribute; every parameter byte but the TMA
descriptors and the struct pads the DSL leaves unwritten (the two MMA states, the
{pointer, extents} structs of prob, dprob, dbias, SFD_row and SFD_col, the atom counts of
the scale-factor TMA tensors, l, n, k); of each descriptor, the scale factors' included, its
address, element type, swizzle, L2 promotion, dims and box (all four of SFB's). The
descriptors' byte strides are compared with those cuDNN FE's static configuration encodes
for the call (``CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0``; discrete: its own), with the same
fields. What of a descriptor is not decoded: launch_trace/traces.py.

MXFP8 and NVFP4. NVFP4's A and B are float4_e2m1fn_x2 tensors (K/2 bytes a row) that dglu
encodes as UINT8 maps, where cuDNN FE's host code encodes a packed 4-bit type of K values;
compared in bytes (launch_trace/parity.py: the same bytes, swizzle and bounds). The NVFP4
1-CTA call (128x256, 1x1) is compared with the symbolic host code only: the static
configuration's compile of that variant crashes inside the DSL here (not investigated)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu_build.specs import parse_specs  # noqa: E402
from tests.cpu.launch_trace.parity import (  # noqa: E402
    built_artifacts,
    check_against_dsl,
    check_static_descriptors,
    manifest_entry,
    stand_in,  # noqa: F401 (a fixture)
)
from tests.cpu.launch_trace.traces import trace_call  # noqa: E402

pytestmark = pytest.mark.slow

PROBLEM = {"m": 1536, "n": 384, "k": 2048}  # every extent and atom count distinct
MXFP8 = """
defaults: {ab_dtype: e4m3, c_dtype: bf16, d_dtype: e4m3, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: false}
variants:
  - {}
  - {act_func: dsituglu, dbias: true, experts: 16, arch: sm_103a}
  - {act_func: dgeglu, weight_mode: discrete, dbias: true}
  - {weight_mode: discrete, b_major: n, scheduler: dynamic, experts: 4}
  - {scheduler: dynamic, c_dtype: e4m3, ab_dtype: e5m2}
  - {tile_m: 128, cluster_m: 1, dbias: true, c_dtype: fp32}
"""
NVFP4 = """
defaults: {ab_dtype: e2m1x2, c_dtype: bf16, d_dtype: bf16, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: false}
variants:
  - {}
  - {act_func: dsituglu, weight_mode: discrete, dbias: true}
  - {act_func: dgeglu, dbias: true, experts: 16, arch: sm_103a, scheduler: dynamic}
  - {tile_m: 128, cluster_m: 1, act_func: dgeglu}
"""
VARIANTS = parse_specs(MXFP8) + parse_specs(NVFP4)
NO_STATIC = {"sm100a_e2m1x2_bf16_bf16_dgeglu_nodbias_dense_k_128x256_1x1_static_e8"}  # see the docstring


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return built_artifacts(VARIANTS, tmp_path_factory.mktemp("sm100_blockscaled"))


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_dglu_launches_what_cudnn_fes_host_code_launches(stand_in, artifacts, variant, tmp_path):  # noqa: F811
    static = variant.name not in NO_STATIC
    phases = trace_call(stand_in, artifacts, variant, PROBLEM, tmp_path / "trace.jsonl", static=static)
    entry = manifest_entry(artifacts, variant)
    check_against_dsl(entry, phases["dsl"], phases["dglu"])
    if static:
        check_static_descriptors(entry, phases["dglu"], phases["static"])


def test_the_calls_cover_both_recipes_three_activations_dbias_discrete_n_major_dynamic_both_tiles_and_archs():
    assert {v.ab_dtype for v in VARIANTS} == {"e4m3", "e5m2", "e2m1x2"}
    for recipe in (parse_specs(MXFP8), parse_specs(NVFP4)):
        assert {v.act_func for v in recipe} == {"dswiglu", "dgeglu", "dsituglu"}
        assert {v.dbias for v in recipe} == {True, False}
        assert {v.weight_mode for v in recipe} == {"dense", "discrete"}
        assert {(v.tile_m, v.tile_n) for v in recipe} == {(256, 256), (128, 256)}
        assert {v.arch for v in recipe} == {"sm_100a", "sm_103a"}
        assert {v.scheduler for v in recipe} == {"static", "dynamic"}
    assert ("discrete", "n") in {(v.weight_mode, v.b_major) for v in VARIANTS}
    assert NO_STATIC <= {v.name for v in VARIANTS}


# Key choices added after the first six calls: the options cuDNN FE's kernel compiles in
# (SFD_col in each expert's own block: its {pointer, extents} struct is then SFD_row's; one
# expert whose rows are A's M: padded_offsets still a parameter, never read), and N-major
# dense B
COMPILED_OPTION_SPECS = """
defaults: {ab_dtype: e4m3, c_dtype: bf16, d_dtype: e4m3, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: false}
variants:
  - {discrete_col_sfd: true}
  - {act_func: dgeglu, weight_mode: discrete, dbias: true, discrete_col_sfd: true, scheduler: dynamic, arch: sm_103a}
  - {use_single_group_runtime_offsets: true, experts: 1}
  - {act_func: dsituglu, use_single_group_runtime_offsets: true, discrete_col_sfd: true, experts: 1,
     tile_m: 128, cluster_m: 1}
  # N-major dense B (cuDNN FE's canonical (L, K, N) form, N and K symbolic on its default path)
  - {b_major: n}
  - {b_major: n, act_func: dgeglu, dbias: true, scheduler: dynamic, tile_m: 128, cluster_m: 1, ab_dtype: e5m2,
     arch: sm_103a}
"""
COMPILED_OPTION_VARIANTS = parse_specs(COMPILED_OPTION_SPECS)


@pytest.fixture(scope="module")
def compiled_option_artifacts(tmp_path_factory) -> Path:
    return built_artifacts(COMPILED_OPTION_VARIANTS, tmp_path_factory.mktemp("sm100_blockscaled_options"))


@pytest.mark.parametrize("variant", COMPILED_OPTION_VARIANTS, ids=[variant.name for variant in COMPILED_OPTION_VARIANTS])
def test_added_key_choices_launch_what_cudnn_fes_host_code_launches(stand_in, compiled_option_artifacts, variant,
                                                                    tmp_path):
    assert variant.discrete_col_sfd or variant.use_single_group_runtime_offsets or variant.b_major == "n"
    test_dglu_launches_what_cudnn_fes_host_code_launches(stand_in, compiled_option_artifacts, variant, tmp_path)
