"""The public op, with the seed's argument names: the wrapper here, the class API in dglu.op
(re-exported here, imported on first use), the bound op both run in dglu.bound, what they share in dglu.call; their
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

One pipeline, in one direction, for the wrapper and the class API: the seed's arguments
by name; the family that runs A's dtype on the device and its front policy (dglu.front:
what the family accepts, requires and refuses, read from its manifest entries); the
checks in order; the variant selected and loaded (a BoundOp, kept per request); the call's
tensors bound to it (checked once per call signature, dglu.bound); the launches.

Weights are dense (b_tensor / sample_b) or discrete (b_ptrs with n and b_dtype / num_experts,
b_shape and b_dtype), each selecting variants of its weight mode. A call picks the variant
of its dtypes, activation constants, dbias, weight mode and b_major, its scheduler
(use_dynamic_sched) and cluster (cluster_shape_mn, None meaning (1, 1)); among those the
given mma_tiler_mn, or else the largest tile (dglu.selection).
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import is_, itemgetter
from typing import Any

from . import runner
from .arguments import ARGUMENTS, WRAPPER
from .arrays import as_torch
from .bound import WRAPPER_TENSORS, BoundOp
from .cache import BoundedCache
from .call import (
    CALL_CACHE_CAPACITY,
    CHECKED_OPTIONS,
    WRAPPER_SOURCES,
    OpConfig,
    check_request,
    family_front,
    given_operands,
    named_tensors,
    required,
)
from .front import dtype_name, outputs, require
from .options import check_options
from .tuple_dict import TupleDict
from .weights import DENSE, DISCRETE, dense_b_major, variant_b_major, weight_mode, wrapper_discrete

__all__ = [
    "GroupedGemmDglu",
    "GroupedGemmDgluSm90",
    "GroupedGemmDgluSm100",
    "clear_caches",
    "grouped_gemm_dglu",
    "grouped_gemm_dglu_wrapper_sm90",
    "grouped_gemm_dglu_wrapper_sm100",
    "wrapper_variant",
]

_CLASS_API = ("GroupedGemmDglu", "GroupedGemmDgluSm90", "GroupedGemmDgluSm100")


def __getattr__(name: str) -> Any:
    """The class API (dglu.op), imported on first use: a wrapper call does not need it."""
    if name not in _CLASS_API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import op

    return getattr(op, name)


# The wrapper's tensor arguments and its settings (the other arguments but the stream).
_TENSOR_ARGS = WRAPPER_TENSORS
_SETTINGS = tuple(name for name in WRAPPER if ARGUMENTS[name].role == "option")
_PAIRS = ("mma_tiler_mn", "cluster_shape_mn")
_OPTIONS = tuple(name for name in _SETTINGS if name in CHECKED_OPTIONS)
_REQUIRED = required(WRAPPER)

class RequestCache:
    """The wrapper's requests: request key (_request_key) -> bound op, at most
    CALL_CACHE_CAPACITY of them, with the last request's settings (compared by identity)
    and its bound op remembered first: a call with those settings whose tensors have the
    signature of the bound op's last call (dglu.bound) runs from it, as the request key it
    would make is that call's (the key's tensor facts are the signature's)."""

    def __init__(self) -> None:
        self.ops: BoundedCache[BoundOp] = BoundedCache(CALL_CACHE_CAPACITY)
        self.last: tuple[tuple[Any, ...], BoundOp] | None = None

    def clear(self) -> None:
        """Forget every request."""
        self.ops.clear()
        self.last = None


_requests = RequestCache()


def clear_caches() -> None:
    """Forget every bound op, launch plan, loaded variant and pooled workspace."""
    _requests.clear()
    runner.clear_caches()


def _request_key(settings: tuple[Any, ...], tensors: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The bound-op cache key of a wrapper request (``settings`` and ``tensors``: the
    values of _SETTINGS and _TENSOR_ARGS): what every check before the tensors are bound
    reads. The settings by value and type (so (128, 128.0) differs from (128, 128)), which
    tensor arguments are given, A's and C's dtypes, A's device, the expert count
    (padded_offsets' shape: Blackwell's kernels compile it in) and dense B's order by its
    strides, and A's and C's shapes (a call that leaves its launch shape open takes the
    dispatch table's rule for its problem class); None when A, C or padded_offsets is no
    tensor (then nothing is cached and the checks say what is wrong). The other tensors' dtypes are checked with their shapes, once
    per call signature (dglu.bound)."""
    try:
        a, c, b = tensors[_A], tensors[_C], tensors[_B]
        return (
            settings,
            tuple(map(type, settings)),
            tuple(tuple(map(type, v)) if isinstance(v, tuple) else None for v in _pairs_of(settings)),
            tuple([t is None for t in tensors]),
            a.dtype,
            c.dtype,
            a.device,
            tuple(tensors[_OFFSETS].shape),
            None if b is None else dense_b_major(b),
            a.shape,
            c.shape,
        )
    except (AttributeError, TypeError):
        return None


_pairs_of = itemgetter(*(_SETTINGS.index(name) for name in _PAIRS))
_A, _C, _B, _OFFSETS = (_TENSOR_ARGS.index(name) for name in ("a_tensor", "c_tensor", "b_tensor", "padded_offsets"))


def _bind(given: dict[str, Any], key: tuple[Any, ...] | None) -> BoundOp:
    """Check a wrapper request in the documented order, then select and load its variant;
    kept by its ``key``."""
    import torch

    a = as_torch(given["a_tensor"])
    if a is None:
        require({"a_tensor": a}, "every call (the op's operands)")
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"a_tensor: expected a torch.Tensor, got {type(a).__name__}")
    # 1. the family that runs A's dtype on the device; 2.-3. its checks before the selection
    policy = family_front("a_tensor", a)
    c = given["c_tensor"]
    config = check_request(policy, given, given_operands(False, given), given["b_dtype"],
                           getattr(as_torch(c), "dtype", None), _wrapper_config, _REQUIRED, "call")
    # 4. the selection step (shapes and strides are checked once the tensors are bound)
    tensors = named_tensors(False, a=a, c=c, padded_offsets=given["padded_offsets"])
    bound = BoundOp.select(config, tensors, WRAPPER_SOURCES)
    return bound if key is None else _requests.ops.get_or_make(key, lambda: bound)


def _wrapper_config(policy: Any, given: Mapping[str, Any]) -> OpConfig:
    """The wrapper's checked configuration: weights, options, D_row's dtype, dbias."""
    b_tensor, b_ptrs, n, b_dtype = given["b_tensor"], given["b_ptrs"], given["n"], given["b_dtype"]
    discrete_args = {"b_ptrs": True if b_ptrs is not None else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if b_tensor is not None else None, discrete_args)
    discrete = wrapper_discrete(n, b_dtype, policy) if mode == DISCRETE else None
    options = {name: given[name] for name in _OPTIONS}
    if given["activation_tensor"] is not None:  # cuDNN FE's caller-provided act_out output
        options["act_out"] = True
    checked = check_options(**options, policy=policy)
    b = as_torch(b_tensor)
    strides_major = dense_b_major(b) if mode == DENSE and hasattr(b, "stride") else "k"
    checked = checked._replace(b_major=variant_b_major(policy, mode, checked.b_major, strides_major))
    d_dtype = dtype_name(policy, "d_dtype", given["d_dtype"])
    generate_dbias = given["generate_dbias"]
    if not isinstance(generate_dbias, bool):
        raise ValueError(f"generate_dbias: expected a bool, got {generate_dbias!r}")
    return OpConfig(mode, discrete, checked, d_dtype, generate_dbias, policy)


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
    use_single_group_runtime_offsets=True (one expert) takes its rows from A's shape and
    never reads padded_offsets (an int32 (1,) tensor still). vector_f32 has no effect on
    Hopper; epilogue_op (None, "identity", "relu", "srelu") is checked and, as in NVIDIA's
    kernels of this op, applied by no kernel. FP4 operands and E4M3 scale factors are
    refused: Hopper has no FP4 tensor cores.

    Refusals come in this order, each before anything is allocated or launched: A, and
    the family that runs its dtype on the device (FP4 on Hopper: refused), the family's
    operand checks (E4M3 scales, A's and B's FP8 types), then option values, then missing
    tensors, then shapes and strides.
    """
    settings = (  # _SETTINGS and _TENSOR_ARGS, by value (no locals(): a dict of every argument per call)
        generate_dbias, n, b_dtype, b_major, acc_dtype, d_dtype, cd_major, mma_tiler_mn, cluster_shape_mn,
        sf_vec_size, sf_fp8_dtype_override, vector_f32, m_aligned, discrete_col_sfd, act_func, linear_offset,
        geglu_alpha, glu_clamp_max, glu_clamp_min, situ_beta1, situ_beta2, epilogue_op, use_dynamic_sched,
        use_single_group_runtime_offsets, round_dgrad_to_input_dtype, deterministic, act_out,
    )
    tensors = (
        a_tensor, c_tensor, sfa_tensor, padded_offsets, alpha_tensor, beta_tensor, prob_tensor, dprob_tensor,
        b_tensor, sfb_tensor, b_ptrs, sfb_ptrs, norm_const_tensor, activation_tensor,
    )  # fmt: skip
    last = _requests.last
    made = None
    if last is not None and all(map(is_, settings, last[0])):  # the last request's very settings
        bound = last[1]
        made = bound.prebound(bound.wrapper_sites[activation_tensor is not None], tensors, current_stream)
    if not isinstance(made, dict):  # None, or what the last request's op read (a Missed)
        key = _request_key(settings, tensors)
        try:
            bound = _requests.ops.get(key) if key is not None else None
        except TypeError:  # an unhashable setting: uncached, the checks say what is wrong
            key = bound = None
        if bound is None:
            given = {**dict(zip(_SETTINGS, settings)), **dict(zip(_TENSOR_ARGS, tensors))}
            bound = _bind(given, key)
        made = bound.run_wrapper(tensors, activation_tensor is not None, current_stream, made)
        if key is not None:
            _requests.last = (settings, bound)
    made["dprob"] = dprob_tensor  # the caller's, accumulated in place
    results = outputs(bound.config.policy, made)  # in the family's order
    if act_out:
        results["act_out_tensor"] = made.get("act_out", activation_tensor)
    return results


grouped_gemm_dglu_wrapper_sm90 = grouped_gemm_dglu
grouped_gemm_dglu_wrapper_sm100 = grouped_gemm_dglu


def wrapper_variant(**arguments: Any) -> str:
    """The name of the prebuilt variant ``grouped_gemm_dglu(**arguments)`` runs (its tile,
    cluster and consumer; the class API has ``variant_name``): the wrapper's checks
    and selection, its cubin loaded, nothing allocated or launched."""
    unknown = sorted(set(arguments) - set(WRAPPER))
    if unknown:
        raise TypeError(f"wrapper_variant() takes grouped_gemm_dglu's arguments by name; got {unknown}")
    given = {name: arguments.get(name, ARGUMENTS[name].default) for name in WRAPPER}
    return _bind(given, None).variant.name
