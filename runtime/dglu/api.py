"""The public op, with the seed's argument names: the wrapper here, the class API in dglu.op
(re-exported here), what both share in dglu.call.

Argument names, order of outputs and defaults follow NVIDIA's grouped_gemm_dglu_*_sm100
API, except that ``acc_dtype`` and ``d_dtype`` default to None, meaning torch.float32 and
torch.bfloat16 (so that importing dglu does not import torch). Every argument is checked
before anything is allocated or launched. The seed's names (``*_sm90``, ``*_sm100``) and the
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
from .arrays import as_torch
from .blockscaled import (
    check_operands,
    check_single_group,
    check_vector_f32,
    dense_b_major,
    is_block_scaled,
    require,
)
from .cache import BoundedCache
from .call import BLOCK_SCALED, CALL_CACHE_CAPACITY, COMMON_ROLES, OpConfig, named_tensors
from .op import GroupedGemmDglu, GroupedGemmDgluSm90, GroupedGemmDgluSm100
from .options import check_absent, check_options, output_dtype_name
from .tuple_dict import TupleDict
from .validation import element_types
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


def clear_caches() -> None:
    """Forget every cached call, op, launch plan, loaded variant and pooled workspace."""
    _wrapper_calls.clear()
    _wrapper_ops.clear()
    _wrapper_configs.clear()
    runner.clear_caches()



def _configure_wrapper(**arguments: Any) -> OpConfig:
    """OpConfig of the arguments, cached by their values and types (96 and 96.0, or
    True and 1, are different arguments) when they are hashable."""
    values = tuple(arguments.values())
    pairs = _pair_types(arguments["mma_tiler_mn"], arguments["cluster_shape_mn"])
    key = (values, tuple(map(type, values)), pairs)
    try:
        return _wrapper_configs.get_or_make(key, lambda: _wrapper_config(**arguments))
    except TypeError:  # an unhashable argument: check it uncached (and raise if bad)
        return _wrapper_config(**arguments)


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
    discrete_args = {"b_ptrs": True if has_b_ptrs else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if has_b_tensor else None, discrete_args)
    block_scaled = options["block_scaled"]
    discrete = wrapper_discrete(n, b_dtype, block_scaled) if mode == DISCRETE else None
    checked = check_options(**options)
    if block_scaled:
        checked = checked._replace(b_major=block_scaled_b_major(mode, checked.b_major, dense_b_major))
    else:
        check_b_major(mode, checked.b_major)
    d_dtype_name = output_dtype_name("d_dtype", d_dtype, block_scaled)
    if not isinstance(generate_dbias, bool):
        raise ValueError(f"generate_dbias: expected a bool, got {generate_dbias!r}")
    return OpConfig(mode, discrete, checked, d_dtype_name, generate_dbias)


def _wrapper_op(config: OpConfig, a_tensor: Any, c_tensor: Any) -> GroupedGemmDglu:
    """The compiled class-API op serving wrapper calls of this configuration, element
    types and device (cached; uncached when A or C is no tensor, for the checks to say)."""
    try:
        key = (config, a_tensor.dtype, c_tensor.dtype, a_tensor.device)
    except AttributeError:
        key = None
    make = lambda: GroupedGemmDglu._for_wrapper(config, a_tensor, c_tensor)  # noqa: E731
    return make() if key is None else _wrapper_ops.get_or_make(key, make)


# The wrapper's non-tensor arguments, in the order grouped_gemm_dglu hands them over.
WRAPPER_SETTINGS = (
    "has_b_tensor", "has_b_ptrs", "n", "b_dtype", "acc_dtype", "mma_tiler_mn",
    "cluster_shape_mn", "sf_vec_size", "vector_f32", "m_aligned", "discrete_col_sfd",
    "act_func", "geglu_alpha", "glu_clamp_max", "glu_clamp_min", "linear_offset",
    "situ_beta1", "situ_beta2", "b_major", "epilogue_op", "use_dynamic_sched", "cd_major",
    "d_dtype", "generate_dbias", "deterministic", "act_out", "use_single_group_runtime_offsets",
    "round_dgrad_to_input_dtype", "block_scaled", "dense_b_major",
)


def _wrapper_op_for(settings: tuple[Any, ...], a_tensor: Any, c_tensor: Any) -> GroupedGemmDglu:
    """The op of a wrapper call: one dictionary read when these settings (by value and
    type), A's and C's dtypes and A's device were seen before; else the settings are
    checked (_configure_wrapper) and the op selected (_wrapper_op)."""
    try:
        key = (
            settings,
            tuple(map(type, settings)),
            _pair_types(settings[5], settings[6]),
            a_tensor.dtype,
            c_tensor.dtype,
            a_tensor.device,
        )
        op = _wrapper_calls.get(key)
    except (AttributeError, TypeError):  # no tensor, or an unhashable setting: uncached
        key = op = None
    if op is None:
        config = _configure_wrapper(**dict(zip(WRAPPER_SETTINGS, settings)))
        op = _wrapper_op(config, a_tensor, c_tensor)
        if key is not None:
            _wrapper_calls.get_or_make(key, lambda: op)
    return op


_wrapper_configs: BoundedCache[OpConfig] = BoundedCache(CALL_CACHE_CAPACITY)
_wrapper_ops: BoundedCache[GroupedGemmDglu] = BoundedCache(CALL_CACHE_CAPACITY)
_wrapper_calls: BoundedCache[GroupedGemmDglu] = BoundedCache(CALL_CACHE_CAPACITY)
# The roles of the tensors each call hands _run, in order: by weights (discrete or not) and
# block scaling for the wrapper, by the weights' role for execute() (and with dbias).
_WRAPPER_ROLES = {
    (False, False): ("a", "b", "c", *COMMON_ROLES),
    (True, False): ("a", "b_ptrs", "c", *COMMON_ROLES),
    (False, True): ("a", "sfa", "b", "sfb", "c", "norm_const", *COMMON_ROLES),
    (True, True): ("a", "sfa", "b_ptrs", "sfb_ptrs", "c", "norm_const", *COMMON_ROLES),
}


def grouped_gemm_dglu(
    a_tensor: Any,
    c_tensor: Any,
    sfa_tensor: Any = None,
    *,
    padded_offsets: Any,
    alpha_tensor: Any,
    beta_tensor: Any,
    prob_tensor: Any,
    dprob_tensor: Any,
    b_tensor: Any = None,
    sfb_tensor: Any = None,
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
    vector_f32: bool = False,
    m_aligned: int = 256,
    discrete_col_sfd: bool = False,
    act_func: str = "dswiglu",
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    linear_offset: float = 1.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    epilogue_op: str | None = None,
    generate_dbias: bool = False,
    use_dynamic_sched: bool = False,
    current_stream: Any = None,
    deterministic: bool = False,
    act_out: bool = False,
    use_single_group_runtime_offsets: bool = False,
    round_dgrad_to_input_dtype: bool = False,
) -> TupleDict:
    """Grouped GEMM + dGLU backward on the tensors' device; allocates the outputs.

    BF16 operands. Weights: b_tensor (N, K, L), or b_ptrs (L,) int64 device pointers to
    per-expert (N, K) bf16 matrices with n=N and b_dtype=torch.bfloat16 (b_major "k" or "n"
    orders each). C may be bf16, fp16 or fp32; d_dtype (default bf16) picks D_row's, among
    the same. Returns a TupleDict in the seed's order: d_row_tensor (M, 2N, 1) in d_dtype,
    d_col_tensor None, dprob_tensor (the caller's, accumulated), dbias_tensor ((L, 2N, 1)
    bf16 or None), amax_tensor, sfd_row_tensor and sfd_col_tensor None. Rows of D_row past
    valid_m (owned by no expert) are left uninitialised. act_out=True (not in the seed) runs
    the variant that also writes prob * GLU(C), the MLP's activation that dW2 needs, and adds
    it as an eighth, trailing entry act_out_tensor ((M, N, 1) bf16; rows past valid_m
    uninitialised); without it the TupleDict keeps the seed's seven entries.
    deterministic=True (cuDNN FE's newer option) runs the variant whose D, dprob and dbias
    are bitwise identical from run to run and across schedulers: per-tile partial sums
    reduced in a fixed order instead of float atomics (about 1-3% slower on the H200).
    round_dgrad_to_input_dtype=True (cuDNN FE 1.32.0's option) rounds R = alpha^2 A B^T to
    A's dtype (bf16) before the epilogue; FP8 operands refuse it.

    Block-scaled (MXFP8) operands: A and B both torch.float8_e4m3fn or both float8_e5m2
    (dense B K- or N-major by its strides; discrete b_ptrs with sfb_ptrs and
    b_dtype=A's dtype), sfa_tensor / sfb_tensor (or sfb_ptrs) torch.float8_e8m0fnu in the
    seed's layouts, sf_vec_size=32, norm_const_tensor (1,) fp32 on the device, d_dtype
    float8_e4m3fn or float8_e5m2; C in bf16, fp16, fp32, e4m3 or e5m2. Returns d_row_tensor
    and d_col_tensor (M, 2N, 1) FP8, sfd_row_tensor and sfd_col_tensor E8M0 (SFD_col in the
    per-expert layout with discrete_col_sfd=True), dprob and dbias (from the unquantized D)
    as above; amax_tensor is None (Hopper has no FP4 path that produces it).
    use_single_group_runtime_offsets=True (one expert) takes its rows from A's shape and
    never reads padded_offsets (an int32 (1,) tensor still). vector_f32 has no effect on
    Hopper; epilogue_op (None, "identity", "relu", "srelu") is checked and, as in NVIDIA's
    kernels of this op, applied by no kernel. FP4 operands and E4M3 scale factors are
    refused: Hopper has no FP4 tensor cores.
    """
    block_scaled = is_block_scaled(
        getattr(a_tensor, "dtype", None), sfa_tensor, sfb_tensor, sfb_ptrs, norm_const_tensor
    )
    dense_major = "k"
    if block_scaled:
        weights = {"sfb_ptrs": sfb_ptrs} if b_ptrs is not None else {"sfb_tensor": sfb_tensor}
        require({"sfa_tensor": sfa_tensor, **weights, "norm_const_tensor": norm_const_tensor})
        _check_block_scaled_wrapper(
            a_tensor, c_tensor, b_tensor, sfa_tensor, sfb_tensor, b_dtype, vector_f32,
            padded_offsets, use_single_group_runtime_offsets, m_aligned,
        )
        if b_tensor is not None and b_ptrs is None:
            dense_major = dense_b_major(as_torch(b_tensor))
    else:
        check_absent(
            BLOCK_SCALED,
            NotImplementedError,
            sfa_tensor=sfa_tensor,
            sfb_tensor=sfb_tensor,
            sfb_ptrs=sfb_ptrs,
            norm_const_tensor=norm_const_tensor,
        )
    op = _wrapper_op_for(
        (
            b_tensor is not None,
            b_ptrs is not None,
            n,
            b_dtype,
            acc_dtype,
            mma_tiler_mn,
            cluster_shape_mn,
            sf_vec_size,
            vector_f32,
            m_aligned,
            discrete_col_sfd,
            act_func,
            geglu_alpha,
            glu_clamp_max,
            glu_clamp_min,
            linear_offset,
            situ_beta1,
            situ_beta2,
            b_major,
            epilogue_op,
            use_dynamic_sched,
            cd_major,
            d_dtype,
            generate_dbias,
            deterministic,
            act_out,
            use_single_group_runtime_offsets,
            round_dgrad_to_input_dtype,
            block_scaled,
            dense_major,
        ),
        a_tensor,
        c_tensor,
    )
    discrete = op._config.discrete is not None
    weights = (b_ptrs, sfb_ptrs) if discrete else (b_tensor, sfb_tensor)
    common = (padded_offsets, alpha_tensor, beta_tensor, prob_tensor, dprob_tensor)
    if block_scaled:
        tensors = (a_tensor, sfa_tensor, *weights, c_tensor, norm_const_tensor, *common)
    else:
        tensors = (a_tensor, weights[0], c_tensor, *common)
    made = op._run(_WRAPPER_ROLES[discrete, block_scaled], tensors, current_stream, allocate=True)
    return TupleDict(
        d_row_tensor=made["d_row"],
        d_col_tensor=made.get("d_col"),
        dprob_tensor=dprob_tensor,
        dbias_tensor=made.get("dbias"),
        amax_tensor=None,
        sfd_row_tensor=made.get("sfd_row"),
        sfd_col_tensor=made.get("sfd_col"),
        **({"act_out_tensor": made["act_out"]} if act_out else {}),
    )


def _check_block_scaled_wrapper(
    a_tensor: Any,
    c_tensor: Any,
    b_tensor: Any,
    sfa_tensor: Any,
    sfb_tensor: Any,
    b_dtype: Any,
    vector_f32: Any,
    padded_offsets: Any,
    single_group: Any,
    m_aligned: Any,
) -> None:
    """The block-scaled wrapper call's operand dtypes, vector_f32 with C and single-group
    offsets (dglu.blockscaled); shapes and strides are the variant's checks."""
    named = named_tensors(False, a=a_tensor, c=c_tensor)
    for role, tensor in (("b", b_tensor), ("sfa", sfa_tensor), ("sfb", sfb_tensor)):
        if tensor is not None:
            named.update(named_tensors(False, **{role: tensor}))
    element_types(named)
    check_operands(named, b_dtype)
    check_vector_f32(vector_f32 is True, "c_tensor", named["c"][1].dtype)
    if single_group is True and type(m_aligned) is int and m_aligned > 0:
        check_single_group("padded_offsets", as_torch(padded_offsets), named["a"][1].shape[0], m_aligned)


grouped_gemm_dglu_wrapper_sm90 = grouped_gemm_dglu
grouped_gemm_dglu_wrapper_sm100 = grouped_gemm_dglu


