"""Launch parity with cuDNN FE for the block-scaled family, on the CPU: for the same calls,
the launches dglu's runtime makes from a shipped sm100_blockscaled variant's manifest entry
equal the launches of the host code the DSL generates from cuDNN FE's kernel, both through
the stand-in libcuda.so.1 (launch_trace/, as tests/cpu/test_sm100_launch_parity.py for BF16).

Against the DSL's host code for the same symbolic cubin: kernel symbols and order; grid,
block, dynamic shared memory, the cluster attribute; every parameter byte but the TMA
descriptors and the struct pads the DSL leaves unwritten (the two MMA states, the
{pointer, extents} structs of prob, dprob, dbias, SFD_row and SFD_col, the atom counts of
the scale-factor TMA tensors, l, n, k); of each descriptor, the scale factors' included, its
address, dims and box. The descriptors' byte strides are compared with those cuDNN FE's
static configuration encodes for the call (``CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0``; discrete:
its own). Element type, swizzle, L2 promotion and OOB fill (the hardware format's word 1) are
not decoded here: they need a real driver's cuTensorMapEncodeTiled of dglu's arguments
(tests/gpu/test_sm100_tma_descriptors.py's method; not yet run for these maps).
MXFP8 variants only (launch_trace/blockscaled_calls.py says why not NVFP4)."""

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

PROBLEM = {"m": 1536, "n": 384, "k": 2048}  # every extent and atom count distinct
SPECS = """
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
VARIANTS = parse_specs(SPECS)
CLUSTER_ATTRIBUTE = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
DECODED_RANK = 3  # dsl_descriptor decodes the dims of the first three dimensions


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    built = build_stand_in(tmp_path_factory.mktemp("stand_in"))
    if built is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    return built


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sm100_blockscaled") / "artifacts"
    build_artifacts(VARIANTS, out, jobs=2, progress=lambda line: None)
    return out


def _fields(descriptor: dict, *names: str) -> dict:
    found = {name: descriptor[name] for name in names}
    if "dims" in found:
        found["dims"] = found["dims"][:DECODED_RANK]
    if "box" in found:
        found["box"] = found["box"][:DECODED_RANK]
    return found


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
        if CLUSTER_ATTRIBUTE in dsl_attrs:
            no_cluster = [1, 1, 1, 0]
            assert dglu_attrs.get(CLUSTER_ATTRIBUTE, no_cluster)[:3] == dsl_attrs[CLUSTER_ATTRIBUTE][:3] == list(kernel.cluster)
        assert set(dglu_attrs) <= {CLUSTER_ATTRIBUTE}
        assert [(p["off"], p["size"]) for p in dglu["params"]] == [(p["off"], p["size"]) for p in dsl["params"]]
        for spec, mine, reference in zip(kernel.params, dglu["params"], dsl["params"], strict=True):
            mine, reference = bytes.fromhex(mine["bytes"]), bytes.fromhex(reference["bytes"])
            if spec.kind == "tensormap":
                encoded = encode_arguments(mine)
                decoded = dsl_descriptor(reference, min(len(encoded["dims"]), DECODED_RANK))
                assert _fields(encoded, "address", "dims", "box") == _fields(decoded, "address", "dims", "box"), spec.name
            elif spec.kind == "pointer_i32s":
                written = 8 + 4 * len(spec.values)  # the rest is padding the DSL leaves unwritten
                assert mine[:written] == reference[:written], spec.name
            else:
                assert mine == reference, spec.name
    # the main kernel's descriptors against those cuDNN FE's static configuration encodes
    (main,) = [launch for launch in ours if launch["kernel"].endswith(tuple(f"main_{i}" for i in range(4)))]
    ours_maps = [bytes.fromhex(p["bytes"]) for p in main["params"] if bytes.fromhex(p["bytes"])[:4] == b"TMAP"]
    (static_main,) = [launch for launch in static if "cudnn_static_main" in launch["kernel"]]
    static_maps = [bytes.fromhex(p["bytes"]) for p in static_main["params"] if p["size"] == 128]
    assert len(ours_maps) == len(static_maps) == 7  # A, B, SFA, SFB, C, D_row, D_col
    for mine, reference in zip(ours_maps, static_maps, strict=True):
        encoded = encode_arguments(mine)
        decoded = dsl_descriptor(reference, min(len(encoded["dims"]), DECODED_RANK))
        assert _fields(encoded, "address", "dims", "box") == _fields(decoded, "address", "dims", "box")
        assert _used_strides(encoded) == _used_strides(decoded)


def _used_strides(descriptor: dict) -> list[int | None]:
    """The byte strides past the innermost dimension (of the decoded ones), None for a
    dimension of extent 1 (no address depends on it)."""
    dims = descriptor["dims"][1:DECODED_RANK]
    return [stride if dim > 1 else None for stride, dim in zip(descriptor["strides"], dims)]


def test_the_calls_cover_three_activations_dbias_discrete_n_major_dynamic_both_tiles_and_archs():
    assert {v.act_func for v in VARIANTS} == {"dswiglu", "dgeglu", "dsituglu"}
    assert {v.dbias for v in VARIANTS} == {True, False}
    assert {(v.weight_mode, v.b_major) for v in VARIANTS} == {("dense", "k"), ("discrete", "k"), ("discrete", "n")}
    assert {v.scheduler for v in VARIANTS} == {"static", "dynamic"}
    assert {(v.tile_m, v.tile_n) for v in VARIANTS} == {(256, 256), (128, 256)}
    assert {v.arch for v in VARIANTS} == {"sm_100a", "sm_103a"}


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
    out = tmp_path_factory.mktemp("sm100_blockscaled_options") / "artifacts"
    build_artifacts(COMPILED_OPTION_VARIANTS, out, jobs=2, progress=lambda line: None)
    return out


@pytest.mark.parametrize("variant", COMPILED_OPTION_VARIANTS, ids=[variant.name for variant in COMPILED_OPTION_VARIANTS])
def test_added_key_choices_launch_what_cudnn_fes_host_code_launches(stand_in, compiled_option_artifacts, variant,
                                                                    tmp_path):
    assert variant.discrete_col_sfd or variant.use_single_group_runtime_offsets or variant.b_major == "n"
    test_dglu_launches_what_cudnn_fes_host_code_launches(stand_in, compiled_option_artifacts, variant, tmp_path)
