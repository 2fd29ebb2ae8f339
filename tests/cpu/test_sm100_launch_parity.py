"""Launch parity with cuDNN FE, on the CPU: for the same calls, the launches dglu's runtime
makes from a shipped sm100 variant's manifest entry equal the launches of the host code the
DSL generates from cuDNN FE's kernel (its ``__call__``: grid, cluster, shared memory, TMA
descriptors, parameter packing), all captured through one stand-in libcuda.so.1
(launch_trace/libcuda_trace.c, LD_PRELOADed into a subprocess).

Against the DSL's host code for the same symbolic-N/K cubin: kernel symbols and order;
grid, block, dynamic shared memory; the cluster launch attribute (dglu sets none for a
1x1x1 cluster; the DSL's other two, programmatic stream serialization and cooperative, are
0, their defaults, which dglu leaves unset); every parameter byte but the 128-byte TMA
descriptors and the struct pads the DSL leaves unwritten; of each descriptor its address,
dims and box. Its strides there are not a reference: the DSL's host code for symbolic
layouts writes other strides than the tensor's (0 for A's), while the kernel reads them
from nowhere else. So the descriptors are also compared with those of cuDNN FE's own
static-shape configuration of the same call (the configuration its API compiles), whose
host code encodes them from static strides: address, byte strides (of dimensions of extent
> 1), dims and box, decoded from the hardware format. The rest of a descriptor (element type, swizzle, interleave, L2
promotion, OOB fill, in word 1's lower half, an undocumented packing) needs a real
driver's cuTensorMapEncodeTiled of dglu's arguments: tests/gpu/test_sm100_tma_descriptors.py,
which runs on any CUDA machine. Not compared either: the kernel attribute each sets before
launching (the DSL: max dynamic shared memory = the device's opt-in maximum and
non-portable cluster sizes allowed; dglu: max dynamic shared memory = what the kernel uses,
enough for its launch)."""

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
SYMBOLIC_FIELDS = ("address", "dims", "box")  # of a descriptor the symbolic host code writes right


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
    theirs, ours, static = phases["dsl"], phases["dglu"], phases["static"]
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
                decoded = dsl_descriptor(reference, len(encoded["dims"]))
                assert {field: encoded[field] for field in SYMBOLIC_FIELDS} == {field: decoded[field] for field in SYMBOLIC_FIELDS}, spec.name
            elif spec.kind == "pointer_i32s":
                written = 8 + 4 * len(spec.values)  # the rest is padding the DSL leaves unwritten
                assert mine[:written] == reference[:written], spec.name
            else:
                assert mine == reference, spec.name
    # the descriptors against those cuDNN FE's static configuration encodes for this call
    ours_maps = [bytes.fromhex(p["bytes"]) for launch in ours for p in launch["params"] if bytes.fromhex(p["bytes"])[:4] == b"TMAP"]
    (static_main,) = [launch for launch in static if launch["kernel"].startswith("cudnn_static_main")]
    static_maps = [bytes.fromhex(p["bytes"]) for p in static_main["params"] if p["size"] == 128]
    assert len(ours_maps) == len(static_maps) == 4  # A, B, C, D of the main kernel
    for mine, reference in zip(ours_maps, static_maps, strict=True):
        encoded = encode_arguments(mine)
        decoded = dsl_descriptor(reference, len(encoded["dims"]))
        assert {f: encoded[f] for f in ("address", "dims", "box")} == {f: decoded[f] for f in ("address", "dims", "box")}
        assert _used_strides(encoded) == _used_strides(decoded)


def _used_strides(descriptor: dict) -> list[int | None]:
    """The byte strides past the innermost dimension, None for a dimension of extent 1 (no
    address depends on it: dglu writes B's expert stride there, the DSL 0)."""
    return [stride if dim > 1 else None for stride, dim in zip(descriptor["strides"], descriptor["dims"][1:])]


def test_the_calls_cover_both_activations_dbias_discrete_n_major_dynamic_and_both_tiles():
    assert {v.act_func for v in VARIANTS} == {"dswiglu", "dgeglu"}
    assert {v.dbias for v in VARIANTS} == {True, False}
    assert {(v.weight_mode, v.b_major) for v in VARIANTS} == {("dense", "k"), ("discrete", "k"), ("discrete", "n")}
    assert {v.scheduler for v in VARIANTS} == {"static", "dynamic"}
    assert {(v.tile_m, v.tile_n) for v in VARIANTS} == {(256, 256), (256, 128), (128, 256), (128, 128)}
    assert {v.arch for v in VARIANTS} == {"sm_100a", "sm_103a"}
