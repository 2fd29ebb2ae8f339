"""Launch one sm100 variant's call twice through the stand-in libcuda (LD_PRELOADed by the
test): with the host code the DSL generates from cuDNN FE's kernel (``__call__`` traced
into a JIT launcher, the way cuDNN FE runs it) for the variant's symbolic-N/K cubin ("dsl")
and for cuDNN FE's own static-shape configuration of the same call ("static"), then with
dglu's runtime from the variant's manifest entry ("dglu"). All write their driver calls
into FAKECUDA_TRACE; a line {"fn": "phase"} starts each. usage: python trace_calls.py CASE_JSON ARTIFACT_DIR (CASE_JSON names the
variant, the problem's m, n, k, the workspace address the stand-in's first allocation gets
and the clusters it answers for the occupancy query, and whether to run the "static" phase)"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import torch

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "i32": torch.int32, "i64": torch.int64}
STREAM = 0x5157


def mark(phase: str) -> None:
    with open(os.environ["FAKECUDA_TRACE"], "a") as trace:
        trace.write(json.dumps({"fn": "phase", "phase": phase}) + "\n")


def tensors(config, m: int, n: int, k: int) -> dict[str, torch.Tensor]:
    """CPU tensors of the call (the stand-in driver never reads them): the seed's shapes."""
    experts = config.experts
    made = {
        "a": torch.zeros((m, k, 1), dtype=torch.bfloat16),
        "c": torch.zeros((m, 2 * n, 1), dtype=TORCH[config.c_dtype]),
        "d_row": torch.zeros((m, 2 * n, 1), dtype=TORCH[config.d_dtype]),
        "padded_offsets": torch.zeros((experts,), dtype=torch.int32),
        "alpha": torch.zeros((experts,), dtype=torch.float32),
        "beta": torch.zeros((experts,), dtype=torch.float32),
        "prob": torch.zeros((m, 1, 1), dtype=torch.float32),
        "dprob": torch.zeros((m, 1, 1), dtype=torch.float32),
    }
    if config.dbias:
        made["dbias"] = torch.zeros((experts, 2 * n, 1), dtype=torch.bfloat16)
    if config.discrete_weights:
        made["b_ptrs"] = torch.zeros((experts,), dtype=torch.int64)
    elif config.b_n_major:
        made["b"] = torch.zeros((experts, k, n), dtype=torch.bfloat16).permute(2, 1, 0)  # (N, K, L), N contiguous
    else:
        made["b"] = torch.zeros((experts, n, k), dtype=torch.bfloat16).permute(1, 2, 0)  # (N, K, L), K contiguous
    return made


def dsl_host(
    config, made: dict[str, torch.Tensor], n: int, k: int, workspace: int, clusters: int, prefix: str, static: bool
) -> None:
    """cuDNN FE's kernel, compiled by the DSL with its own host launcher, called as its API
    calls it: the symbolic-N/K configuration dglu ships, or (``static``) cuDNN FE's own for
    this N and K, whose host code encodes the TMA descriptors from static strides."""
    import cutlass
    import cutlass.cute as cute
    import cuda.bindings.driver as cuda_driver
    from cutlass.cute.runtime import make_ptr
    from dglu_build.kernels.sm100_bf16 import compile as sm100

    kernel = sm100.kernel_object(config)
    sm100.name_kernels(kernel, prefix)
    arguments = sm100.fake_arguments(config, (n, k) if static else None)
    arguments["max_active_clusters"] = clusters
    compiled = cute.compile(kernel, **arguments, options=f"--gpu-arch {config.arch}")
    compiled.__dict__["num_devices"] = 1  # its only cudart query, answered here (see the notes)
    if config.discrete_weights:
        b = make_ptr(cutlass.Int64, made["b_ptrs"].data_ptr(), cute.AddressSpace.gmem, assumed_align=8)
        n_value, k_value = cutlass.Int32(n), cutlass.Int32(k)
        b_stride = cutlass.Int64(n if config.b_n_major else k)
    else:
        b = made["b"].permute(2, 1, 0) if config.b_n_major else made["b"]  # cuDNN FE's canonical N-major form
        n_value, k_value, b_stride = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int64(0)
    compiled(
        made["a"], b, n_value, k_value, b_stride,
        make_ptr(cutlass.Uint8, workspace, cute.AddressSpace.gmem, assumed_align=128),
        made["c"], made["d_row"], made["padded_offsets"], made["alpha"], made["beta"], made["prob"], made["dprob"],
        cutlass.Float32(config.linear_offset), made.get("dbias"), cuda_driver.CUstream(STREAM), None,
    )


def dglu_runtime(variant, made: dict[str, torch.Tensor], n: int) -> None:
    """dglu's runtime: the manifest's checks, then load and launch (its lower half); with
    discrete weights the call gives n (the wrapper's ``n`` argument)."""
    from dglu import runner, validation

    # the one check left out: the tensors are CPU tensors (the stand-in driver has no device memory)
    validation._check_devices = lambda args: None
    given = {"n": (n, "n")} if "b_ptrs" in made else {}
    problem = validation.describe_tensors(variant, {role: (role, tensor) for role, tensor in made.items()}, given)
    loaded = runner.load_variant(variant, 0)
    runner.run_variant(loaded, problem, STREAM)


def main() -> None:
    case = json.loads(sys.argv[1])
    from dglu.contract.reader import read_manifest

    (variant,) = [v for v in read_manifest(Path(sys.argv[2])).variants if v.name == case["variant"]]
    if variant.family == "sm100_blockscaled":
        from dglu_build.kernels.sm100_blockscaled.config import Config

        import blockscaled_calls as calls

        host = functools.partial(calls.dsl_host, stream=STREAM)
        make = calls.tensors
    else:
        from dglu_build.kernels.sm100_bf16.config import Config

        host, make = dsl_host, tensors
    config = Config.from_key(variant.key.as_dict())
    made = make(config, case["m"], case["n"], case["k"])
    mark("dsl")
    host(config, made, case["n"], case["k"], case["workspace"], case["clusters"], "dglu_" + variant.name, False)
    if case["static"]:
        mark("static")
        host(config, made, case["n"], case["k"], case["workspace"], case["clusters"], "cudnn_static", True)
    mark("dglu")
    dglu_runtime(variant, made, case["n"])
    mark("end")


if __name__ == "__main__":
    main()
