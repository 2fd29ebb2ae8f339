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
import os
from contextlib import nullcontext
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any

from . import runner
from .arrays import as_torch
from .cache import BoundedCache, tensors_key
from .driver import device_info
from .dtypes import torch_dtype
from .errors import VariantNotFoundError
from .manifest import Variant, installed_variants, search_path
from .options import M_ALIGNED, OpOptions, check_absent, check_options, output_dtype_name
from .problem import Problem
from .runner import LoadedVariant, load_variant, run_variant
from .selection import VariantRequest, arch_for_capability, select_variant
from .streams import on_stream, resolve_stream
from .tuple_dict import TupleDict
from .validation import check_offset_values, describe_tensors, output_view
from .workspaces import is_capturing
from .weights import (
    DENSE,
    DISCRETE,
    DiscreteWeights,
    check_b_major,
    class_discrete,
    weight_mode,
    wrapper_discrete,
)

BLOCK_SCALED = "block-scaled (FP8/FP4) operation is not available in dglu's SM90 BF16 backend"
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


def _select(
    problem: Problem,
    options: OpOptions,
    *,
    d_dtype: str,
    dbias: bool,
    weights: str,
    sources: dict[str, str],
) -> Variant:
    device = problem.tensors["a"].device
    tile = options.tile or (None, None)
    request = VariantRequest(
        arch=device_arch(device),
        ab_dtype=problem.tensors["a"].dtype,
        c_dtype=problem.tensors["c"].dtype,
        d_dtype=d_dtype,
        act_func=options.act_func,
        act_params=options.act_params,
        dbias=dbias,
        weight_mode=weights,
        b_major=options.b_major,
        tile_m=tile[0],
        tile_n=tile[1],
        cluster_m=options.cluster[0],
        cluster_n=options.cluster[1],
        scheduler=options.scheduler,
    )
    searched = [f"{entry.directory} ({entry.origin})" for entry in search_path()]
    constants = ", ".join(name for name, _ in options.act_params) or "act_func"
    return select_variant(
        installed_variants(), request, searched, {**sources, "act_params": constants}
    )


def device_arch(device: int) -> str:
    """The cubin architecture of ``device``, if the installed cubins cover it; else raise
    naming the device, its compute capability and the architectures they cover."""
    info = device_info(device)
    covered = sorted({variant.key.arch for variant in installed_variants()})
    try:
        arch = arch_for_capability(info.capability)
    except VariantNotFoundError:
        arch = None
    if arch not in covered:
        major, minor = info.capability
        raise VariantNotFoundError(
            f"cuda:{info.ordinal} ({info.name}, compute capability {major}.{minor}): no installed "
            f"cubins for it; they cover {', '.join(covered) or 'no architecture'} "
            f"(searched {', '.join(str(entry.directory) for entry in search_path())})"
        )
    return arch


def offsets_check_enabled() -> bool:
    """True when DGLU_CHECK_OFFSETS asks every call to check padded_offsets on the host."""
    return os.environ.get(CHECK_OFFSETS_ENV, "") not in ("", "0")


def _check_offsets(padded_offsets: Any, problem: Problem, stream: int) -> None:
    """Check padded_offsets' values on the host, unless ``stream`` is capturing a graph."""
    if is_capturing(stream):
        return
    with on_stream(stream, problem.tensors["a"].device):
        values = as_torch(padded_offsets).tolist()
    check_offset_values("padded_offsets", values, problem.m, M_ALIGNED)


def clear_caches() -> None:
    """Forget every cached call, launch plan, loaded variant and pooled workspace."""
    _wrapper_calls.clear()
    _wrapper_configs.clear()
    runner.clear_caches()


@dataclass(frozen=True)
class WrapperConfig:
    """The wrapper's checked non-tensor arguments: weight mode, options, outputs."""

    mode: str
    discrete: DiscreteWeights | None
    options: OpOptions
    d_dtype_name: str
    dbias: bool

    def __hash__(self) -> int:  # hashed on every call: computed once
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.mode, self.discrete, self.options, self.d_dtype_name, self.dbias))


class PreparedCall:
    """What a call's tensors and configuration resolve to, cached by their keys; for the
    wrapper, also the problem with each pair of output addresses it has seen."""

    def __init__(self, problem: Problem, loaded: LoadedVariant, outputs: Any = None) -> None:
        self.problem = problem
        self.loaded = loaded
        self.outputs = outputs  # the wrapper's OutputSpec
        self._with_outputs: BoundedCache[Problem] = BoundedCache(OUTPUT_CACHE_CAPACITY)

    def with_outputs(self, d_row: Any, dbias: Any) -> Problem:
        """The problem with the wrapper's freshly allocated D_row (and dbias) added."""
        key = (d_row.data_ptr(), None if dbias is None else dbias.data_ptr())
        return self._with_outputs.get_or_make(key, lambda: self._add_outputs(d_row, dbias))

    def _add_outputs(self, d_row: Any, dbias: Any) -> Problem:
        problem = self.problem
        views = dict(problem.tensors)
        views["d_row"] = output_view("d_row", d_row, problem)
        if dbias is not None:
            views["dbias"] = output_view("dbias", dbias, problem)
        return Problem(problem.m, problem.n, problem.k, problem.l, views)


@dataclass(frozen=True)
class OutputSpec:
    """How the wrapper allocates its outputs: D_row's torch dtype, the torch device."""

    d_dtype: Any
    device: Any


def _configure_wrapper(**arguments: Any) -> WrapperConfig:
    """WrapperConfig of the arguments, cached by their values and types (96 and 96.0, or
    True and 1, are different arguments) when they are hashable."""
    values = tuple(arguments.values())
    key = (values, tuple(map(type, values)), _element_types(arguments))
    try:
        return _wrapper_configs.get_or_make(key, lambda: _wrapper_config(**arguments))
    except TypeError:  # an unhashable argument: check it uncached (and raise if bad)
        return _wrapper_config(**arguments)


def _element_types(arguments: dict[str, Any]) -> tuple[Any, ...]:
    """The element types of the pair arguments (so (128, 128.0) differs from (128, 128))."""
    return tuple(
        tuple(map(type, value)) if isinstance(value, tuple) else None
        for value in (arguments["mma_tiler_mn"], arguments["cluster_shape_mn"])
    )


def _wrapper_config(
    *,
    has_b_tensor: bool,
    has_b_ptrs: bool,
    n: Any,
    b_dtype: Any,
    d_dtype: Any,
    generate_dbias: Any,
    **options: Any,
) -> WrapperConfig:
    discrete_args = {"b_ptrs": True if has_b_ptrs else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if has_b_tensor else None, discrete_args)
    discrete = wrapper_discrete(n, b_dtype) if mode == DISCRETE else None
    checked = check_options(**options)
    check_b_major(mode, checked.b_major)
    d_dtype_name = output_dtype_name("d_dtype", d_dtype)
    if not isinstance(generate_dbias, bool):
        raise ValueError(f"generate_dbias: expected a bool, got {generate_dbias!r}")
    return WrapperConfig(mode, discrete, checked, d_dtype_name, generate_dbias)


_wrapper_calls: BoundedCache[PreparedCall] = BoundedCache(CALL_CACHE_CAPACITY)
_wrapper_configs: BoundedCache[WrapperConfig] = BoundedCache(CALL_CACHE_CAPACITY)


def _cached(
    cache: BoundedCache[PreparedCall],
    config: Any,
    tensors: tuple[Any, ...],
    prepare: Callable[[], PreparedCall],
) -> PreparedCall:
    """``prepare()``'s PreparedCall, cached by ``config`` and the keys of ``tensors`` (the
    call's tensor arguments in a fixed order); uncached when one is not a torch tensor."""
    key = tensors_key(tensors)
    if key is None:
        return prepare()
    return cache.get_or_make((config, key), prepare)


def _prepare_wrapper(config: WrapperConfig, tensors: dict[str, tuple[str, Any]]) -> PreparedCall:
    """Check the wrapper's tensors, pick and load its variant."""
    problem = describe_tensors(tensors, config.options.b_major, config.discrete)
    variant = _select(
        problem,
        config.options,
        d_dtype=config.d_dtype_name,
        dbias=config.dbias,
        weights=config.mode,
        sources=WRAPPER_SOURCES,
    )
    loaded = load_variant(variant, problem.tensors["a"].device)
    outputs = OutputSpec(torch_dtype(config.d_dtype_name), tensors["a"][1].device)
    return PreparedCall(problem, loaded, outputs)


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
) -> TupleDict:
    """Grouped GEMM + dGLU backward on the tensors' device; allocates D_row (and dbias).

    Weights: b_tensor (N, K, L), or b_ptrs (L,) int64 device pointers to per-expert (N, K)
    bf16 matrices with n=N and b_dtype=torch.bfloat16 (b_major "k" or "n" orders each).
    C may be bf16, fp16 or fp32; d_dtype (default bf16) picks D_row's, among the same.
    Returns a TupleDict in the seed's order: d_row_tensor (M, 2N, 1) in d_dtype,
    d_col_tensor None, dprob_tensor (the caller's, accumulated), dbias_tensor ((L, 2N, 1)
    bf16 or None), amax_tensor, sfd_row_tensor and sfd_col_tensor None. Rows of D_row past
    valid_m (owned by no expert) are left uninitialised.
    """
    import torch

    check_absent(
        BLOCK_SCALED,
        NotImplementedError,
        sfa_tensor=sfa_tensor,
        sfb_tensor=sfb_tensor,
        sfb_ptrs=sfb_ptrs,
        norm_const_tensor=norm_const_tensor,
    )
    config = _configure_wrapper(
        has_b_tensor=b_tensor is not None,
        has_b_ptrs=b_ptrs is not None,
        n=n,
        b_dtype=b_dtype,
        acc_dtype=acc_dtype,
        mma_tiler_mn=mma_tiler_mn,
        cluster_shape_mn=cluster_shape_mn,
        sf_vec_size=sf_vec_size,
        vector_f32=vector_f32,
        m_aligned=m_aligned,
        discrete_col_sfd=discrete_col_sfd,
        act_func=act_func,
        geglu_alpha=geglu_alpha,
        glu_clamp_max=glu_clamp_max,
        glu_clamp_min=glu_clamp_min,
        linear_offset=linear_offset,
        situ_beta1=situ_beta1,
        situ_beta2=situ_beta2,
        b_major=b_major,
        epilogue_op=epilogue_op,
        use_dynamic_sched=use_dynamic_sched,
        cd_major=cd_major,
        d_dtype=d_dtype,
        generate_dbias=generate_dbias,
    )
    weights = b_ptrs if config.discrete else b_tensor
    call = _cached(
        _wrapper_calls,
        config,
        (a_tensor, weights, c_tensor, padded_offsets, alpha_tensor, beta_tensor, prob_tensor,
         dprob_tensor),
        lambda: _prepare_wrapper(
            config,
            _named(
                False,
                a=a_tensor,
                **({"b_ptrs": weights} if config.discrete else {"b": weights}),
                c=c_tensor,
                padded_offsets=padded_offsets,
                alpha=alpha_tensor,
                beta=beta_tensor,
                prob=prob_tensor,
                dprob=dprob_tensor,
            ),
        ),
    )
    problem = call.problem
    device = call.loaded.device
    stream = resolve_stream(current_stream, device)
    if offsets_check_enabled():
        _check_offsets(padded_offsets, problem, stream)
    # None resolved to torch's current stream: torch allocates on it already
    with on_stream(stream, device) if current_stream is not None else nullcontext():
        d_row = torch.empty(
            (problem.m, 2 * problem.n, 1), dtype=call.outputs.d_dtype, device=call.outputs.device
        )
        dbias = (
            torch.empty(
                (problem.l, 2 * problem.n, 1), dtype=torch.bfloat16, device=call.outputs.device
            )
            if config.dbias
            else None
        )
    # the kernels add into dbias: run_variant zeroes it on the stream (a memset, no kernel)
    clear = ("dbias",) if config.dbias else ()
    run_variant(call.loaded, call.with_outputs(d_row, dbias), stream, clear)
    return TupleDict(
        d_row_tensor=d_row,
        d_col_tensor=None,
        dprob_tensor=dprob_tensor,
        dbias_tensor=dbias,
        amax_tensor=None,
        sfd_row_tensor=None,
        sfd_col_tensor=None,
    )


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
    ) -> None:
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
        )
        self._block_scaled = {
            "sample_d_col": sample_d_col,
            "sample_sfa": sample_sfa,
            "sample_sfb": sample_sfb,
            "sample_sfd_row": sample_sfd_row,
            "sample_sfd_col": sample_sfd_col,
            "sample_amax": sample_amax,
            "sample_norm_const": sample_norm_const,
        }
        self._sample_b = sample_b
        self._discrete_args = dict(zip(CLASS_DISCRETE, (num_experts, b_shape, b_dtype)))
        self._discrete: DiscreteWeights | None = None
        self._config = {
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
        }
        self._options: OpOptions | None = None
        self._mode: str | None = None
        self._variant: Variant | None = None
        self._loaded: LoadedVariant | None = None
        self._calls: BoundedCache[PreparedCall] = BoundedCache(CALL_CACHE_CAPACITY)

    @property
    def variant_name(self) -> str | None:
        """The name of the prebuilt variant chosen by check_support(), if it ran."""
        return self._variant.name if self._variant else None

    def check_support(self) -> bool:
        """True when a prebuilt kernel serves the samples and configuration; else raise why."""
        check_absent(BLOCK_SCALED, NotImplementedError, **self._block_scaled)
        mode = weight_mode("sample_b", self._sample_b, self._discrete_args)
        discrete = class_discrete(**self._discrete_args) if mode == DISCRETE else None
        options = check_options(**self._config)
        check_b_major(mode, options.b_major)
        samples = (
            self._samples if discrete else {**self._samples, "b": ("sample_b", self._sample_b)}
        )
        problem = describe_tensors(samples, options.b_major, discrete)
        self._variant = _select(
            problem,
            options,
            d_dtype=problem.tensors["d_row"].dtype,
            dbias="dbias" in self._samples,
            weights=mode,
            sources=CLASS_SOURCES,
        )
        self._options = options
        self._mode = mode
        self._discrete = discrete
        return True

    def compile(self) -> None:
        """Load the chosen prebuilt cubin on the samples' device (checks support first)."""
        if self._variant is None:
            self.check_support()
        self._loaded = load_variant(self._variant, self._samples_device())

    def _samples_device(self) -> int:
        return self._samples["a"][1].device.index

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
    ) -> None:
        """Run the op into ``d_row_tensor``; dprob (and dbias) accumulate (compiles if needed)."""
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
        given = _given_weight_mode(b_tensor, b_ptrs)
        if given is None or given != self._mode:
            self._check_weight_mode(weight_mode("b_tensor", b_tensor, {"b_ptrs": b_ptrs}))
        compiled_dbias = "dbias" in self._samples
        if dbias_tensor is not None and not compiled_dbias:
            raise ValueError(
                "dbias_tensor: this op was built without sample_dbias, so its kernel "
                "has no dbias; construct it with sample_dbias to produce dbias"
            )
        if dbias_tensor is None and compiled_dbias:
            raise ValueError("dbias_tensor: required, because the op was built with sample_dbias")
        if self._loaded is None:
            self.compile()
        weights = b_ptrs if self._discrete else b_tensor
        call = _cached(
            self._calls,
            None,
            (a_tensor, weights, c_tensor, d_row_tensor, padded_offsets, alpha_tensor,
             beta_tensor, prob_tensor, dprob_tensor, dbias_tensor),
            lambda: self._prepare(
                _named(
                    False,
                    a=a_tensor,
                    **({"b_ptrs": weights} if self._discrete else {"b": weights}),
                    c=c_tensor,
                    d_row=d_row_tensor,
                    padded_offsets=padded_offsets,
                    alpha=alpha_tensor,
                    beta=beta_tensor,
                    prob=prob_tensor,
                    dprob=dprob_tensor,
                    **({"dbias": dbias_tensor} if dbias_tensor is not None else {}),
                )
            ),
        )
        stream = resolve_stream(current_stream, self._loaded.device)
        if offsets_check_enabled():
            _check_offsets(padded_offsets, call.problem, stream)
        run_variant(self._loaded, call.problem, stream)

    def _prepare(self, tensors: dict[str, tuple[str, Any]]) -> PreparedCall:
        """Check execute()'s tensors against the contract and the compiled samples."""
        problem = describe_tensors(tensors, self._options.b_major, self._discrete)
        self._check_compiled_for(problem)
        return PreparedCall(problem, self._loaded)

    def _check_weight_mode(self, mode: str) -> None:
        """Refuse weights of the other mode than the op was built for."""
        built = self._mode or weight_mode("sample_b", self._sample_b, self._discrete_args)
        if mode != built:
            given, wanted, built_by = (
                ("b_tensor", "b_ptrs", "num_experts, b_shape and b_dtype")
                if built == DISCRETE
                else ("b_ptrs", "b_tensor", "sample_b")
            )
            raise ValueError(
                f"{given}: this op was built for {built} weights ({built_by}); pass {wanted}"
            )

    def _check_compiled_for(self, problem: Problem) -> None:
        """Refuse tensors whose dtypes or device differ from the compiled samples'."""
        key = self._variant.key
        for role, field in (("a", "ab_dtype"), ("c", "c_dtype"), ("d_row", "d_dtype")):
            got = problem.tensors[role].dtype
            if got != getattr(key, field):
                raise ValueError(
                    f"{ARGUMENT_NAMES[role]}: dtype {got} differs from the "
                    f"{getattr(key, field)} the op was compiled for (its samples)"
                )
        device = problem.tensors["a"].device
        if device != self._loaded.device:
            raise ValueError(
                f"a_tensor: on cuda:{device}, but the op was compiled for "
                f"cuda:{self._loaded.device} (its samples' device)"
            )


class GroupedGemmDgluSm90(GroupedGemmDglu):
    """The seed's class name (GroupedGemmDglu: runs on the current device's architecture)."""


class GroupedGemmDgluSm100(GroupedGemmDglu):
    """The seed's class name (GroupedGemmDglu: runs on the current device's architecture)."""
