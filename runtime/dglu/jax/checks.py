"""The checks of a JAX call: the torch wrapper's, in its order, through its code.

``check_config`` checks the non-tensor arguments with dglu.weights and dglu.options (JAX
dtypes spelled as torch's first); ``describe_call`` selects the variant
(dglu.selection) and checks every array against its argument rules
(dglu.validation.describe_tensors), the same code and messages as the torch path. The
trace runs both on abstract arrays (addresses unknown); the FFI handler runs
``describe_call`` again on XLA's buffers, for its device's architecture, before the first
launch with those addresses.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

from ..call import WRAPPER_SOURCES, expert_count, installed_fronts, problem_class, select_installed
from ..contract.front import FrontPolicy
from ..contract.schema import Variant
from ..dtypes import FLOAT_TYPES
from ..front import check_values, dtype_name, front_of_operands
from ..options import check_flags, check_m_aligned, check_options
from ..problem import Problem
from ..validation import describe_tensors, element_type_name
from ..weights import DISCRETE, check_b_major, weight_mode, wrapper_discrete
from .arrays import ArraySpec, torch_spelling
from .config import CallConfig

# Options of check_options, by their seed names (acc_dtype is spelled as torch's first).
OPTION_NAMES = (
    "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "vector_f32", "m_aligned",
    "discrete_col_sfd", "act_func", "geglu_alpha", "glu_clamp_max", "glu_clamp_min",
    "linear_offset", "situ_beta1", "situ_beta2", "b_major", "epilogue_op",
    "use_dynamic_sched", "cd_major", "deterministic", "act_out",
    "use_single_group_runtime_offsets", "round_dgrad_to_input_dtype",
)  # fmt: skip
C_DTYPES = "torch.bfloat16, torch.float16, torch.float32"


class DescribedCall(NamedTuple):
    """A call's variant and its Problem (scalars, views) for the arrays checked."""

    variant: Variant
    problem: Problem


def bf16_front(a_dtype: Any, arch: str | None) -> FrontPolicy:
    """The front policy of the installed family of ``arch`` (None: any) that runs A's dtype
    (torch's spelling), refused as the torch path refuses it; dglu.jax takes BF16 only."""
    policy = front_of_operands("a_tensor", a_dtype, arch, installed_fronts(arch))
    if "bf16" not in policy.operands:
        raise NotImplementedError(
            f"a_tensor: got {a_dtype}; dglu.jax runs the BF16 contract only (the torch frontends run "
            "the block-scaled one)"
        )
    return policy


def check_config(
    has_b_tensor: bool, has_b_ptrs: bool, options: Mapping[str, Any], a_dtype: Any, arch: str | None
) -> CallConfig:
    """The torch wrapper's configuration checks (api._wrapper_config's order and messages)
    of the seed-named ``options`` (n, b_dtype, d_dtype, generate_dbias, acc_dtype and the
    OPTION_NAMES), by the front policy of the family that runs A's dtype (torch's
    spelling) on ``arch``."""
    policy = bf16_front(a_dtype, arch)
    check_values(policy, {"sf_fp8_dtype_override": options["sf_fp8_dtype_override"]})
    n, b_dtype = options["n"], torch_spelling(options["b_dtype"])
    discrete_args = {"b_ptrs": True if has_b_ptrs else None, "n": n, "b_dtype": b_dtype}
    mode = weight_mode("b_tensor", True if has_b_tensor else None, discrete_args)
    discrete = wrapper_discrete(n, b_dtype, policy) if mode == DISCRETE else None
    checked = check_options(
        acc_dtype=torch_spelling(options["acc_dtype"]),
        **{name: options[name] for name in OPTION_NAMES},
        policy=policy,
    )
    check_b_major(mode, checked.b_major)
    d_dtype = dtype_name(policy, "d_dtype", torch_spelling(options["d_dtype"]))
    if not isinstance(options["generate_dbias"], bool):
        raise ValueError(f"generate_dbias: expected a bool, got {options['generate_dbias']!r}")
    return CallConfig(mode, discrete, checked, d_dtype, options["generate_dbias"])


def describe_call(
    config: CallConfig,
    arrays: Mapping[str, tuple[str, ArraySpec]],
    arch: str | None,
    arch_source: str,
    later: Collection[str],
) -> DescribedCall:
    """Select the variant of ``config``, the arrays' element types and ``arch`` (None:
    any installed architecture), then check ``arrays`` (role -> (argument name, spec))
    against it; ``later``: the outputs the custom call creates."""
    types = {role: element_type_name(name, spec.dtype) for role, (name, spec) in arrays.items()}
    if types["c"] not in FLOAT_TYPES:  # the op's contract, as the torch path says it
        name, spec = arrays["c"]
        raise ValueError(f"{name}: dtype {spec.dtype} is not accepted; expected one of {C_DTYPES}")
    if config.discrete:
        config.discrete.check_dtype_of(arrays["a"][0], types["a"])
    dispatched = problem_class(arrays["a"][1].shape, arrays["c"][1].shape, arrays["padded_offsets"][1])
    variant = _select(config, types, arch, arch_source, expert_count(arrays["padded_offsets"][1].shape), dispatched)
    check_m_aligned(config.options, variant)
    check_flags(config.options, variant)
    problem = describe_tensors(variant, arrays, config.given_scalars(), later, config.options.flags())
    return DescribedCall(variant, problem)


def _select(
    config: CallConfig, types: Mapping[str, str], arch: str | None, arch_source: str, experts: int | None,
    dispatched: Mapping[str, int] | None = None,
) -> Variant:
    return select_installed(
        config.options,
        arch,
        (types["a"], types["c"], config.d_dtype),
        config.dbias,
        config.weight_mode,
        {**WRAPPER_SOURCES, "arch": arch_source},
        experts,
        dispatched,
    )
