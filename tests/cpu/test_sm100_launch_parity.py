"""Launch parity with cuDNN FE, on the CPU: for the same calls, the launches dglu's runtime
makes from a shipped sm100 variant's manifest entry equal the launches of the host code the
DSL generates from cuDNN FE's kernel for that same cubin (its ``__call__``: grid, cluster,
shared memory, TMA descriptors, parameter packing), both captured through one stand-in
libcuda.so.1 (launch_trace/libcuda_trace.c, LD_PRELOADed into a subprocess).

Compared: kernel symbols and order; grid, block, dynamic shared memory; the cluster launch
attribute (dglu sets none for a 1x1x1 cluster; the DSL's other two, programmatic stream serialization and cooperative, are 0,
their defaults, which dglu leaves unset); every parameter byte, except in the 128-byte TMA
descriptors and the struct pads the DSL leaves unwritten. Of a TMA descriptor the DSL writes
only the first 64 bytes, in the hardware's format, while dglu calls cuTensorMapEncodeTiled
(the stand-in records its arguments): compared are the global address, rank, dimensions and
box, decoded from the descriptor. Its strides, element type, swizzle, interleave, L2
promotion, OOB fill and element strides sit in words 1-3 in an undocumented packing: only a
real driver's cuTensorMapEncodeTiled makes them from dglu's arguments, which the gpu tier
does (tests/gpu/test_sm100_tma_descriptors.py). Not compared either: the kernel attribute
each sets before launching (the DSL: max dynamic shared memory = the device's opt-in maximum
and non-portable cluster sizes allowed; dglu: max dynamic shared memory = what the kernel
uses, enough for its launch)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu.contract.reader import read_manifest  # noqa: E402
from dglu_build.build import build_artifacts  # noqa: E402
from dglu_build.specs import parse_specs  # noqa: E402
from tests.cpu.launch_trace.traces import build_stand_in, dsl_descriptor, encode_arguments, trace_call  # noqa: E402

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
CLUSTER_ATTRIBUTE = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    built = build_stand_in(tmp_path_factory.mktemp("stand_in"))
    if built is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    return built


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sm100") / "artifacts"
    build_artifacts(VARIANTS, out, jobs=2, progress=lambda line: None)
    return out


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_dglu_launches_what_cudnn_fes_host_code_launches(stand_in, artifacts, variant, tmp_path):
    phases = trace_call(stand_in, artifacts, variant, PROBLEM, tmp_path / "trace.jsonl")
    theirs, ours = phases["dsl"], phases["dglu"]
    (entry,) = [v for v in read_manifest(artifacts).variants if v.name == variant.name]
    assert [launch["kernel"] for launch in ours] == [kernel.symbol for kernel in entry.kernels]
    assert [launch["kernel"] for launch in theirs] == [launch["kernel"] for launch in ours]
    for kernel, dsl, dglu in zip(entry.kernels, theirs, ours, strict=True):
        assert (dglu["grid"], dglu["block"], dglu["smem"]) == (dsl["grid"], dsl["block"], dsl["smem"]), kernel.role
        dsl_attrs = {a["id"]: a["u32"] for a in dsl["attrs"]}
        dglu_attrs = {a["id"]: a["u32"] for a in dglu["attrs"]}
        if CLUSTER_ATTRIBUTE in dsl_attrs:  # a 1x1x1 cluster is no cluster: dglu leaves it unset
            no_cluster = [1, 1, 1, 0]
            assert dglu_attrs.get(CLUSTER_ATTRIBUTE, no_cluster)[:3] == dsl_attrs[CLUSTER_ATTRIBUTE][:3] == list(kernel.cluster)
        assert all(value[0] == 0 for key, value in dsl_attrs.items() if key != CLUSTER_ATTRIBUTE)
        assert set(dglu_attrs) <= {CLUSTER_ATTRIBUTE}
        assert [(p["off"], p["size"]) for p in dglu["params"]] == [(p["off"], p["size"]) for p in dsl["params"]]
        for spec, mine, reference in zip(kernel.params, dglu["params"], dsl["params"], strict=True):
            mine, reference = bytes.fromhex(mine["bytes"]), bytes.fromhex(reference["bytes"])
            if spec.kind == "tensormap":
                encoded = encode_arguments(mine)
                shown = {field: encoded[field] for field in ("address", "dims", "box")}
                assert shown == dsl_descriptor(reference, len(encoded["dims"])), spec.name
            elif spec.kind == "pointer_i32s":
                written = 8 + 4 * len(spec.values)  # the rest is padding the DSL leaves unwritten
                assert mine[:written] == reference[:written], spec.name
            else:
                assert mine == reference, spec.name


def test_the_calls_cover_both_activations_dbias_discrete_n_major_dynamic_and_both_tiles():
    assert {v.act_func for v in VARIANTS} == {"dswiglu", "dgeglu"}
    assert {v.dbias for v in VARIANTS} == {True, False}
    assert {(v.weight_mode, v.b_major) for v in VARIANTS} == {("dense", "k"), ("discrete", "k"), ("discrete", "n")}
    assert {v.scheduler for v in VARIANTS} == {"static", "dynamic"}
    assert {(v.tile_m, v.tile_n) for v in VARIANTS} == {(256, 256), (256, 128), (128, 256), (128, 128)}
    assert {v.arch for v in VARIANTS} == {"sm_100a", "sm_103a"}
