"""The public op, with the seed's argument names: the wrapper here, the class API in dglu.op
(re-exported here), the bound op both run in dglu.bound, what they share in dglu.call; their
parameters are dglu.arguments' table.

The wrapper is a cached bound op plus output allocation: a request (its settings, A's and
C's dtypes, A's device) maps to one BoundOp, selected and loaded once. Argument names,
positional order, order of outputs and defaults follow NVIDIA's grouped_gemm_dglu_*_sm100
API (cuDNN FE 1.32.0; docs/frontends.md lists the differences that remain), except that
``acc_dtype`` and ``d_dtype`` default to None, meaning torch.float32 and torch.bfloat16 (so
that importing dglu does not import torch). Every argument is checked before anything is
allocated or launched, the most fundamental reason first (docs/frontends.md). The seed's names (``*_sm90``, ``*_sm100``) and the
arch-neutral ``grouped_gemm_dglu`` / ``GroupedGemmDglu`` are one implementation: each call
runs the installed cubins of the tensors' device's architecture.

Fast path: a call whose tensors have the addresses, shapes, strides and dtypes of an
earlier call (with the same configuration) reuses that call's checks, variant and launch
parameters (dglu.cache, dglu.runner). padded_offsets' values are not read on the host by
default: the kernels clamp their walk to A's rows and experts, so malformed offsets give
wrong numbers but never out-of-bounds accesses. Set ``DGLU_CHECK_OFFSETS=1`` to have every
call read them back (a small synchronous copy; skipped while the stream captures a CUDA
graph) and check them. b_ptrs' values are never read on the host (dglu.weights).

Weights are dense (b_tensor / sample_b) or discrete (b_ptrs with n and b_dtype / num_experts,
b_shape and b_dtype), each selecting variants of its weight mode. A call picks the variant
of its dtypes, activation constants, dbias, weight mode and b_major, its scheduler
(use_dynamic_sched) and cluster (cluster_shape_mn, None meaning (1, 1)); among those the
given mma_tiler_mn, or else the largest tile (dglu.selection).
"""

from __future__ import annotations

from typing import Any

from . import runner
from .arguments import refused_value
from .arrays import as_torch
from .blockscaled import (
    FP4_TYPE,
    check_operand_family,
    check_single_group,
    check_vector_f32,
    dense_b_major,
    is_block_scaled,
    require,
)
from .bound import BoundOp
from .cache import BoundedCache
from .call import BLOCK_SCALED, CALL_CACHE_CAPACITY, COMMON_ROLES, WRAPPER_OUTPUTS, WRAPPER_SOURCES, OpConfig, named_tensors
from .op import GroupedGemmDglu, GroupedGemmDgluSm90, GroupedGemmDgluSm100
from .options import check_absent, check_flags, check_options, output_dtype_name
from .tuple_dict import TupleDict
from .weights import DISCRETE, block_scaled_b_major, check_b_major, weight_mode, wrapper_discrete

__all__ = [
    "GroupedGemmDglu",
    "GroupedGemmDgluSm90",
    "GroupedGemmDgluSm100",
    "clear_caches",
    "grouped_gemm_dglu",
    "grouped_gemm_dglu_wrapper_sm90",
    "grouped_gemm_dglu_wrapper_sm100",
]

# The wrapper's non-tensor arguments, in the order grouped_gemm_dglu hands them over.
WRAPPER_SETTINGS = (
    "has_b_tensor", "has_b_ptrs", "n", "b_dtype", "acc_dtype", "mma_tiler_mn",
    "cluster_shape_mn", "sf_vec_size", "vector_f32", "m_aligned", "discrete_col_sfd",
    "act_func", "geglu_alpha", "glu_clamp_max", "glu_clamp_min", "linear_offset",
    "situ_beta1", "situ_beta2", "b_major", "epilogue_op", "use_dynamic_sched", "cd_major",
    "d_dtype", "generate_dbias", "deterministic", "act_out", "use_single_group_runtime_offsets",
    "round_dgrad_to_input_dtype", "block_scaled", "dense_b_major", "fp4",
)  # fmt: skip
_PAIRS = (WRAPPER_SETTINGS.index("mma_tiler_mn"), WRAPPER_SETTINGS.index("cluster_shape_mn"))

# request (settings by value and type, A's and C's dtypes, A's device) -> bound op
_bound_ops: BoundedCache[BoundOp] = BoundedCache(CALL_CACHE_CAPACITY)


def clear_caches() -> None:
    """Forget every bound op, launch plan, loaded variant and pooled workspace."""
    _bound_ops.clear()
    runner.clear_caches()


def _pair_types(*pairs: Any) -> tuple[Any, ...]:
    """The element types of the pair arguments (so (128, 128.0) differs from (128, 128))."""
    return tuple(tuple(map(type, value)) if isinstance(value, tuple) else None for value in pairs)


def _wrapper_config(
    *,
    has_b_tensor: bool,
    has_b_ptrs: bool,
    n: Any,
    b_dtype: Any,
    d_dtype: Any,
    generate_dbias: Any,
    dense_b_major: str,
    **options: Any,
) -> OpConfig:
    """The wrapper's checked configuration: weights, options, D_row's dtype, dbias."""
    discrete_args = {"b_ptrs": True if has_b_ptrs else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if has_b_tensor else None, discrete_args)
    block_scaled, fp4 = options["block_scaled"], options["fp4"]
    discrete = wrapper_discrete(n, b_dtype, block_scaled, fp4) if mode == DISCRETE else None
    checked = check_options(**options)
    if block_scaled:
        checked = checked._replace(b_major=block_scaled_b_major(mode, checked.b_major, dense_b_major))
    else:
        check_b_major(mode, checked.b_major)
    d_dtype_name = output_dtype_name("d_dtype", d_dtype, block_scaled and not fp4)  # FP4: bf16/fp16/fp32 D
    if not isinstance(generate_dbias, bool):
        raise ValueError(f"generate_dbias: expected a bool, got {generate_dbias!r}")
    return OpConfig(mode, discrete, checked, d_dtype_name, generate_dbias)


def _request_key(
    settings: tuple[Any, ...], a_tensor: Any, c_tensor: Any, padded_offsets: Any
) -> tuple[Any, ...] | None:
    """The bound-op cache key of a wrapper request: the settings by value and type, A's and
    C's dtypes, A's device and the expert count (padded_offsets' shape: Blackwell's kernels
    compile it in); None when A, C or padded_offsets is no tensor or a setting is
    unhashable (then nothing is cached and the checks say what is wrong)."""
    try:
        key = (
            settings,
            tuple(map(type, settings)),
            _pair_types(*(settings[i] for i in _PAIRS)),
            a_tensor.dtype,
            c_tensor.dtype,
            a_tensor.device,
            tuple(padded_offsets.shape),
        )
    except (AttributeError, TypeError):
        return None
    return key


def _bind(
    config: OpConfig, a_tensor: Any, c_tensor: Any, padded_offsets: Any, key: tuple[Any, ...] | None
) -> BoundOp:
    """Select and load the variant of a checked request; kept by its ``key``."""
    tensors = named_tensors(False, a=a_tensor, c=c_tensor, padded_offsets=padded_offsets)
    bound = BoundOp.select(config, tensors, WRAPPER_SOURCES)
    check_flags(config.options, bound.variant)
    return bound if key is None else _bound_ops.get_or_make(key, lambda: bound)


# The roles of the tensors the wrapper binds, in order, by weights (discrete or not) and
# block scaling.
_WRAPPER_ROLES = {
    (False, False): ("a", "b", "c", *COMMON_ROLES),
    (True, False): ("a", "b_ptrs", "c", *COMMON_ROLES),
    (False, True): ("a", "sfa", "b", "sfb", "c", "norm_const", *COMMON_ROLES),
    (True, True): ("a", "sfa", "b_ptrs", "sfb_ptrs", "c", "norm_const", *COMMON_ROLES),
}
_REQUIRED = ("padded_offsets", "alpha_tensor", "beta_tensor", "prob_tensor", "dprob_tensor")


def grouped_gemm_dglu(
    a_tensor: Any = None,
    c_tensor: Any = None,
    sfa_tensor: Any = None,
    padded_offsets: Any = None,
    alpha_tensor: Any = None,
    beta_tensor: Any = None,
    prob_tensor: Any = None,
    dprob_tensor: Any = None,
    b_tensor: Any = None,
    sfb_tensor: Any = None,
    generate_dbias: bool = False,
    b_ptrs: Any = None,
    sfb_ptrs: Any = None,
    n: int | None = None,
    b_dtype: Any = None,
    b_major: str = "k",
    norm_const_tensor: Any = None,
    acc_dtype: Any = None,
    d_dtype: Any = None,
    cd_major: str = "n",
    mma_tiler_mn: tuple[int, int] | None = None,
    cluster_shape_mn: tuple[int, int] | None = None,
    sf_vec_size: int = 16,
    sf_fp8_dtype_override: str | None = None,
    vector_f32: bool = False,
    m_aligned: int = 256,
    discrete_col_sfd: bool = False,
    act_func: str = "dswiglu",
    linear_offset: float = 1.0,
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    epilogue_op: str | None = None,
    use_dynamic_sched: bool = False,
    use_single_group_runtime_offsets: bool = False,
    current_stream: Any = None,
    round_dgrad_to_input_dtype: bool = False,
    activation_tensor: Any = None,
    deterministic: bool = False,
    act_out: bool = False,
) -> TupleDict:
    """Grouped GEMM + dGLU backward on the tensors' device; allocates the outputs.

    Parameters in cuDNN FE 1.32.0's positional order (dglu.arguments), act_out last.
    a_tensor, c_tensor, padded_offsets, alpha_tensor, beta_tensor, prob_tensor and
    dprob_tensor are required (None is refused by name).

    BF16 operands. Weights: b_tensor (N, K, L), or b_ptrs (L,) int64 device pointers to
    per-expert (N, K) bf16 matrices with n=N and b_dtype=torch.bfloat16 (b_major "k" or "n"
    orders each). C may be bf16, fp16 or fp32; d_dtype (default bf16) picks D_row's, among
    the same. Returns a TupleDict in the seed's order: d_row_tensor (M, 2N, 1) in d_dtype,
    d_col_tensor None, dprob_tensor (the caller's, accumulated), dbias_tensor ((L, 2N, 1)
    bf16 or None), amax_tensor, sfd_row_tensor and sfd_col_tensor None. Rows of D_row past
    valid_m (owned by no expert) are left uninitialised. act_out=True (not in the seed) runs
    the variant that also writes prob * GLU(X), the MLP's activation that dW2 needs, and adds
    it as an eighth, trailing entry act_out_tensor ((M, N, 1) bf16; rows past valid_m
    uninitialised); without it the TupleDict keeps the seed's seven entries.
    activation_tensor (cuDNN FE 1.32.0's name): a caller-provided (M, N, 1) bf16 tensor the
    same act_out variant fills with prob * GLU(X) instead of a new one (returned as
    act_out_tensor with act_out=True). deterministic=True runs the variant whose D, dprob
    and dbias are bitwise identical from run to run and across schedulers: per-tile partial
    sums reduced in a fixed order instead of float atomics (about 1-3% slower on the H200);
    cuDNN FE's deterministic covers only the block-scaled kernel's dprob, without dbias.
    round_dgrad_to_input_dtype=True rounds R = alpha^2 * A.B^T to A's dtype before the
    epilogue, on variants whose kernel has that flag (refused on the others).
    sf_fp8_dtype_override (Rubin's E5M3 scales) is refused: no Hopper or Blackwell kernel
    reads E5M3 scales.

    Block-scaled (MXFP8) operands: A and B both torch.float8_e4m3fn or both float8_e5m2
    (dense B K- or N-major by its strides; discrete b_ptrs with sfb_ptrs and
    b_dtype=A's dtype), sfa_tensor / sfb_tensor (or sfb_ptrs) torch.float8_e8m0fnu in the
    seed's layouts, sf_vec_size=32, norm_const_tensor (1,) fp32 on the device, d_dtype
    float8_e4m3fn or float8_e5m2; C in bf16, fp16, fp32, e4m3 or e5m2. Returns d_row_tensor
    and d_col_tensor (M, 2N, 1) FP8, sfd_row_tensor and sfd_col_tensor E8M0 (SFD_col in the
    per-expert layout with discrete_col_sfd=True), dprob and dbias (from the unquantized D)
    as above; amax_tensor is None (Hopper has no FP4 path that produces it).
    On Blackwell (sm100_blockscaled variants installed): the same MXFP8 call (D e4m3), and
    NVFP4: A and B torch.float4_e2m1fn_x2 (K/2 bytes a row), sfa/sfb torch.float8_e4m3fn,
    sf_vec_size=16, no norm_const, d_dtype bf16 (default), fp16 or fp32; returns d_row_tensor,
    amax_tensor (L, 2, 1) fp32 (zeroed before the kernel's atomic max, so an expert with no
    rows reads 0 where cuDNN FE's wrapper, which fills it with -inf, gives -inf), d_col and
    the SFD tensors None (the kernel quantizes no D for FP4 operands).
    use_single_group_runtime_offsets=True (one expert) takes its rows from A's shape and
    never reads padded_offsets (an int32 (1,) tensor still). vector_f32 has no effect on
    Hopper; epilogue_op (None, "identity", "relu", "srelu") is checked and, as in NVIDIA's
    kernels of this op, applied by no kernel. FP4 operands and E4M3 scale factors are
    refused: Hopper has no FP4 tensor cores.

    Refusals come in this order, each before anything is allocated or launched: the
    operands' dtype family (FP4, E4M3 scales, A's and B's FP8 types), then option values,
    then missing tensors, then shapes and strides.
    """
    if a_tensor is None:
        require({"a_tensor": a_tensor}, "every call (the op's operands)")
    block_scaled = is_block_scaled(
        getattr(a_tensor, "dtype", None), sfa_tensor, sfb_tensor, sfb_ptrs, norm_const_tensor
    )
    dense_major, fp4 = "k", False
    if block_scaled:  # 1. the operands' dtype family
        fp4 = FP4_TYPE == check_operand_family(
            named_tensors(False, **{r: t for r, t in (("a", a_tensor), ("b", b_tensor), ("sfa", sfa_tensor),
                                                        ("sfb", sfb_tensor)) if t is not None}),
            b_dtype,
        )
        if b_tensor is not None and b_ptrs is None:
            dense_major = dense_b_major(as_torch(b_tensor))
    for name, value in (("sf_fp8_dtype_override", sf_fp8_dtype_override),):
        if (why := refused_value(name, value)) is not None:
            raise ValueError(why)
    if not block_scaled:
        check_absent(
            BLOCK_SCALED,
            NotImplementedError,
            sfa_tensor=sfa_tensor,
            sfb_tensor=sfb_tensor,
            sfb_ptrs=sfb_ptrs,
            norm_const_tensor=norm_const_tensor,
        )
    if c_tensor is None:
        require({"c_tensor": c_tensor}, "every call (the op's operands)")
    if block_scaled and c_tensor is not None:
        check_vector_f32(vector_f32 is True, "c_tensor", getattr(as_torch(c_tensor), "dtype", None))
    settings = (
        b_tensor is not None, b_ptrs is not None, n, b_dtype, acc_dtype, mma_tiler_mn,
        cluster_shape_mn, sf_vec_size, vector_f32, m_aligned, discrete_col_sfd, act_func,
        geglu_alpha, glu_clamp_max, glu_clamp_min, linear_offset, situ_beta1, situ_beta2,
        b_major, epilogue_op, use_dynamic_sched, cd_major, d_dtype, generate_dbias,
        deterministic, act_out if activation_tensor is None else True,
        use_single_group_runtime_offsets, round_dgrad_to_input_dtype, block_scaled, dense_major, fp4,
    )  # fmt: skip
    key = _request_key(settings, a_tensor, c_tensor, padded_offsets)
    try:
        bound = _bound_ops.get(key) if key is not None else None
    except TypeError:  # an unhashable setting: uncached, the checks say what is wrong
        key = bound = None
    # 2. option values (checked once per request)
    config = bound.config if bound is not None else _wrapper_config(**dict(zip(WRAPPER_SETTINGS, settings)))
    discrete = config.discrete is not None
    # 3. missing tensors
    if block_scaled:
        weights_sf = {"sfb_ptrs": sfb_ptrs} if discrete else {"sfb_tensor": sfb_tensor}
        if fp4:
            require({"sfa_tensor": sfa_tensor, **weights_sf}, "FP4 operands (NVFP4: the E4M3 scale factors of A and B)")
        else:
            require({"sfa_tensor": sfa_tensor, **weights_sf, "norm_const_tensor": norm_const_tensor},
                    "FP8 operands (MXFP8: the E8M0 scale factors of A and B, and norm_const)")
    if padded_offsets is None or alpha_tensor is None or beta_tensor is None or prob_tensor is None or (
        dprob_tensor is None
    ):
        require(dict(zip(_REQUIRED, (padded_offsets, alpha_tensor, beta_tensor, prob_tensor, dprob_tensor))),
                "every call (the op's inputs)")
    if bound is None:  # the installed variant of the request
        bound = _bind(config, a_tensor, c_tensor, padded_offsets, key)
    # 4. shapes and strides (the variant's rules, when the tensors are bound)
    if block_scaled and use_single_group_runtime_offsets is True:
        check_single_group("padded_offsets", as_torch(padded_offsets), as_torch(a_tensor).shape[0], m_aligned)
    weights = (b_ptrs, sfb_ptrs) if discrete else (b_tensor, sfb_tensor)
    common = (padded_offsets, alpha_tensor, beta_tensor, prob_tensor, dprob_tensor)
    if block_scaled:
        tensors = (a_tensor, sfa_tensor, *weights, c_tensor, *(() if fp4 else (norm_const_tensor,)), *common)
    else:
        tensors = (a_tensor, weights[0], c_tensor, *common)
    roles = _WRAPPER_ROLES[discrete, block_scaled]
    if fp4:  # NVFP4 quantizes no D: no norm_const
        roles = tuple(role for role in roles if role != "norm_const")
    outputs = WRAPPER_OUTPUTS
    if activation_tensor is not None:
        roles, tensors = (*roles, "act_out"), (*tensors, activation_tensor)
        outputs = tuple(role for role in outputs if role != "act_out")
    made = bound.run(roles, tensors, current_stream, outputs)
    return TupleDict(
        d_row_tensor=made["d_row"],
        d_col_tensor=made.get("d_col"),
        dprob_tensor=dprob_tensor,
        dbias_tensor=made.get("dbias"),
        amax_tensor=made.get("amax"),
        sfd_row_tensor=made.get("sfd_row"),
        sfd_col_tensor=made.get("sfd_col"),
        **({"act_out_tensor": made.get("act_out", activation_tensor)} if act_out else {}),
    )


grouped_gemm_dglu_wrapper_sm90 = grouped_gemm_dglu
grouped_gemm_dglu_wrapper_sm100 = grouped_gemm_dglu


