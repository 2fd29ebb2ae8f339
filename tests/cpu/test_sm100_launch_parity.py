"""Launch parity with cuDNN FE, on the CPU: for the same calls, the launches dglu's runtime
makes from a shipped sm100 variant's manifest entry equal the launches of the host code the
DSL generates from cuDNN FE's kernel (its ``__call__``: grid, cluster, shared memory, TMA
descriptors, parameter packing), all captured through one stand-in libcuda.so.1
(launch_trace/libcuda_trace.c, LD_PRELOADed into a subprocess; the checks in
launch_trace/parity.py, shared with the block-scaled family's tier).

Against the DSL's host code for the same symbolic-N/K cubin: kernel symbols and order;
grid, block, dynamic shared memory; the cluster launch attribute (dglu sets none for a
1x1x1 cluster; the DSL's other two, programmatic stream serialization and cooperative, are
0, their defaults, which dglu leaves unset); every parameter byte but the 128-byte TMA
descriptors and the struct pads the DSL leaves unwritten; of each descriptor its address,
element type, swizzle, L2 promotion, dims and box (decoded from the hardware format:
launch_trace/traces.py says how far). Its strides there are not a reference: the DSL's host
code for symbolic layouts writes other strides than the tensor's (0 for A's), while the
kernel reads them from nowhere else. So the descriptors are also compared with those of
cuDNN FE's own static-shape configuration of the same call (the configuration its API
compiles), whose host code encodes them from static strides: the same fields and the byte
strides (of dimensions of extent > 1). Interleave, OOB fill and element strides are not
located in the format (every map has none, none and 1s: dglu's are checked to be those);
tests/gpu/test_sm100_tma_descriptors.py compares the whole 64 bytes through a real driver's
cuTensorMapEncodeTiled of dglu's arguments, on any CUDA machine. Not compared either: the
kernel attribute each sets before launching (the DSL: max dynamic shared memory = the
device's opt-in maximum and non-portable cluster sizes allowed; dglu: max dynamic shared
memory = what the kernel uses, enough for its launch)."""

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

PROBLEM = {"m": 1024, "n": 512, "k": 1024}
SPECS = """
defaults: {ab_dtype: bf16, c_dtype: bf16, d_dtype: bf16, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: false}
variants:
  - {}
  - {act_func: dgeglu, dbias: true, experts: 16}
  - {act_func: dgeglu, act_params: {geglu_alpha: 1.0, glu_clamp_max: 10.0, glu_clamp_min: -10.0, linear_offset: 0.0},
     arch: sm_103a, experts: 16}
  - {weight_mode: discrete, dbias: true}
  - {weight_mode: discrete, b_major: n, experts: 4}
  - {scheduler: dynamic}
  - {tile_m: 128, tile_n: 128, cluster_m: 1, dbias: true}
  - {c_dtype: fp32, d_dtype: fp16}
  - {tile_n: 128, dbias: true}
  - {tile_m: 128, tile_n: 256, cluster_m: 1, act_func: dgeglu, arch: sm_103a}
"""
VARIANTS = parse_specs(SPECS)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return built_artifacts(VARIANTS, tmp_path_factory.mktemp("sm100"))


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_dglu_launches_what_cudnn_fes_host_code_launches(stand_in, artifacts, variant, tmp_path):  # noqa: F811
    phases = trace_call(stand_in, artifacts, variant, PROBLEM, tmp_path / "trace.jsonl")
    entry = manifest_entry(artifacts, variant)
    check_against_dsl(entry, phases["dsl"], phases["dglu"])
    check_static_descriptors(entry, phases["dglu"], phases["static"])


def test_the_calls_cover_both_activations_dbias_discrete_n_major_dynamic_and_both_tiles():
    assert {v.act_func for v in VARIANTS} == {"dswiglu", "dgeglu"}
    assert {v.dbias for v in VARIANTS} == {True, False}
    assert {(v.weight_mode, v.b_major) for v in VARIANTS} == {("dense", "k"), ("discrete", "k"), ("discrete", "n")}
    assert {v.scheduler for v in VARIANTS} == {"static", "dynamic"}
    assert {(v.tile_m, v.tile_n) for v in VARIANTS} == {(256, 256), (256, 128), (128, 256), (128, 128)}
    assert {v.arch for v in VARIANTS} == {"sm_100a", "sm_103a"}
