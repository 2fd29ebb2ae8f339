"""The public op, with the seed's argument names: the wrapper and the class API.

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

import functools
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, NamedTuple

from . import runner
from .arrays import as_torch
from .blockscaled import (
    check_operands,
    check_single_group,
    check_vector_f32,
    dense_b_major,
    is_block_scaled,
    refuse_amax,
    require,
)
from .cache import BoundedCache, tensors_key
from .driver import device_info
from .dtypes import FLOAT_TYPES, FP8_TYPES, torch_dtype
from .errors import DeviceMemoryError, VariantNotFoundError
from .contract.schema import Variant
from .manifest import installed_variants, search_path
from .options import OpOptions, check_absent, check_m_aligned, check_options, output_dtype_name
from .problem import Problem
from .runner import LoadedVariant, load_variant, run_variant
from .selection import VariantRequest, arch_for_capability, select_variant
from .streams import on_stream, resolve_stream
from .tuple_dict import TupleDict
from .validation import check_offset_values, describe_tensors, element_types, view_of
from .workspaces import is_capturing
from .weights import (
    DENSE,
    DISCRETE,
    DiscreteWeights,
    block_scaled_b_major,
    check_b_major,
    class_discrete,
    weight_mode,
    wrapper_discrete,
)

BLOCK_SCALED = (
    "block-scaled (MXFP8) argument, for FP8 operands (torch.float8_e4m3fn/e5m2); these "
    "operands select the BF16 backend"
)
# Tensor role (docs/manifest.md) -> its argument name in the wrapper and in execute().
ARGUMENT_NAMES = {
    "a": "a_tensor",
    "b": "b_tensor",
    "c": "c_tensor",
    "d_row": "d_row_tensor",
    "padded_offsets": "padded_offsets",
    "alpha": "alpha_tensor",
    "beta": "beta_tensor",
    "prob": "prob_tensor",
    "dprob": "dprob_tensor",
    "dbias": "dbias_tensor",
    "b_ptrs": "b_ptrs",
    "act_out": "act_out_tensor",
    "sfa": "sfa_tensor",
    "sfb": "sfb_tensor",
    "sfb_ptrs": "sfb_ptrs",
    "d_col": "d_col_tensor",
    "sfd_row": "sfd_row_tensor",
    "sfd_col": "sfd_col_tensor",
    "norm_const": "norm_const_tensor",
}
CHECK_OFFSETS_ENV = "DGLU_CHECK_OFFSETS"
CALL_CACHE_CAPACITY = 256  # described calls kept per op (class API) or in all (wrapper)
# Output addresses kept per wrapper call: torch's allocator hands a repeated call's outputs
# the few addresses the previous results freed.
OUTPUT_CACHE_CAPACITY = 16
# The weight arguments of each discrete mode, in the seed's order.
WRAPPER_DISCRETE = ("b_ptrs", "n", "b_dtype")
CLASS_DISCRETE = ("num_experts", "b_shape", "b_dtype")


# Variant key field -> the arguments that choose it (for the no-variant error).
_FIELD_SOURCES = {
    "arch": "the tensors' device",
    "act_func": "act_func",
    "b_major": "b_major",
    "tile_m": "mma_tiler_mn",
    "tile_n": "mma_tiler_mn",
    "cluster_m": "cluster_shape_mn",
    "cluster_n": "cluster_shape_mn",
    "scheduler": "use_dynamic_sched",
    "deterministic": "deterministic",
    "act_out": "act_out",
}
WRAPPER_SOURCES = {
    **_FIELD_SOURCES,
    "ab_dtype": "a_tensor",
    "c_dtype": "c_tensor",
    "d_dtype": "d_dtype",
    "dbias": "generate_dbias",
    "weight_mode": "b_tensor or b_ptrs",
}
CLASS_SOURCES = {
    **_FIELD_SOURCES,
    "ab_dtype": "sample_a",
    "c_dtype": "sample_c",
    "d_dtype": "sample_d_row",
    "dbias": "sample_dbias",
    "weight_mode": "sample_b or num_experts",
}


def _named(samples: bool, **tensors: Any) -> dict[str, tuple[str, Any]]:
    """Role -> (argument name, tensor); the class constructor's names are sample_<role>.
    Foreign CUDA arrays (DLPack, __cuda_array_interface__) become torch tensors over the
    same memory (dglu.arrays)."""
    return {
        role: (f"sample_{role}" if samples else ARGUMENT_NAMES[role], as_torch(tensor))
        for role, tensor in tensors.items()
    }


@dataclass(frozen=True)
class OpConfig:
    """An op's checked non-tensor arguments: weight mode, options, D_row's dtype (None: the
    class API's sample_d_row gives it), dbias."""

    mode: str
    discrete: DiscreteWeights | None
    options: OpOptions
    d_dtype: str | None
    dbias: bool

    def __hash__(self) -> int:  # hashed on every wrapper call: computed once
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.mode, self.discrete, self.options, self.d_dtype, self.dbias))

    def given_scalars(self) -> dict[str, tuple[int, str]]:
        """Scalars the weight arguments fix (discrete weights' n, k, l)."""
        return self.discrete.given_scalars() if self.discrete else {}


def _select(
    config: OpConfig, tensors: dict[str, tuple[str, Any]], sources: dict[str, str]
) -> Variant:
    """The variant for the tensors' element types (checked first), the configuration and
    A's device; m_aligned checked against it."""
    types = element_types(tensors)
    options = config.options
    # the op's contract: C is BF16, FP16 or FP32, or FP8 on the block-scaled backend
    c_types = FLOAT_TYPES + FP8_TYPES if options.block_scaled else FLOAT_TYPES
    if types["c"] not in c_types:
        raise ValueError(
            f"{tensors['c'][0]}: dtype {tensors['c'][1].dtype} is not accepted; expected one "
            f"of {', '.join(str(torch_dtype(t)) for t in c_types)}"
        )
    device = tensors["a"][1].device.index
    if config.discrete:
        config.discrete.check_dtype_of(tensors["a"][0], types["a"])
    tile = options.tile or (None, None)
    request = VariantRequest(
        arch=device_arch(device),
        ab_dtype=types["a"],
        c_dtype=types["c"],
        d_dtype=config.d_dtype or types["d_row"],
        act_func=options.act_func,
        act_params=options.act_params,
        dbias=config.dbias,
        weight_mode=config.mode,
        b_major=options.b_major,
        tile_m=tile[0],
        tile_n=tile[1],
        cluster_m=options.cluster[0],
        cluster_n=options.cluster[1],
        scheduler=options.scheduler,
        deterministic=options.deterministic,
        act_out=options.act_out,
    )
    searched = [f"{entry.directory} ({entry.origin})" for entry in search_path()]
    constants = ", ".join(name for name, _ in options.act_params) or "act_func"
    variant = select_variant(
        installed_variants(), request, searched, {**sources, "act_params": constants}
    )
    check_m_aligned(options, variant)
    return variant


def device_arch(device: int) -> str:
    """The exact cubin architecture of ``device``, if installed cubins cover it; else raise
    naming the device, its compute capability and the architectures installed."""
    info = device_info(device)
    covered = sorted({variant.key.arch for variant in installed_variants()})
    arch = arch_for_capability(info.capability)
    if arch not in covered:
        major, minor = info.capability
        needed = f"{arch} cubins" if arch else "cubins dglu can build"
        raise VariantNotFoundError(
            f"cuda:{info.ordinal} ({info.name}, compute capability {major}.{minor}) needs "
            f"{needed}; none are installed: they cover {', '.join(covered) or 'no architecture'} "
            f"(searched {', '.join(str(entry.directory) for entry in search_path())})"
        )
    return arch


def offsets_check_enabled() -> bool:
    """True when DGLU_CHECK_OFFSETS asks every call to check padded_offsets on the host."""
    return os.environ.get(CHECK_OFFSETS_ENV, "") not in ("", "0")


def _check_offsets(padded_offsets: Any, problem: Problem, stream: int, m_aligned: int) -> None:
    """Check padded_offsets' values on the host, unless ``stream`` is capturing a graph."""
    if is_capturing(stream):
        return
    with on_stream(stream, problem.tensors["a"].device):
        values = as_torch(padded_offsets).tolist()
    check_offset_values("padded_offsets", values, problem.scalars["m"], m_aligned)


def clear_caches() -> None:
    """Forget every cached call, op, launch plan, loaded variant and pooled workspace."""
    _wrapper_calls.clear()
    _wrapper_ops.clear()
    _wrapper_configs.clear()
    runner.clear_caches()


class OutputRule(NamedTuple):
    """An output the wrapper allocates: its role, shape, strides (the variant's: e.g. the
    scale factors' permuted layout), torch dtype, and whether the kernels accumulate into it
    (then it is zeroed on the call's stream)."""

    role: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: Any
    accumulate: bool


def _contiguous(rule: OutputRule) -> bool:
    """True when a contiguous tensor has the rule's strides (along dimensions of size > 1):
    then torch.empty allocates it, as callers expect (e.g. ``.view(torch.uint8)`` works);
    the scale factors' permuted layout needs torch.empty_strided."""
    expected = 1
    for size, stride in reversed(list(zip(rule.shape, rule.strides))):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def _allocate_outputs(rules: tuple[OutputRule, ...], device: int | None) -> dict[str, Any]:
    """The wrapper's new outputs on cuda:``device`` (the CPU when None); DeviceMemoryError,
    before anything is enqueued, when the device has no room for one."""
    import torch

    torch_device = torch.device("cuda", device) if device is not None else None
    made = {}
    for rule in rules:
        try:
            made[rule.role] = (
                torch.empty(rule.shape, dtype=rule.dtype, device=torch_device)
                if _contiguous(rule)
                else torch.empty_strided(rule.shape, rule.strides, dtype=rule.dtype, device=torch_device)
            )
        except torch.OutOfMemoryError as exc:
            size = math.prod(rule.shape) * rule.dtype.itemsize
            raise DeviceMemoryError(
                f"{rule.role}_tensor: no room for the output {tuple(rule.shape)} {rule.dtype} "
                f"({size} bytes) on cuda:{device} ({exc}); nothing was enqueued and no "
                "argument was written. Free device memory (drop unused tensors, "
                "torch.cuda.empty_cache()) or split the call into fewer rows"
            ) from exc
    return made


class PreparedCall:
    """What a call's tensors resolve to, cached by their keys: the problem and, for the
    wrapper, the outputs to allocate and the problem with each set of output addresses."""

    def __init__(self, problem: Problem, variant: Variant, outputs: tuple[str, ...]) -> None:
        self.problem = problem
        self.outputs = tuple(
            OutputRule(
                role,
                tuple(e.value(problem.scalars) for e in variant.arguments[role].shape),
                tuple(e.value(problem.scalars) for e in variant.arguments[role].strides),
                torch_dtype(variant.arguments[role].dtypes[0]),
                variant.arguments[role].io == "accumulate",
            )
            for role in outputs
        )
        self.cleared = tuple(rule.role for rule in self.outputs if rule.accumulate)
        self._variant = variant
        self._with_outputs: BoundedCache[Problem] = BoundedCache(OUTPUT_CACHE_CAPACITY)

    def with_outputs(self, made: dict[str, Any]) -> Problem:
        """The problem with the freshly allocated outputs' views added."""
        key = tuple(tensor.data_ptr() for tensor in made.values())
        return self._with_outputs.get_or_make(key, lambda: self._add_outputs(made))

    def _add_outputs(self, made: dict[str, Any]) -> Problem:
        problem = self.problem
        views = dict(problem.tensors)
        for role, tensor in made.items():
            views[role] = view_of(tensor, self._variant.arguments[role], problem.scalars)
        return Problem(problem.scalars, problem.origins, views)


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
    "block_scaled", "dense_b_major",
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
# allocated by the wrapper when the variant takes them
WRAPPER_OUTPUTS = ("d_row", "d_col", "sfd_row", "sfd_col", "dbias", "act_out")
_COMMON_ROLES = ("padded_offsets", "alpha", "beta", "prob", "dprob")
# The roles of the tensors each call hands _run, in order: by weights (discrete or not) and
# block scaling for the wrapper, by the weights' role for execute() (and with dbias).
_WRAPPER_ROLES = {
    (False, False): ("a", "b", "c", *_COMMON_ROLES),
    (True, False): ("a", "b_ptrs", "c", *_COMMON_ROLES),
    (False, True): ("a", "sfa", "b", "sfb", "c", "norm_const", *_COMMON_ROLES),
    (True, True): ("a", "sfa", "b_ptrs", "sfb_ptrs", "c", "norm_const", *_COMMON_ROLES),
}
_EXECUTE_ROLES = {b: ("a", b, "c", "d_row", *_COMMON_ROLES) for b in ("b", "b_ptrs")}
_DBIAS_EXECUTE_ROLES = {b: (*roles, "dbias") for b, roles in _EXECUTE_ROLES.items()}
_QUANTIZED_D_ROLES = ("d_row", "d_col", "sfd_row", "sfd_col")
_BLOCK_SCALED_EXECUTE_ROLES = {
    DENSE: ("a", "sfa", "b", "sfb", "c", *_QUANTIZED_D_ROLES, "norm_const", *_COMMON_ROLES),
    DISCRETE: ("a", "sfa", "b_ptrs", "sfb_ptrs", "c", *_QUANTIZED_D_ROLES, "norm_const", *_COMMON_ROLES),
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
    named = _named(False, a=a_tensor, c=c_tensor)
    for role, tensor in (("b", b_tensor), ("sfa", sfa_tensor), ("sfb", sfb_tensor)):
        if tensor is not None:
            named.update(_named(False, **{role: tensor}))
    element_types(named)
    check_operands(named, b_dtype)
    check_vector_f32(vector_f32 is True, "c_tensor", named["c"][1].dtype)
    if single_group is True and type(m_aligned) is int and m_aligned > 0:
        check_single_group("padded_offsets", as_torch(padded_offsets), named["a"][1].shape[0], m_aligned)


grouped_gemm_dglu_wrapper_sm90 = grouped_gemm_dglu
grouped_gemm_dglu_wrapper_sm100 = grouped_gemm_dglu


def _given_weight_mode(b_tensor: Any, b_ptrs: Any) -> str | None:
    """DENSE or DISCRETE when exactly one of the weight arguments is given, else None."""
    if (b_tensor is None) == (b_ptrs is None):
        return None
    return DENSE if b_ptrs is None else DISCRETE


class GroupedGemmDglu:
    """Class API: describe the op with sample tensors, check_support(), compile(), execute().

    dbias is compiled in only when ``sample_dbias`` is given. Weights are dense (sample_b)
    or discrete (num_experts, b_shape=(N, K), b_dtype=torch.bfloat16; execute() then takes
    b_ptrs). compile() loads the prebuilt cubin (nothing is compiled at run time).
    execute() accepts any M with the samples' dtypes, on the samples' device, and any N, K,
    L for dense weights; discrete weights fix N and K (b_shape) and L (num_experts).
    """

    def __init__(
        self,
        sample_a: Any,
        sample_c: Any,
        sample_d_row: Any,
        sample_d_col: Any = None,
        sample_sfa: Any = None,
        *,
        sample_padded_offsets: Any,
        sample_alpha: Any,
        sample_beta: Any,
        sample_prob: Any,
        sample_dprob: Any,
        sample_dbias: Any = None,
        sample_b: Any = None,
        sample_sfb: Any = None,
        sample_sfd_row: Any = None,
        sample_sfd_col: Any = None,
        sample_amax: Any = None,
        sample_norm_const: Any = None,
        num_experts: int | None = None,
        b_shape: tuple[int, int] | None = None,
        b_dtype: Any = None,
        acc_dtype: Any = None,
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
        b_major: str = "k",
        epilogue_op: str | None = None,
        use_dynamic_sched: bool = False,
        deterministic: bool = False,
        act_out: bool = False,
        use_single_group_runtime_offsets: bool = False,
    ) -> None:
        block_scaled_samples = {
            "d_col": sample_d_col,
            "sfa": sample_sfa,
            "sfd_row": sample_sfd_row,
            "sfd_col": sample_sfd_col,
            "norm_const": sample_norm_const,
        }
        self._block_scaled = is_block_scaled(
            getattr(sample_a, "dtype", None), sample_sfa, sample_sfb, sample_norm_const
        )
        self._samples = _named(
            True,
            a=sample_a,
            c=sample_c,
            d_row=sample_d_row,
            padded_offsets=sample_padded_offsets,
            alpha=sample_alpha,
            beta=sample_beta,
            prob=sample_prob,
            dprob=sample_dprob,
            **({"dbias": sample_dbias} if sample_dbias is not None else {}),
            **{role: t for role, t in block_scaled_samples.items() if t is not None},
        )
        self._sample_amax = sample_amax
        self._sample_b = sample_b
        self._sample_sfb = sample_sfb
        # for a BF16 op to refuse by name
        self._block_scaled_samples = {
            **{f"sample_{role}": tensor for role, tensor in block_scaled_samples.items()},
            "sample_sfb": sample_sfb,
            "sample_amax": sample_amax,
        }
        self._discrete_args = dict(zip(CLASS_DISCRETE, (num_experts, b_shape, b_dtype)))
        self._options_given = {
            "acc_dtype": acc_dtype,
            "mma_tiler_mn": mma_tiler_mn,
            "cluster_shape_mn": cluster_shape_mn,
            "sf_vec_size": sf_vec_size,
            "vector_f32": vector_f32,
            "m_aligned": m_aligned,
            "discrete_col_sfd": discrete_col_sfd,
            "act_func": act_func,
            "geglu_alpha": geglu_alpha,
            "glu_clamp_max": glu_clamp_max,
            "glu_clamp_min": glu_clamp_min,
            "linear_offset": linear_offset,
            "situ_beta1": situ_beta1,
            "situ_beta2": situ_beta2,
            "b_major": b_major,
            "epilogue_op": epilogue_op,
            "use_dynamic_sched": use_dynamic_sched,
            "deterministic": deterministic,
            "act_out": act_out,
            "use_single_group_runtime_offsets": use_single_group_runtime_offsets,
        }
        self._reset()

    def _reset(self) -> None:
        self._config: OpConfig | None = None
        self._variant: Variant | None = None
        self._loaded: LoadedVariant | None = None
        self._calls: BoundedCache[PreparedCall] = BoundedCache(CALL_CACHE_CAPACITY)

    @classmethod
    def _for_wrapper(cls, config: OpConfig, a_tensor: Any, c_tensor: Any) -> GroupedGemmDglu:
        """A compiled op for wrapper calls: selected from A's and C's element types and
        device and the wrapper's configuration (the wrapper's tensors are checked per call)."""
        op = cls.__new__(cls)
        op._reset()
        op._block_scaled = config.options.block_scaled
        tensors = _named(False, a=a_tensor, c=c_tensor)
        op._config = config
        op._variant = _select(config, tensors, WRAPPER_SOURCES)
        op._loaded = load_variant(op._variant, tensors["a"][1].device.index)
        return op

    @property
    def variant_name(self) -> str | None:
        """The name of the prebuilt variant chosen by check_support(), if it ran."""
        return self._variant.name if self._variant else None

    def check_support(self) -> bool:
        """True when a prebuilt kernel serves the samples and configuration; else raise why."""
        block_scaled = self._block_scaled
        mode = weight_mode("sample_b", self._sample_b, self._discrete_args)
        discrete = class_discrete(**self._discrete_args, block_scaled=block_scaled) if mode == DISCRETE else None
        options = check_options(**self._options_given, block_scaled=block_scaled)
        if not block_scaled:
            check_b_major(mode, options.b_major)
        samples = dict(self._samples)
        if not discrete:
            samples.update(_named(True, b=self._sample_b))
            if self._sample_sfb is not None:
                samples.update(_named(True, sfb=self._sample_sfb))
        if block_scaled:
            self._check_block_scaled_samples(samples, options)
            strides_major = dense_b_major(samples["b"][1]) if not discrete else "k"
            options = options._replace(b_major=block_scaled_b_major(mode, options.b_major, strides_major))
        else:
            check_absent(BLOCK_SCALED, NotImplementedError, **self._block_scaled_samples)
        config = OpConfig(mode, discrete, options, None, "dbias" in self._samples)
        variant = _select(config, samples, CLASS_SOURCES)
        # discrete weights have no sample, nor the act_out output: execute() checks them
        later = ("b_ptrs", "sfb_ptrs", "act_out") if discrete else ("act_out",)
        describe_tensors(variant, samples, config.given_scalars(), later, options.flags())
        self._config, self._variant = config, variant
        return True

    def _check_block_scaled_samples(self, samples: dict[str, tuple[str, Any]], options: OpOptions) -> None:
        """The block-scaled samples' presence and dtypes, amax, vector_f32 with C,
        single-group offsets."""
        needed = ["sample_sfa", "sample_d_col", "sample_sfd_row", "sample_sfd_col", "sample_norm_const"]
        if "b" in samples:
            needed.insert(1, "sample_sfb")
        require({name: self._block_scaled_samples[name] for name in needed})
        element_types(samples)
        check_operands(samples, self._discrete_args["b_dtype"])
        refuse_amax("sample_amax", self._sample_amax)
        check_vector_f32(options.vector_f32, "sample_c", samples["c"][1].dtype)
        if options.single_group:
            check_single_group(
                "sample_padded_offsets", samples["padded_offsets"][1], samples["a"][1].shape[0], options.m_aligned
            )

    def compile(self) -> None:
        """Load the chosen prebuilt cubin on the samples' device (checks support first)."""
        if self._variant is None:
            self.check_support()
        self._loaded = load_variant(self._variant, self._samples["a"][1].device.index)

    def execute(
        self,
        a_tensor: Any,
        c_tensor: Any,
        d_row_tensor: Any,
        d_col_tensor: Any = None,
        sfa_tensor: Any = None,
        *,
        padded_offsets: Any,
        alpha_tensor: Any,
        beta_tensor: Any,
        prob_tensor: Any,
        dprob_tensor: Any,
        dbias_tensor: Any = None,
        b_tensor: Any = None,
        sfb_tensor: Any = None,
        b_ptrs: Any = None,
        sfb_ptrs: Any = None,
        sfd_row_tensor: Any = None,
        sfd_col_tensor: Any = None,
        amax_tensor: Any = None,
        norm_const_tensor: Any = None,
        current_stream: Any = None,
        act_out_tensor: Any = None,
    ) -> None:
        """Run the op into ``d_row_tensor``; dprob (and dbias) accumulate (compiles if needed).
        An op built with act_out=True also writes prob * GLU(C) into ``act_out_tensor``
        ((M, N, 1) bf16, required then; refused otherwise). A block-scaled op writes
        d_row_tensor, d_col_tensor, sfd_row_tensor and sfd_col_tensor (all required)."""
        if self._block_scaled:
            refuse_amax("amax_tensor", amax_tensor)
            weights = (b_ptrs, sfb_ptrs) if self._built_mode == DISCRETE else (b_tensor, sfb_tensor)
            self._execute_block_scaled(
                (a_tensor, sfa_tensor, *weights, c_tensor, d_row_tensor, d_col_tensor, sfd_row_tensor,
                 sfd_col_tensor, norm_const_tensor, padded_offsets, alpha_tensor, beta_tensor,
                 prob_tensor, dprob_tensor),
                b_tensor, b_ptrs, dbias_tensor, current_stream,
            )
            return
        # all None (the usual call): one comparison chain instead of check_absent's dict
        if not (
            d_col_tensor is sfa_tensor is sfb_tensor is sfb_ptrs is sfd_row_tensor
            is sfd_col_tensor is amax_tensor is norm_const_tensor is None
        ):
            check_absent(
                BLOCK_SCALED,
                NotImplementedError,
                d_col_tensor=d_col_tensor,
                sfa_tensor=sfa_tensor,
                sfb_tensor=sfb_tensor,
                sfb_ptrs=sfb_ptrs,
                sfd_row_tensor=sfd_row_tensor,
                sfd_col_tensor=sfd_col_tensor,
                amax_tensor=amax_tensor,
                norm_const_tensor=norm_const_tensor,
            )
        built = self._built_mode
        if _given_weight_mode(b_tensor, b_ptrs) != built:
            self._check_weight_mode(built, weight_mode("b_tensor", b_tensor, {"b_ptrs": b_ptrs}))
        if (dbias_tensor is not None) != self._compiled_dbias:
            self._refuse_dbias(dbias_tensor)
        if self._loaded is None:
            self.compile()
        weights = (b_ptrs, "b_ptrs") if built == DISCRETE else (b_tensor, "b")
        roles = _DBIAS_EXECUTE_ROLES[weights[1]] if dbias_tensor is not None else _EXECUTE_ROLES[weights[1]]
        tensors = (
            a_tensor,
            weights[0],
            c_tensor,
            d_row_tensor,
            padded_offsets,
            alpha_tensor,
            beta_tensor,
            prob_tensor,
            dprob_tensor,
        )
        if dbias_tensor is not None:
            tensors += (dbias_tensor,)
        if (act_out_tensor is not None) != self._options_given["act_out"]:
            self._refuse_act_out(act_out_tensor)
        if act_out_tensor is not None:
            roles += ("act_out",)
            tensors += (act_out_tensor,)
        self._run(roles, tensors, current_stream)

    def _execute_block_scaled(
        self, tensors: tuple[Any, ...], b_tensor: Any, b_ptrs: Any, dbias_tensor: Any, current_stream: Any
    ) -> None:
        """execute() of a block-scaled op: ``tensors`` in _BLOCK_SCALED_EXECUTE_ROLES' order."""
        built = self._built_mode
        if _given_weight_mode(b_tensor, b_ptrs) != built:
            self._check_weight_mode(built, weight_mode("b_tensor", b_tensor, {"b_ptrs": b_ptrs}))
        if (dbias_tensor is not None) != self._compiled_dbias:
            self._refuse_dbias(dbias_tensor)
        if self._loaded is None:
            self.compile()
        options = self._config.options
        roles = _BLOCK_SCALED_EXECUTE_ROLES[built]
        if options.single_group:
            offsets = as_torch(tensors[roles.index("padded_offsets")])
            check_single_group("padded_offsets", offsets, as_torch(tensors[0]).shape[0], options.m_aligned)
        if dbias_tensor is not None:
            roles, tensors = (*roles, "dbias"), (*tensors, dbias_tensor)
        self._run(roles, tensors, current_stream)

    @functools.cached_property
    def _built_mode(self) -> str:
        """DENSE or DISCRETE: the weight mode of the constructor's arguments (raises while
        they are inconsistent)."""
        return weight_mode("sample_b", self._sample_b, self._discrete_args)

    @property
    def _compiled_dbias(self) -> bool:
        return "dbias" in self._samples

    def _refuse_dbias(self, dbias_tensor: Any) -> None:
        """dbias_tensor given to an op without dbias, or missing from one with it."""
        if dbias_tensor is not None:
            raise ValueError(
                "dbias_tensor: this op was built without sample_dbias, so its kernel "
                "has no dbias; construct it with sample_dbias to produce dbias"
            )
        raise ValueError("dbias_tensor: required, because the op was built with sample_dbias")

    def _refuse_act_out(self, act_out_tensor: Any) -> None:
        """act_out_tensor given to an op built without act_out, or missing from one with it."""
        if act_out_tensor is not None:
            raise ValueError(
                "act_out_tensor: this op was built with act_out=False, so its kernel writes no "
                "activation; construct it with act_out=True to produce one"
            )
        raise ValueError("act_out_tensor: required, because the op was built with act_out=True")

    def _run(
        self,
        roles: tuple[str, ...],
        tensors: tuple[Any, ...],
        current_stream: Any,
        allocate: bool = False,
    ) -> dict[str, Any]:
        """The one call path of execute() and the wrapper: check ``tensors`` (of ``roles``;
        cached by their keys), allocate the wrapper's outputs when ``allocate`` (zeroing the
        accumulated ones on the stream), launch. Returns the outputs allocated."""
        key = tensors_key(tensors)
        call = self._calls.get((roles, key)) if key is not None else None
        if call is None:
            call = self._prepared(roles, tensors, key, WRAPPER_OUTPUTS if allocate else ())
        device = self._loaded.device
        stream = resolve_stream(current_stream, device)
        if offsets_check_enabled() and not self._config.options.single_group:
            _check_offsets(tensors[roles.index("padded_offsets")], call.problem, stream,
                           self._variant.m_aligned)
        if not call.outputs:
            run_variant(self._loaded, call.problem, stream)
            return {}
        # None resolved to torch's current stream: torch allocates on it already
        with on_stream(stream, device) if current_stream is not None else nullcontext():
            made = _allocate_outputs(call.outputs, device)
        run_variant(self._loaded, call.with_outputs(made), stream, call.cleared)
        return made

    def _prepared(
        self,
        roles: tuple[str, ...],
        tensors: tuple[Any, ...],
        key: tuple[Any, ...] | None,
        outputs: tuple[str, ...],
    ) -> PreparedCall:
        """The PreparedCall of ``tensors``, stored by their ``key`` (not stored when one is
        not a torch tensor: the checks then convert or refuse it)."""
        make = lambda: self._prepare(dict(zip(roles, tensors)), outputs)  # noqa: E731
        return make() if key is None else self._calls.get_or_make((roles, key), make)

    def _prepare(self, tensors: dict[str, Any], outputs: tuple[str, ...]) -> PreparedCall:
        """Check the call's tensors against the compiled variant and device."""
        variant = self._variant
        outputs = tuple(role for role in outputs if role in variant.arguments)
        named = _named(False, **tensors)
        element_types(named)
        problem = describe_tensors(
            variant, named, self._config.given_scalars(), outputs, self._config.options.flags()
        )
        device = problem.tensors["a"].device
        if device != self._loaded.device:
            raise ValueError(
                f"a_tensor: on cuda:{device}, but the op was compiled for "
                f"cuda:{self._loaded.device} (its samples' device)"
            )
        return PreparedCall(problem, variant, outputs)

    def _check_weight_mode(self, built: str, mode: str) -> None:
        """Refuse weights of the other mode than the op was built for."""
        if mode != built:
            given, wanted, built_by = (
                ("b_tensor", "b_ptrs", "num_experts, b_shape and b_dtype")
                if built == DISCRETE
                else ("b_ptrs", "b_tensor", "sample_b")
            )
            raise ValueError(
                f"{given}: this op was built for {built} weights ({built_by}); pass {wanted}"
            )


class GroupedGemmDgluSm90(GroupedGemmDglu):
    """The seed's class name (GroupedGemmDglu: runs on the current device's architecture)."""


class GroupedGemmDgluSm100(GroupedGemmDglu):
    """The seed's class name (GroupedGemmDglu: runs on the current device's architecture)."""
