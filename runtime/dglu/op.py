"""The class API: GroupedGemmDglu (and the seed's names for it), built from sample tensors,
then check_support(), compile(), execute() (dglu.api describes the op and its arguments).
compile() binds the op (dglu.bound.BoundOp): execute() runs the bound op's one call path,
the wrapper's."""

from __future__ import annotations

import functools
from typing import Any

from .arguments import refused_value
from .arrays import as_torch
from .blockscaled import (
    FP4_TYPE,
    check_operand_family,
    check_single_group,
    check_vector_f32,
    dense_b_major,
    is_block_scaled,
    refuse_amax,
    require,
)
from .bound import BoundOp
from .call import (
    BLOCK_SCALED,
    CLASS_DISCRETE,
    CLASS_SOURCES,
    COMMON_ROLES,
    OpConfig,
    named_tensors,
    select,
)
from .contract.schema import Variant
from .options import check_absent, check_flags, check_options
from .runner import load_variant
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
_REQUIRED_SAMPLES = ("a", "c", "d_row", "padded_offsets", "alpha", "beta", "prob", "dprob")
_REQUIRED_EXECUTE = (
    "a_tensor", "c_tensor", "d_row_tensor", "padded_offsets", "alpha_tensor", "beta_tensor",
    "prob_tensor", "dprob_tensor",
)  # fmt: skip


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
        sample_a: Any = None,
        sample_c: Any = None,
        sample_d_row: Any = None,
        sample_d_col: Any = None,
        sample_sfa: Any = None,
        sample_padded_offsets: Any = None,
        sample_alpha: Any = None,
        sample_beta: Any = None,
        sample_prob: Any = None,
        sample_dprob: Any = None,
        sample_b: Any = None,
        sample_sfb: Any = None,
        sample_dbias: Any = None,
        num_experts: int | None = None,
        b_shape: tuple[int, int] | None = None,
        b_dtype: Any = None,
        sample_sfd_row: Any = None,
        sample_sfd_col: Any = None,
        sample_amax: Any = None,
        sample_norm_const: Any = None,
        acc_dtype: Any = None,
        mma_tiler_mn: tuple[int, int] | None = None,
        cluster_shape_mn: tuple[int, int] | None = None,
        sf_vec_size: int = 16,
        sf_fp8_dtype_override: str | None = None,
        vector_f32: bool = False,
        m_aligned: int = 256,
        discrete_col_sfd: bool = False,
        act_func: str = "dswiglu",
        b_major: str = "k",
        epilogue_op: str | None = None,
        use_dynamic_sched: bool = False,
        use_single_group_runtime_offsets: bool = False,
        linear_offset: float = 1.0,
        geglu_alpha: float = 1.702,
        glu_clamp_max: float = 7.0,
        glu_clamp_min: float = -7.0,
        situ_beta1: float = 4.0,
        situ_beta2: float = 25.0,
        round_dgrad_to_input_dtype: bool = False,
        sample_activation: Any = None,
        deterministic: bool = False,
        act_out: bool = False,
    ) -> None:
        """Parameters in cuDNN FE 1.32.0's positional order (dglu.arguments), act_out last;
        sample_a, sample_c, sample_d_row and the samples of padded_offsets, alpha, beta,
        prob and dprob are required (check_support() refuses None by name).
        sample_activation (cuDNN FE's name) or act_out=True builds the op whose kernel also
        writes prob * GLU(X): execute() then takes activation_tensor (or act_out_tensor)."""
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
        self._required = dict(
            zip(
                _REQUIRED_SAMPLES,
                (sample_a, sample_c, sample_d_row, sample_padded_offsets, sample_alpha,
                 sample_beta, sample_prob, sample_dprob),
            )
        )  # fmt: skip
        self._samples = named_tensors(
            True,
            **{role: t for role, t in self._required.items() if t is not None},
            **({"dbias": sample_dbias} if sample_dbias is not None else {}),
            **{role: t for role, t in block_scaled_samples.items() if t is not None},
        )
        self._sample_amax = sample_amax
        self._sample_b = sample_b
        self._sample_sfb = sample_sfb
        self._sample_activation = sample_activation
        # for a BF16 op to refuse by name
        self._block_scaled_samples = {
            **{f"sample_{role}": tensor for role, tensor in block_scaled_samples.items()},
            "sample_sfb": sample_sfb,
            "sample_amax": sample_amax,
        }
        self._discrete_args = dict(zip(CLASS_DISCRETE, (num_experts, b_shape, b_dtype)))
        self._refused = {"sf_fp8_dtype_override": sf_fp8_dtype_override}
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
            "act_out": act_out if sample_activation is None else True,
            "use_single_group_runtime_offsets": use_single_group_runtime_offsets,
            "round_dgrad_to_input_dtype": round_dgrad_to_input_dtype,
        }
        self._config: OpConfig | None = None
        self._variant: Variant | None = None
        self._bound: BoundOp | None = None

    @property
    def variant_name(self) -> str | None:
        """The name of the prebuilt variant chosen by check_support(), if it ran."""
        return self._variant.name if self._variant else None

    def check_support(self) -> bool:
        """True when a prebuilt kernel serves the samples and configuration; else raise why:
        the operands' dtype family first, then option values, missing samples, and the
        samples' shapes and strides (the variant's rules)."""
        block_scaled = self._block_scaled
        if self._required["a"] is None:
            require({"sample_a": None}, "every op (the op's operands)")
        if block_scaled:  # 1. the operands' dtype family
            family = {role: self._samples[role] for role in ("a", "sfa") if role in self._samples}
            family.update(named_tensors(True, **{role: t for role, t in (("b", self._sample_b),
                                                                          ("sfb", self._sample_sfb)) if t is not None}))
            if check_operand_family(family, self._discrete_args["b_dtype"]) == FP4_TYPE:
                raise NotImplementedError(
                    "sample_a: FP4 operands (NVFP4) run through grouped_gemm_dglu (the wrapper) on Blackwell; "
                    "the class API does not take them yet"
                )
        for name, value in self._refused.items():
            if (why := refused_value(name, value)) is not None:
                raise ValueError(why)
        if not block_scaled:
            check_absent(BLOCK_SCALED, NotImplementedError, **self._block_scaled_samples)
        if self._required["c"] is None:
            require({"sample_c": None}, "every op (the op's operands)")
        # 2. option values
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
            refuse_amax("sample_amax", self._sample_amax)
            check_vector_f32(options.vector_f32, "sample_c", samples["c"][1].dtype)
        # 3. missing samples
        require({f"sample_{role}": t for role, t in self._required.items()}, "every op (the op's inputs)")
        if block_scaled:
            needed = ["sample_sfa", "sample_d_col", "sample_sfd_row", "sample_sfd_col", "sample_norm_const"]
            if "b" in samples:
                needed.insert(1, "sample_sfb")
            require({name: self._block_scaled_samples[name] for name in needed},
                    "FP8 operands (MXFP8: the E8M0 scale factors of A and B, FP8 D_row and D_col "
                    "with SFD_row and SFD_col, and norm_const)")
        # 4. the variant, and the samples' shapes and strides against it
        element_types(samples)
        if block_scaled:
            if options.single_group:
                check_single_group(
                    "sample_padded_offsets", samples["padded_offsets"][1], samples["a"][1].shape[0], options.m_aligned
                )
            strides_major = dense_b_major(samples["b"][1]) if not discrete else "k"
            options = options._replace(b_major=block_scaled_b_major(mode, options.b_major, strides_major))
        config = OpConfig(mode, discrete, options, None, "dbias" in self._samples)
        variant = select(config, samples, CLASS_SOURCES)
        check_flags(options, variant)
        # discrete weights have no sample, nor the act_out output: execute() checks them
        later = ("b_ptrs", "sfb_ptrs", "act_out") if discrete else ("act_out",)
        if self._sample_activation is not None:
            samples.update(named_tensors(True, act_out=self._sample_activation))
            samples["act_out"] = ("sample_activation", samples["act_out"][1])
        describe_tensors(variant, samples, config.given_scalars(), later, options.flags())
        self._config, self._variant = config, variant
        return True

    def compile(self) -> None:
        """Load the chosen prebuilt cubin on the samples' device (checks support first)."""
        if self._variant is None:
            self.check_support()
        loaded = load_variant(self._variant, self._samples["a"][1].device.index)
        self._bound = BoundOp(self._config, self._variant, loaded)

    def execute(
        self,
        a_tensor: Any = None,
        c_tensor: Any = None,
        d_row_tensor: Any = None,
        d_col_tensor: Any = None,
        sfa_tensor: Any = None,
        padded_offsets: Any = None,
        alpha_tensor: Any = None,
        beta_tensor: Any = None,
        prob_tensor: Any = None,
        dprob_tensor: Any = None,
        b_tensor: Any = None,
        sfb_tensor: Any = None,
        dbias_tensor: Any = None,
        b_ptrs: Any = None,
        sfb_ptrs: Any = None,
        sfd_row_tensor: Any = None,
        sfd_col_tensor: Any = None,
        amax_tensor: Any = None,
        norm_const_tensor: Any = None,
        current_stream: Any = None,
        activation_tensor: Any = None,
        act_out_tensor: Any = None,
        *,
        workspace: Any = None,
    ) -> None:
        """Run the op into ``d_row_tensor``; dprob (and dbias) accumulate (compiles if needed).
        Parameters in cuDNN FE 1.32.0's order, then act_out_tensor (dglu's name of
        activation_tensor: pass one of them). An op built with act_out=True (or
        sample_activation) also writes prob * GLU(X) into it ((M, N, 1) bf16, required
        then; refused otherwise). A block-scaled op writes d_row_tensor, d_col_tensor,
        sfd_row_tensor and sfd_col_tensor (all required). ``workspace`` is refused: dglu
        provides each variant's workspaces itself."""
        if workspace is not None:
            raise ValueError(refused_value("workspace", workspace))
        if activation_tensor is not None:
            if act_out_tensor is not None:
                raise ValueError(
                    "activation_tensor: given with act_out_tensor, which names the same output; "
                    "pass one of them"
                )
            act_out_tensor = activation_tensor
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
        if (act_out_tensor is not None) != self._options_given["act_out"]:
            self._refuse_act_out(act_out_tensor)
        tensors = (
            a_tensor,
            b_ptrs if built == DISCRETE else b_tensor,
            c_tensor,
            d_row_tensor,
            padded_offsets,
            alpha_tensor,
            beta_tensor,
            prob_tensor,
            dprob_tensor,
        )
        if a_tensor is None or any(t is None for t in tensors[2:]):
            self._refuse_missing(tensors)
        if self._bound is None:
            self.compile()
        roles = _EXECUTE_ROLES["b_ptrs" if built == DISCRETE else "b"]
        if dbias_tensor is not None:
            roles, tensors = _DBIAS_EXECUTE_ROLES[roles[1]], (*tensors, dbias_tensor)
        if act_out_tensor is not None:
            roles, tensors = (*roles, "act_out"), (*tensors, act_out_tensor)
        self._bound.run(roles, tensors, current_stream)

    def _refuse_missing(self, tensors: tuple[Any, ...]) -> None:
        """Name the first required tensor of execute() that is None (``tensors`` in
        _EXECUTE_ROLES' order)."""
        names = ("a_tensor", "b_tensor", *_REQUIRED_EXECUTE[1:])
        require({name: t for name, t in zip(names, tensors) if name != "b_tensor"},
                "every call (the op's operands, inputs and D_row)")

    def _execute_block_scaled(
        self, tensors: tuple[Any, ...], b_tensor: Any, b_ptrs: Any, dbias_tensor: Any, current_stream: Any
    ) -> None:
        """execute() of a block-scaled op: ``tensors`` in _BLOCK_SCALED_EXECUTE_ROLES' order."""
        built = self._built_mode
        if _given_weight_mode(b_tensor, b_ptrs) != built:
            self._check_weight_mode(built, weight_mode("b_tensor", b_tensor, {"b_ptrs": b_ptrs}))
        if (dbias_tensor is not None) != self._compiled_dbias:
            self._refuse_dbias(dbias_tensor)
        roles = _BLOCK_SCALED_EXECUTE_ROLES[built]
        if any(t is None for t in tensors):
            names = {"a": "a_tensor", "padded_offsets": "padded_offsets", "b_ptrs": "b_ptrs",
                     "sfb_ptrs": "sfb_ptrs"}
            require({names.get(role, f"{role}_tensor"): t for role, t in zip(roles, tensors)},
                    "FP8 operands (MXFP8: every tensor of the block-scaled contract)")
        if self._bound is None:
            self.compile()
        options = self._config.options
        if options.single_group:
            offsets = as_torch(tensors[roles.index("padded_offsets")])
            check_single_group("padded_offsets", offsets, as_torch(tensors[0]).shape[0], options.m_aligned)
        if dbias_tensor is not None:
            roles, tensors = (*roles, "dbias"), (*tensors, dbias_tensor)
        self._bound.run(roles, tensors, current_stream)

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

