"""The class API: GroupedGemmDglu (and the seed's names for it), built from sample tensors,
then check_support(), compile(), execute() (dglu.api describes the op and its arguments).
check_support() runs the wrapper's pipeline on the samples: the family that runs A's dtype
on the device and its front policy (dglu.front), the checks in order, the variant.
compile() binds the op (dglu.bound.BoundOp): execute() runs the bound op's one call path,
the wrapper's."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .arguments import ARGUMENTS, CONSTRUCTOR, EXECUTE, refused_value
from .arrays import as_torch
from .bound import EXECUTE_TENSORS, BoundOp
from .call import (
    CHECKED_OPTIONS,
    CLASS_DISCRETE,
    CLASS_SOURCES,
    WRAPPER_NAMES,
    OpConfig,
    check_request,
    family_front,
    given_operands,
    named_tensors,
    required,
    select,
)
from .contract.front import FrontPolicy
from .contract.schema import Variant
from .front import check_required, check_values, require
from .options import check_options
from .runner import load_variant
from .validation import describe_tensors
from .weights import DENSE, DISCRETE, class_discrete, dense_b_major, variant_b_major, weight_mode

# The class API's samples by their tensors' seed names (sample_a for a_tensor, ...): the
# front policy's rules name the tensors so; messages name the samples.
SAMPLES = {
    ("padded_offsets" if sample == "sample_padded_offsets" else f"{sample.removeprefix('sample_')}_tensor"): sample
    for sample in CONSTRUCTOR
    if ARGUMENTS[sample].role == "sample"
}
_SEED_NAMES = {sample: name for name, sample in SAMPLES.items()}
_OPTIONS = tuple(name for name in CONSTRUCTOR if name in CHECKED_OPTIONS)
_REQUIRED = tuple(_SEED_NAMES.get(name, name) for name in required(CONSTRUCTOR))  # by their seed names
_COMMON = required(EXECUTE)
_EXECUTE_TENSORS = EXECUTE_TENSORS  # the tuple execute() builds, in this order


def _given_weight_mode(b_tensor: Any, b_ptrs: Any) -> str | None:
    """DENSE or DISCRETE when exactly one of the weight arguments is given, else None."""
    if (b_tensor is None) == (b_ptrs is None):
        return None
    return DENSE if b_ptrs is None else DISCRETE


def _class_config(policy: FrontPolicy, given: Mapping[str, Any]) -> OpConfig:
    """The class API's checked configuration: weights, options, dbias (D_row's dtype is
    sample_d_row's)."""
    import torch

    mode = weight_mode("sample_b", given["b_tensor"], {name: given[name] for name in CLASS_DISCRETE})
    discrete = class_discrete(*(given[name] for name in CLASS_DISCRETE), policy) if mode == DISCRETE else None
    options = check_options(**{name: given[name] for name in _OPTIONS}, policy=policy)
    b = as_torch(given["b_tensor"])
    strides_major = dense_b_major(b) if mode == DENSE and isinstance(b, torch.Tensor) else "k"
    options = options._replace(b_major=variant_b_major(policy, mode, options.b_major, strides_major))
    return OpConfig(mode, discrete, options, None, given["dbias_tensor"] is not None, policy)


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
        given = {_SEED_NAMES.get(name, name): value for name, value in locals().items() if name != "self"}
        if sample_activation is not None:
            given["act_out"] = True
        self._given = given  # the seed's names (sample_a as a_tensor, ...) -> value
        self._config: OpConfig | None = None
        self._variant: Variant | None = None
        self._bound: BoundOp | None = None
        self._accepted: tuple[bool, ...] | None = None  # execute()'s arguments given, once checked

    @property
    def variant_name(self) -> str | None:
        """The name of the prebuilt variant chosen by check_support(), if it ran."""
        return self._variant.name if self._variant else None

    @functools.cached_property
    def _policy(self) -> FrontPolicy:
        """The front policy of the family that runs sample_a's dtype on its device."""
        import torch

        a = as_torch(self._given["a_tensor"])
        if a is None:
            require({"sample_a": None}, "every op (the op's operands)")
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"sample_a: expected a torch.Tensor, got {type(a).__name__}")
        return family_front("sample_a", a)

    @functools.cached_property
    def _samples(self) -> dict[str, tuple[str, Any]]:
        """Role -> (sample name, tensor) of every sample given."""
        roles = {name: role for role, name in WRAPPER_NAMES.items()}
        return named_tensors(True, **{roles[name]: self._given[name] for name in SAMPLES
                                      if name in roles and self._given[name] is not None})

    def check_support(self) -> bool:
        """True when a prebuilt kernel serves the samples and configuration; else raise why:
        A and the family that runs its dtype on the device, the family's operand checks,
        then option values, missing samples, and the samples' shapes and strides (the
        variant's rules)."""
        given = self._given
        # 1. the family that runs A's dtype on the device; 2.-3. its checks before the selection
        c_dtype = getattr(as_torch(given["c_tensor"]), "dtype", None)
        config = check_request(self._policy, given, given_operands(True, given), given["b_dtype"], c_dtype,
                               _class_config, _REQUIRED, "op", SAMPLES)
        discrete = config.discrete
        samples = dict(self._samples)
        # 4. the selection step, then 5. the samples' shapes and strides against the variant
        if discrete:  # discrete weights have no sample: execute() checks them
            samples.pop("b", None), samples.pop("sfb", None)
        variant = select(config, samples, CLASS_SOURCES)
        # neither the act_out output (nor discrete weights) have a sample to check now
        later = ("b_ptrs", "sfb_ptrs", "act_out") if discrete else ("act_out",)
        describe_tensors(variant, samples, config.given_scalars(), later, config.options.flags())
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
        tensors = (  # _EXECUTE_TENSORS, by value (no locals(): a dict of every argument per call)
            a_tensor, c_tensor, d_row_tensor, d_col_tensor, sfa_tensor, padded_offsets, alpha_tensor,
            beta_tensor, prob_tensor, dprob_tensor, b_tensor, sfb_tensor, dbias_tensor, b_ptrs, sfb_ptrs,
            sfd_row_tensor, sfd_col_tensor, amax_tensor, norm_const_tensor, activation_tensor, act_out_tensor,
        )  # fmt: skip
        bound = self._bound
        missed = None if bound is None else bound.prebound(bound.execute_site, tensors, current_stream)
        if isinstance(missed, dict):
            return  # the signature of the last call, whose arguments passed the checks below
        accepted = tuple([t is None for t in tensors])
        if accepted != self._accepted:  # the checks read which tensors are given, no more
            self._check_execute(dict(zip(_EXECUTE_TENSORS, tensors)))
            self._accepted = accepted
        if self._bound is None:
            self.compile()
        bound = self._bound
        bound.call(bound.execute_site, tensors, current_stream, missed)

    def _check_execute(self, given: dict[str, Any]) -> None:
        """The checks of execute()'s arguments that depend on which of them are given: the
        family's rules, the weight mode, dbias and act_out as built, the tensors required."""
        policy = self._policy
        check_values(policy, given)
        built = self._built_mode
        b_tensor, b_ptrs = given["b_tensor"], given["b_ptrs"]
        if _given_weight_mode(b_tensor, b_ptrs) != built:
            self._check_weight_mode(built, weight_mode("b_tensor", b_tensor, {"b_ptrs": b_ptrs}))
        if (given["dbias_tensor"] is not None) != self._compiled_dbias:
            self._refuse_dbias(given["dbias_tensor"])
        if (given["act_out_tensor"] is not None) != (self._given["act_out"] is True):
            self._refuse_act_out(given["act_out_tensor"])
        require({name: given[name] for name in _COMMON}, "every call (the op's operands, inputs and D_row)")
        check_required(policy, given)

    @functools.cached_property
    def _built_mode(self) -> str:
        """DENSE or DISCRETE: the weight mode of the constructor's arguments (raises while
        they are inconsistent)."""
        return weight_mode("sample_b", self._given["b_tensor"], {name: self._given[name] for name in CLASS_DISCRETE})

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

