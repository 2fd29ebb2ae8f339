"""Compile cuDNN FE's BF16 dGLU kernel for one variant into one cubin, no GPU needed.

The kernel object is made and traced as cuDNN FE's own ``GroupedGemmDgluBf16API.compile()``
makes and traces it (fake tensors with a symbolic M, 256-divisible, per tensor; a
symbolic valid_m shared by prob and dprob; a 128-byte workspace pointer; a fake stream),
with two differences: N and K are symbolic too, so one cubin serves every shape of its
expert count, and the target architecture and kernel names are dglu's. ``static_nk``
compiles cuDNN FE's static-shape configuration instead (the cubin-parity tests).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import OperandMajorMode
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor, make_ptr

from ..declaration import manifest_kernel, symbol_of
from ..dtypes import DTYPES
from .. import cudnn_fe as upstream
from . import NAME, interface
from .config import M_ALIGNED, Config

N_DIVISIBILITY = 32  # cuDNN FE's N % 32
K_DIVISIBILITY = 8  # 16-byte rows of bf16
PLACEHOLDER_CLUSTERS = 1  # the host code's grid z; the cubin does not depend on it


def kernel_object(config: Config) -> Any:
    """cuDNN FE's kernel object for ``config`` (its constructor, as the BF16 API calls it)."""
    from cudnn.gemm.cutedsl.grouped.dglu.moe_grouped_gemm_dglu_dbias import MoEGroupedGemmDgluDbiasBf16Kernel
    from cudnn.gemm.cutedsl.grouped.moe_utils import MoEWeightMode

    return MoEGroupedGemmDgluDbiasBf16Kernel(
        acc_dtype=cutlass.Float32,
        use_2cta_instrs=config.two_cta,
        mma_tiler_mn=(config.tile_m, config.tile_n),
        cluster_shape_mn=(config.cluster_m, config.cluster_n),
        vectorized_f32=False,
        expert_cnt=config.experts,
        weight_mode=MoEWeightMode.DISCRETE if config.discrete_weights else MoEWeightMode.DENSE,
        use_dynamic_sched=config.dynamic_schedule,
        act_func=config.act_func,
        **config.constructor_act_params,
    )


def _m() -> Any:
    return cute.sym_int(divisibility=M_ALIGNED)


def fake_arguments(config: Config, static_nk: tuple[int, int] | None = None) -> dict[str, Any]:
    """The keyword arguments of the kernel's ``__call__`` that cute.compile traces."""
    if static_nk is None:
        n, k = cute.sym_int(divisibility=N_DIVISIBILITY), cute.sym_int(divisibility=K_DIVISIBILITY)
        n2 = cute.sym_int(divisibility=2 * N_DIVISIBILITY)
        dbias_n2 = cute.sym_int(divisibility=2 * N_DIVISIBILITY)
    else:
        n, k = static_nk
        n2 = dbias_n2 = 2 * n
    experts, bf16, f32 = config.experts, cutlass.BFloat16, cutlass.Float32
    row_major = (1, 0, 2)
    if config.discrete_weights:
        b = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
        n_value, k_value = cutlass.Int32(static_nk[0] if static_nk else 0), cutlass.Int32(static_nk[1] if static_nk else 0)
        b_stride = cutlass.Int64((static_nk[0] if config.b_n_major else static_nk[1]) if static_nk else 0)
        b_major = OperandMajorMode.MN if config.b_n_major else OperandMajorMode.K
    elif config.b_n_major:
        # N-major dense B as cuDNN FE takes it: the canonical (L, K, N) row-major tensor; built
        # for static N and K only (Config.check: the parity tests compile cuDNN FE's own)
        b = make_fake_tensor(bf16, (experts, k, n), stride=(n * k, n, 1), assumed_align=16)
        n_value, k_value, b_stride = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int64(0)
        b_major = OperandMajorMode.MN
    else:
        if static_nk is None:
            b = make_fake_compact_tensor(bf16, (n, k, experts), stride_order=row_major, assumed_align=16)
        else:
            b = make_fake_tensor(bf16, (n, k, experts), stride=(k, 1, n * k), assumed_align=16)
        n_value, k_value, b_stride = cutlass.Int32(0), cutlass.Int32(0), cutlass.Int64(0)
        b_major = OperandMajorMode.K  # what cuDNN FE passes for a rank-3 B; its layout decides
    valid_m = _m()
    per_expert = {name: make_fake_tensor(dtype, (experts,), stride=(1,), assumed_align=16)
                  for name, dtype in (("padded_offsets", cutlass.Int32), ("alpha", f32), ("beta", f32))}
    dbias = (make_fake_tensor(bf16, (experts, dbias_n2, 1), stride=(dbias_n2, 1, 1), assumed_align=16)
             if config.dbias else None)
    return {
        "a": make_fake_compact_tensor(bf16, (_m(), k, 1), stride_order=row_major, assumed_align=16),
        "b": b,
        "n": n_value,
        "k": k_value,
        "b_stride_size": b_stride,
        "b_major_mode": b_major,
        "workspace_ptr": make_ptr(cutlass.Uint8, 128, cute.AddressSpace.gmem, assumed_align=128),
        "c": make_fake_compact_tensor(DTYPES[config.c_dtype], (_m(), n2, 1), stride_order=row_major, assumed_align=16),
        "d": make_fake_compact_tensor(DTYPES[config.d_dtype], (_m(), n2, 1), stride_order=row_major, assumed_align=16),
        **per_expert,
        "prob": make_fake_tensor(f32, (valid_m, 1, 1), stride=(1, 1, 1), assumed_align=16),
        "dprob": make_fake_tensor(f32, (valid_m, 1, 1), stride=(1, 1, 1), assumed_align=16),
        "linear_offset": cutlass.Float32(0.0),
        "dbias_tensor": dbias,
        "max_active_clusters": PLACEHOLDER_CLUSTERS,
        "stream": make_fake_stream(use_tvm_ffi_env_stream=False),
        "activation": None,
    }


def name_kernels(kernel: Any, symbol_prefix: str) -> None:
    """Short, stable symbols: ``<prefix>_helper_<n>`` and ``<prefix>_main_<n>``."""
    kernel.kernel.set_name_prefix(f"{symbol_prefix}_main", remove_cutlass_symbol=True, keep_mangled_name=False)
    kernel.helper_kernel.set_name_prefix(f"{symbol_prefix}_helper", remove_cutlass_symbol=True, keep_mangled_name=False)


def compile_cubin(config: Config, symbol_prefix: str, static_nk: tuple[int, int] | None = None) -> tuple[bytes, int]:
    """The variant's cubin and its main kernel's dynamic shared memory."""
    upstream.distribution()  # the pinned version, or a clear error
    kernel = kernel_object(config)
    name_kernels(kernel, symbol_prefix)
    return cubin_and_smem(kernel, fake_arguments(config, static_nk), config)


def cubin_and_smem(kernel: Any, arguments: dict[str, Any], config: Any) -> tuple[bytes, int]:
    """``cute.compile`` of cuDNN FE's ``kernel`` object for ``config.arch`` on fake
    ``arguments``: its cubin and the shared storage its main kernel declares."""
    with tempfile.TemporaryDirectory(prefix="dglu-cute-") as tmp:
        compiled = cute.compile(
            kernel, **arguments,
            options=f"--gpu-arch {config.arch} --keep-cubin --keep-ptx --dump-dir={Path(tmp)}",
        )
    cubin = compiled.__cubin__
    if not isinstance(cubin, bytes):
        raise RuntimeError(f"CuTe DSL produced no cubin for {config}")
    return cubin, int(kernel.shared_storage.size_in_bytes())


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """Compile one variant; returns the cubin and the manifest fields the family declares."""
    config = Config.from_key(key)
    cubin, smem = compile_cubin(config, symbol_prefix)
    return cubin, variant_fields(NAME, interface, config, cubin, smem, symbol_prefix)


def variant_fields(family: str, declared: Any, config: Any, cubin: bytes, smem: int, symbol_prefix: str) -> dict:
    """The manifest fields of a compiled variant: the family's declaration (``declared``: its
    interface module) with each kernel's symbol read from ``cubin`` (the main kernel's shared
    storage ``smem``)."""
    from ...cubin_info import read_cubin

    symbols = list(read_cubin(cubin).kernels)
    kernels = [
        manifest_kernel(kernel, symbol_of(symbols, symbol_prefix, kernel.role), smem if kernel.role == "main" else 0,
                        lambda tensor: [])
        for kernel in declared.kernels(config)
    ]
    return {"family": family, **declared.entry(config), "kernels": kernels}
