"""The public op, with the seed's argument names: the wrapper and the class API.

Argument names, order of outputs and defaults follow NVIDIA's grouped_gemm_dglu_*_sm100
API, except that ``acc_dtype`` and ``d_dtype`` default to None, meaning torch.float32 and
torch.bfloat16 (so that importing dglu does not import torch). Every argument is checked
before anything is allocated or launched. padded_offsets' values are read back to the host
and checked (a small synchronous copy) unless the stream is capturing a CUDA graph; b_ptrs'
values are never read on the host (dglu.weights).

Weights are dense (b_tensor / sample_b) or discrete (b_ptrs with n and b_dtype / num_experts,
b_shape and b_dtype), each selecting variants of its weight mode. A call picks the variant
of its dtypes, activation constants, dbias, weight mode and b_major, its scheduler
(use_dynamic_sched) and cluster (cluster_shape_mn, None meaning (1, 1)); among those the
given mma_tiler_mn, or else the largest tile (dglu.selection).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .driver import device_info
from .dtypes import torch_dtype
from .manifest import Variant, installed_variants, search_path
from .options import M_ALIGNED, OpOptions, check_absent, check_options, output_dtype_name
from .problem import Problem
from .runner import LoadedVariant, load_variant, run_variant
from .selection import VariantRequest, arch_for_capability, select_variant
from .streams import resolve_stream
from .tuple_dict import TupleDict
from .validation import check_offset_values, describe_tensors, output_view
from .weights import (
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
    """Role -> (argument name, tensor); the class constructor's names are sample_<role>."""
    return {
        role: (f"sample_{role}" if samples else ARGUMENT_NAMES[role], tensor)
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
        arch=arch_for_capability(device_info(device).capability),
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


def _check_offsets(padded_offsets: Any, problem: Problem, stream: Any) -> None:
    """Check padded_offsets' values on the host, unless ``stream`` is capturing a graph."""
    import torch

    with torch.cuda.stream(stream):
        if torch.cuda.is_current_stream_capturing():
            return
        values = padded_offsets.tolist()
    check_offset_values("padded_offsets", values, problem.m, M_ALIGNED)


def grouped_gemm_dglu_wrapper_sm90(
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
    """Grouped GEMM + dGLU backward on SM90; allocates D_row (and dbias if generate_dbias).

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
    mode = weight_mode("b_tensor", b_tensor, dict(zip(WRAPPER_DISCRETE, (b_ptrs, n, b_dtype))))
    discrete = wrapper_discrete(n, b_dtype) if mode == DISCRETE else None
    options = check_options(
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
    )
    check_b_major(mode, options.b_major)
    d_dtype_name = output_dtype_name("d_dtype", d_dtype)
    if not isinstance(generate_dbias, bool):
        raise ValueError(f"generate_dbias: expected a bool, got {generate_dbias!r}")
    problem = describe_tensors(
        _named(
            False,
            a=a_tensor,
            **({"b_ptrs": b_ptrs} if discrete else {"b": b_tensor}),
            c=c_tensor,
            padded_offsets=padded_offsets,
            alpha=alpha_tensor,
            beta=beta_tensor,
            prob=prob_tensor,
            dprob=dprob_tensor,
        ),
        options.b_major,
        discrete,
    )
    device = problem.tensors["a"].device
    stream = resolve_stream(current_stream, device)
    variant = _select(
        problem,
        options,
        d_dtype=d_dtype_name,
        dbias=generate_dbias,
        weights=mode,
        sources=WRAPPER_SOURCES,
    )
    _check_offsets(padded_offsets, problem, stream)
    loaded = load_variant(variant, device)

    rows = (problem.m, 2 * problem.n, 1)
    with torch.cuda.stream(stream):
        d_row = torch.empty(rows, dtype=torch_dtype(d_dtype_name), device=a_tensor.device)
        dbias = (
            torch.zeros((problem.l, 2 * problem.n, 1), dtype=torch.bfloat16, device=a_tensor.device)
            if generate_dbias
            else None
        )
    outputs = {"d_row": d_row, "dbias": dbias}
    views = {
        **problem.tensors,
        **{role: output_view(role, t, problem) for role, t in outputs.items() if t is not None},
    }
    run_variant(loaded, replace(problem, tensors=views), stream)
    return TupleDict(
        d_row_tensor=d_row,
        d_col_tensor=None,
        dprob_tensor=dprob_tensor,
        dbias_tensor=dbias,
        amax_tensor=None,
        sfd_row_tensor=None,
        sfd_col_tensor=None,
    )


class GroupedGemmDgluSm90:
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
        self._variant: Variant | None = None
        self._loaded: LoadedVariant | None = None

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
        problem = describe_tensors(
            _named(
                False,
                a=a_tensor,
                **({"b_ptrs": b_ptrs} if self._discrete else {"b": b_tensor}),
                c=c_tensor,
                d_row=d_row_tensor,
                padded_offsets=padded_offsets,
                alpha=alpha_tensor,
                beta=beta_tensor,
                prob=prob_tensor,
                dprob=dprob_tensor,
                **({"dbias": dbias_tensor} if dbias_tensor is not None else {}),
            ),
            self._options.b_major,
            self._discrete,
        )
        self._check_compiled_for(problem)
        stream = resolve_stream(current_stream, self._loaded.device)
        _check_offsets(padded_offsets, problem, stream)
        run_variant(self._loaded, problem, stream)

    def _check_weight_mode(self, mode: str) -> None:
        """Refuse weights of the other mode than the op was built for."""
        built = weight_mode("sample_b", self._sample_b, self._discrete_args)
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
