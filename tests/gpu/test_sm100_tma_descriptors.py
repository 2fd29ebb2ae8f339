"""What the CPU launch-parity tier cannot see (tests/cpu/test_sm100_launch_parity.py): the
TMA descriptors' encoded fields. cuDNN FE's DSL host code writes each descriptor's first 64
bytes itself, in the hardware's format; dglu's runtime asks cuTensorMapEncodeTiled. Here the
arguments dglu passes for a call (recorded by the stand-in driver in a subprocess) are
encoded by this machine's real driver and must give the 64 bytes the host code of cuDNN
FE's own static-shape configuration of that call writes: element type, swizzle,
interleave, L2 promotion and OOB fill included (the stride of a dimension of extent 1,
which no address depends on, aside). cuTensorMapEncodeTiled takes no
architecture, so any CUDA machine (an H200 too) runs this for the Blackwell variants."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

pytest.importorskip("cudnn", reason="nvidia-cudnn-frontend (the build extra) is not installed")
pytest.importorskip("torch")

from dglu.contract.reader import read_manifest  # noqa: E402
from dglu_build.build import build_artifacts  # noqa: E402
from dglu_build.specs import parse_specs  # noqa: E402
from tests.cpu.launch_trace.traces import build_stand_in, encode_arguments, trace_call, without_unused_strides  # noqa: E402

pytestmark = pytest.mark.gpu

PROBLEM = {"m": 1024, "n": 512, "k": 1024}
VARIANTS = parse_specs("""
defaults: {ab_dtype: bf16, c_dtype: bf16, d_dtype: bf16, weight_mode: dense, b_major: k, tile_m: 256, tile_n: 256,
           cluster_m: 2, cluster_n: 1, scheduler: static, arch: sm_100a, experts: 8, act_func: dswiglu, dbias: true}
variants:
  - {}
  - {weight_mode: discrete, b_major: [k, n]}
  - {tile_m: 128, tile_n: 128, cluster_m: 1, c_dtype: fp32, d_dtype: fp16}
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
    mine = [bytes.fromhex(p["bytes"]) for spec, p in zip(main.params, ours["params"], strict=True) if spec.kind == "tensormap"]
    theirs = [bytes.fromhex(p["bytes"]) for p in static["params"] if p["size"] == 128]
    assert len(mine) == len(theirs) == 4  # A, B, C, D
    for name, encoded_args, reference in zip(("a", "b", "c", "d_row"), mine, theirs, strict=True):
        arguments = encode_arguments(encoded_args)
        real = without_unused_strides(_real_encode(arguments), arguments["dims"])
        assert real == without_unused_strides(reference, arguments["dims"]), name
