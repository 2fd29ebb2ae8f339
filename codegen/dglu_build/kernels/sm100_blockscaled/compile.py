"""Compile cuDNN FE's block-scaled dGLU kernel for one variant into one cubin, no GPU needed.

The kernel object is made and traced as cuDNN FE's ``GroupedGemmDgluBlockScaledAPI.compile()``
makes and traces it on its default (dynamic M/N/K) dense path: fake tensors with a
symbolic M (256-divisible) per tensor, symbolic N and K, the seed's 6-D scale-factor views
with symbolic extents and strides, a 128-byte workspace pointer, a fake stream. Three
differences, so that one cubin serves every shape of its expert count: the dbias tensor's
2N is symbolic (cuDNN FE makes it static), discrete weights keep K and 2N symbolic in A,
C, D and SFA as the dense path does (cuDNN FE's discrete path makes them static; n and k
stay run-time Int32 arguments), and the target architecture and kernel names are dglu's.
``shapes="cudnn"`` compiles cuDNN FE's own configuration instead (the cubin-parity tests).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import OperandMajorMode
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor, make_ptr

from .. import cudnn_fe as upstream
from ..dtypes import DTYPES
from ..sm100_bf16.compile import cubin_and_smem, name_kernels, variant_fields
from . import NAME, interface
from .config import Config
from ..sm100_bf16.config import M_ALIGNED

SF_STRIDE_DIVISIBILITY = 512  # one 128-row x 4-block atom of scale factors
PLACEHOLDER_CLUSTERS = 1  # the host code's grid z; the cubin does not depend on it
PROB_SAMPLE_M = 4096  # cuDNN FE takes prob's unit-mode strides from its sample tensor


def kernel_object(config: Config) -> Any:
    """cuDNN FE's kernel object for ``config`` (its constructor, as the block-scaled API calls it)."""
    from cudnn.gemm.cutedsl.grouped.dglu.moe_blockscaled_grouped_gemm_dglu_dbias import (
        BlockScaledMoEGroupedGemmDgluDbiasKernel,
    )
    from cudnn.gemm.cutedsl.grouped.moe_utils import MoEWeightMode

    return BlockScaledMoEGroupedGemmDgluDbiasKernel(
        sf_vec_size=config.recipe.sf_vec_size,
        acc_dtype=cutlass.Float32,
        use_2cta_instrs=config.two_cta,
        mma_tiler_mn=(config.tile_m, config.tile_n),
        cluster_shape_mn=(config.cluster_m, config.cluster_n),
        vectorized_f32=False,
        discrete_col_sfd=config.discrete_col_sfd,
        expert_cnt=config.experts,
        weight_mode=MoEWeightMode.DISCRETE if config.discrete_weights else MoEWeightMode.DENSE,
        use_dynamic_sched=config.dynamic_schedule,
        act_func=config.act_func,
        use_single_group_runtime_offsets=config.single_group,
        **({"situ_beta1": config.act_params["situ_beta1"]} if config.act_func == "dsituglu" else {}),
    )


def _sym(divisibility: int = 1) -> Any:
    return cute.sym_int(divisibility=divisibility)


def _scale_factors(config: Config, rows128: Any, rest: Any, stride_rows: Any, groups: Any = 1) -> Any:
    """A (32, 4, rows/128, 4, rest, groups) view of the seed's permuted scale-factor buffer."""
    stride_rest = _sym(SF_STRIDE_DIVISIBILITY)
    return make_fake_tensor(DTYPES[config.recipe.sf_dtype], (32, 4, rows128, 4, rest, groups),
                            stride=(16, 4, stride_rows, 1, SF_STRIDE_DIVISIBILITY, stride_rest), assumed_align=16)


def fake_arguments(config: Config, shapes: str = "symbolic", n: int = 2048, k: int = 4096) -> dict[str, Any]:
    """The keyword arguments of the kernel's ``__call__`` that cute.compile traces:
    ``shapes`` "symbolic" (dglu's), "cudnn" (cuDNN FE's default path, for this ``n`` and
    ``k``: dense with a static dbias, discrete with static N and K) or "static" (cuDNN FE's
    static path, CUDNN_FE_GROUPED_GEMM_DYNAMIC_MNKL=0: only M symbolic)."""
    if shapes not in ("symbolic", "cudnn", "static"):
        raise ValueError(f"shapes: 'symbolic', 'cudnn' or 'static', got {shapes!r}")
    symbolic = shapes == "symbolic"
    ab, sf, f32, i32 = DTYPES[config.ab_dtype], DTYPES[config.recipe.sf_dtype], cutlass.Float32, cutlass.Int32
    c_dtype, d_dtype = DTYPES[config.c_dtype], DTYPES[config.d_dtype]
    experts, vec = config.experts, config.recipe.sf_vec_size
    valid_m, m128 = _sym(M_ALIGNED), _sym()
    row_major = (1, 0, 2)
    k_div = 32 if config.fp4 else 16  # 16-byte rows of A and B
    d_div = 8 if d_dtype.width == 16 else (4 if d_dtype.width == 32 else 16)
    cdiv = lambda x, y: -(-x // y)  # noqa: E731

    def rows(dtype: Any, cols: Any) -> Any:
        return make_fake_compact_tensor(dtype, (valid_m, cols, 1), stride_order=row_major, assumed_align=16)

    static_discrete = config.discrete_weights and not symbolic
    static_dense = not config.discrete_weights and shapes == "static"
    if static_dense:
        a, c = rows(ab, k), rows(c_dtype, 2 * n)
        d, d_col = rows(d_dtype, 2 * n), rows(d_dtype, 2 * n)
        rest_k = cdiv(cdiv(k, vec), 4)
        sfa = _scale_factors(config, m128, rest_k, rest_k * SF_STRIDE_DIVISIBILITY)
    elif static_discrete:
        a = make_fake_tensor(ab, (valid_m, k, 1), stride=(k, 1, PROB_SAMPLE_M * k), assumed_align=32 if config.fp4 else 16)
        c = make_fake_tensor(c_dtype, (valid_m, 2 * n, 1), stride=(2 * n, 1, PROB_SAMPLE_M * 2 * n), assumed_align=16)
        d, d_col = rows(d_dtype, 2 * n), rows(d_dtype, 2 * n)
        rest_k = cdiv(cdiv(k, vec), 4)
        sfa = _scale_factors(config, m128, rest_k, rest_k * SF_STRIDE_DIVISIBILITY)
    else:
        a = rows(ab, _sym(k_div))
        c = rows(c_dtype, _sym(8))
        d, d_col = rows(d_dtype, _sym(d_div)), rows(d_dtype, _sym(d_div))
        rest_k = _sym()
        sfa = _scale_factors(config, m128, rest_k, _sym(SF_STRIDE_DIVISIBILITY))
    if config.discrete_weights:
        b = sfb = make_ptr(cutlass.Int64, 16, cute.AddressSpace.gmem, assumed_align=8)
        n_value, k_value = i32(n if static_discrete else 0), i32(k if static_discrete else 0)
        b_stride = cutlass.Int64((n if config.b_n_major else k) if static_discrete else 0)
        b_major = OperandMajorMode.MN if config.b_n_major else OperandMajorMode.K
    elif static_dense:
        if config.b_n_major:  # canonical (L, K, N)
            b = make_fake_tensor(ab, (experts, k, n), stride=(n * k, n, 1), assumed_align=16)
        else:
            b = make_fake_tensor(ab, (n, k, experts), stride=(k, 1, n * k), assumed_align=16)
        n_atoms = cdiv(n, 128)
        sfb = make_fake_tensor(DTYPES[config.recipe.sf_dtype], (32, 4, n_atoms, 4, rest_k, experts),
                               stride=(16, 4, rest_k * SF_STRIDE_DIVISIBILITY, 1, SF_STRIDE_DIVISIBILITY,
                                       n_atoms * rest_k * SF_STRIDE_DIVISIBILITY), assumed_align=16)
        n_value, k_value, b_stride = i32(0), i32(0), cutlass.Int64(0)
        b_major = OperandMajorMode.MN if config.b_n_major else OperandMajorMode.K
    elif config.b_n_major:  # cuDNN FE's canonical N-major B: (L, K, N) row-major, N divisible
        l_sym = _sym()
        kernel_facing = make_fake_compact_tensor(ab, (_sym(k_div), _sym(), l_sym), stride_order=(0, 1, 2))
        (sn, sk, sl), (n_sym, k_sym, _) = kernel_facing.stride, kernel_facing.shape
        b = make_fake_tensor(ab, (l_sym, k_sym, n_sym), stride=(sl, sk, sn), assumed_align=16)
        sfb = _scale_factors(config, _sym(), rest_k, _sym(SF_STRIDE_DIVISIBILITY), groups=l_sym)
        n_value, k_value, b_stride = i32(0), i32(0), cutlass.Int64(0)
        b_major = OperandMajorMode.MN
    else:
        l_sym = _sym()
        b = make_fake_compact_tensor(ab, (_sym(), _sym(k_div), l_sym), stride_order=row_major, assumed_align=16)
        sfb = _scale_factors(config, _sym(), rest_k, _sym(SF_STRIDE_DIVISIBILITY), groups=l_sym)
        n_value, k_value, b_stride = i32(0), i32(0), cutlass.Int64(0)
        b_major = OperandMajorMode.K

    def prob() -> Any:  # (valid_m, 1, 1): unit-mode strides from cuDNN FE's sample, compact on its static path
        if static_dense:
            return make_fake_compact_tensor(f32, (valid_m, 1, 1), stride_order=(0, 1, 2), assumed_align=16)
        return make_fake_tensor(f32, (valid_m, 1, 1), stride=(1, PROB_SAMPLE_M, PROB_SAMPLE_M), assumed_align=16)

    sfd_row = sfd_col = norm_const = amax = dbias = None
    if config.generate_sfd:
        if static_discrete or static_dense:
            rest_n2 = cdiv(cdiv(2 * n, vec), 4)
            sfd_row = _scale_factors(config, m128, rest_n2, rest_n2 * SF_STRIDE_DIVISIBILITY)
            sfd_col = _scale_factors(config, cdiv(2 * n, 128), _sym(), _sym(SF_STRIDE_DIVISIBILITY))
        else:
            sfd_row = _scale_factors(config, m128, _sym(), _sym(SF_STRIDE_DIVISIBILITY))
            sfd_col = _scale_factors(config, _sym(), _sym(), _sym(SF_STRIDE_DIVISIBILITY))
        norm_const = make_fake_tensor(f32, (1,), stride=(1,), assumed_align=16)
    if config.amax:
        amax = make_fake_tensor(f32, (experts, 2, 1), stride=(2, 1, 1), assumed_align=16)
    if config.dbias:
        n2 = 2 * n if not symbolic else _sym(64)
        dbias = make_fake_tensor(cutlass.BFloat16, (experts, n2, 1), stride=(n2, 1, 1), assumed_align=16)
    per_expert = {name: make_fake_tensor(dtype, (experts,), stride=(1,), assumed_align=16)
                  for name, dtype in (("padded_offsets", i32), ("alpha", f32), ("beta", f32))}
    del sf  # the scale factors' dtype is the fakes' (config.recipe)
    return {
        "a": a, "b": b, "sfb": sfb, "n": n_value, "k": k_value, "b_stride_size": b_stride, "b_major_mode": b_major,
        "workspace_ptr": make_ptr(cutlass.Uint8, 128, cute.AddressSpace.gmem, assumed_align=128),
        "c": c, "d": d, "d_col": d_col, "sfa": sfa, "sfd_row_tensor": sfd_row, "sfd_col_tensor": sfd_col,
        "amax_tensor": amax, "norm_const_tensor": norm_const, **per_expert,
        "prob": prob(), "dprob": prob(),
        "dbias_tensor": dbias,
        "max_active_clusters": PLACEHOLDER_CLUSTERS,
        "stream": make_fake_stream(use_tvm_ffi_env_stream=False),
        "epilogue_op": lambda x: x,
        **config.call_act_params,
    }


def compile_cubin(config: Config, symbol_prefix: str | None, shapes: str = "symbolic", **nk: int) -> tuple[bytes, int]:
    """The variant's cubin and its main kernel's dynamic shared memory; ``symbol_prefix``
    None keeps cuDNN FE's own kernel names (the parity tests)."""
    upstream.distribution()  # the pinned version, or a clear error
    kernel = kernel_object(config)
    if symbol_prefix is not None:
        name_kernels(kernel, symbol_prefix)
    return cubin_and_smem(kernel, fake_arguments(config, shapes, **nk), config)


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """Compile one variant; returns the cubin and the manifest fields the family declares."""
    config = Config.from_key(key)
    cubin, smem = compile_cubin(config, symbol_prefix)
    return cubin, variant_fields(NAME, interface, config, cubin, smem, symbol_prefix)
