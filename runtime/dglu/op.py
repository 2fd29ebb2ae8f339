"""The class API: GroupedGemmDglu (and the seed's names for it), built from sample tensors,
then check_support(), compile(), execute() (dglu.api describes the op and its arguments)."""

from __future__ import annotations

import functools
from contextlib import nullcontext
from typing import Any

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
from .call import (
    BLOCK_SCALED,
    CALL_CACHE_CAPACITY,
    CLASS_DISCRETE,
    CLASS_SOURCES,
    COMMON_ROLES,
    WRAPPER_OUTPUTS,
    WRAPPER_SOURCES,
    OpConfig,
    PreparedCall,
    allocate_outputs,
    check_offsets,
    named_tensors,
    offsets_check_enabled,
    select,
)
from .contract.schema import Variant
from .options import OpOptions, check_absent, check_options
from .runner import LoadedVariant, load_variant, run_variant
from .streams import on_stream, resolve_stream
from .validation import describe_tensors, element_types
from .weights import (
    DENSE,
    DISCRETE,
    block_scaled_b_major,
    check_b_major,
    class_discrete,
    weight_mode,
)

_EXECUTE_ROLES = {b: ("a", b, "c", "d_row", *COMMON_ROLES) for b in ("b", "b_ptrs")}
_DBIAS_EXECUTE_ROLES = {b: (*roles, "dbias") for b, roles in _EXECUTE_ROLES.items()}
_QUANTIZED_D_ROLES = ("d_row", "d_col", "sfd_row", "sfd_col")
_BLOCK_SCALED_EXECUTE_ROLES = {
    DENSE: ("a", "sfa", "b", "sfb", "c", *_QUANTIZED_D_ROLES, "norm_const", *COMMON_ROLES),
    DISCRETE: ("a", "sfa", "b_ptrs", "sfb_ptrs", "c", *_QUANTIZED_D_ROLES, "norm_const", *COMMON_ROLES),
}


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
        round_dgrad_to_input_dtype: bool = False,
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
        self._samples = named_tensors(
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
            "round_dgrad_to_input_dtype": round_dgrad_to_input_dtype,
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
        tensors = named_tensors(False, a=a_tensor, c=c_tensor)
        op._config = config
        op._variant = select(config, tensors, WRAPPER_SOURCES)
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
            samples.update(named_tensors(True, b=self._sample_b))
            if self._sample_sfb is not None:
                samples.update(named_tensors(True, sfb=self._sample_sfb))
        if block_scaled:
            self._check_block_scaled_samples(samples, options)
            strides_major = dense_b_major(samples["b"][1]) if not discrete else "k"
            options = options._replace(b_major=block_scaled_b_major(mode, options.b_major, strides_major))
        else:
            check_absent(BLOCK_SCALED, NotImplementedError, **self._block_scaled_samples)
        config = OpConfig(mode, discrete, options, None, "dbias" in self._samples)
        variant = select(config, samples, CLASS_SOURCES)
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
            check_offsets(tensors[roles.index("padded_offsets")], call.problem, stream,
                           self._variant.m_aligned)
        if not call.outputs:
            run_variant(self._loaded, call.problem, stream)
            return {}
        # None resolved to torch's current stream: torch allocates on it already
        with on_stream(stream, device) if current_stream is not None else nullcontext():
            made = allocate_outputs(call.outputs, device)
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
        named = named_tensors(False, **tensors)
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

