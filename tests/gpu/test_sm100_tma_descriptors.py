"""What the CPU launch-parity tier cannot see (tests/cpu/test_sm100_launch_parity.py): the
TMA descriptors' encoded fields. cuDNN FE's DSL host code writes each descriptor's first 64
bytes itself, in the hardware's format; dglu's runtime asks cuTensorMapEncodeTiled. Here the
arguments dglu passes for a call (recorded by the stand-in driver in a subprocess) are
encoded by this machine's real driver and must give the 64 bytes the host code of cuDNN
FE's own static-shape configuration of that call writes: element type, swizzle,
interleave, L2 promotion and OOB fill included (the stride of a dimension of extent 1,
which no address depends on, aside), for BF16, MXFP8 and NVFP4 variants; NVFP4's A and B,
which dglu encodes as UINT8 pairs where the DSL writes a packed 4-bit type, by their decoded
fields in bytes. The real driver's bytes also check the CPU tier's decoder
(launch_trace/traces.py: inferred, no public spec): decoded, they give back dglu's arguments.
cuTensorMapEncodeTiled takes no architecture, so any CUDA machine (an H200 too) runs this
for the Blackwell variants."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu.contract.reader import read_manifest  # noqa: E402
from dglu_build.build import build_artifacts  # noqa: E402
from dglu_build.specs import parse_specs  # noqa: E402
from tests.cpu.launch_trace.parity import SYMBOLIC_FIELDS, tensor_map_fields  # noqa: E402
from tests.cpu.launch_trace.traces import (  # noqa: E402
    build_stand_in,
    dsl_descriptor,
    encode_arguments,
    trace_call,
    without_unused_strides,
)

pytestmark = pytest.mark.gpu

PROBLEM = {"m": 1024, "n": 512, "k": 1024}
VARIANTS = parse_specs("""
defaults: {ab_dtype: bf16, c_dtype: bf16, d_dtype: bf16, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: true}
variants:
  - {}
  - {weight_mode: discrete, b_major: [k, n]}
  - {tile_m: 128, tile_n: 128, cluster_m: 1, c_dtype: fp32, d_dtype: fp16}
""") + parse_specs("""
defaults: {ab_dtype: e4m3, c_dtype: bf16, d_dtype: e4m3, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: true}
variants:
  - {}
  - {weight_mode: discrete}
  - {ab_dtype: e2m1x2, d_dtype: bf16}
  - {ab_dtype: e2m1x2, d_dtype: bf16, weight_mode: discrete, act_func: dsituglu}
""")


def _real_encode(arguments: dict) -> bytes:
    from cuda.bindings import driver

    (status,) = driver.cuInit(0)
    assert status == driver.CUresult.CUDA_SUCCESS
    rank = len(arguments["dims"])
    status, tensor_map = driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType(arguments["dtype"]), rank, arguments["address"],
        [driver.cuuint64_t(d) for d in arguments["dims"]], [driver.cuuint64_t(s) for s in arguments["strides"]],
        [driver.cuuint32_t(b) for b in arguments["box"]], [driver.cuuint32_t(e) for e in arguments["element_strides"]],
        driver.CUtensorMapInterleave(arguments["interleave"]), driver.CUtensorMapSwizzle(arguments["swizzle"]),
        driver.CUtensorMapL2promotion(arguments["l2_promotion"]), driver.CUtensorMapFloatOOBfill(arguments["oob_fill"]),
    )
    assert status == driver.CUresult.CUDA_SUCCESS, status
    return ctypes.string_at(tensor_map.getPtr(), 128)


@pytest.mark.parametrize("variant", VARIANTS, ids=[variant.name for variant in VARIANTS])
def test_dglus_tma_arguments_encode_to_the_dsls_descriptors(variant, tmp_path: Path):
    stand_in = build_stand_in(tmp_path)
    if stand_in is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    artifacts = tmp_path / "artifacts"
    build_artifacts([variant], artifacts, jobs=1, progress=lambda line: None)
    (entry,) = read_manifest(artifacts).variants
    phases = trace_call(stand_in, artifacts, variant, PROBLEM, tmp_path / "trace.jsonl")
    (main,) = [kernel for kernel in entry.kernels if kernel.role == "main"]
    (ours,) = [launch for launch in phases["dglu"] if launch["kernel"] == main.symbol]
    (static,) = [launch for launch in phases["static"] if launch["kernel"].startswith("cudnn_static_main")]
    names = [spec.name for spec in main.params if spec.kind == "tensormap"]
    mine = [bytes.fromhex(p["bytes"]) for spec, p in zip(main.params, ours["params"], strict=True) if spec.kind == "tensormap"]
    theirs = [bytes.fromhex(p["bytes"]) for p in static["params"] if p["size"] == 128]
    assert len(mine) == len(theirs) == len(names)
    for name, encoded_args, reference in zip(names, mine, theirs, strict=True):
        arguments = encode_arguments(encoded_args)
        real = _real_encode(arguments)
        # the CPU tier's decoder reads dglu's arguments back from the real driver's bytes
        assert _decoded(real) == _decoded(encoded_args), name
        if dsl_descriptor(reference)["dtype"] == "b4":  # FP4 A/B: dglu's UINT8 pairs, the DSL's 4-bit type
            assert _decoded(real) == _decoded(reference), name
            continue
        assert without_unused_strides(real, arguments["dims"]) == without_unused_strides(reference, arguments["dims"]), name


def _decoded(data: bytes) -> dict:
    """What the CPU tier compares of a map (launch_trace/parity.py), strides included."""
    fields = tensor_map_fields(data)
    used = [stride if dim > 1 else None for stride, dim in zip(fields["strides"], fields["dims"][1:])]
    return {**{name: fields[name] for name in SYMBOLIC_FIELDS}, "strides": used}
