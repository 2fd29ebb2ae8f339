"""The op's arguments, declared once: each frontend's parameters are rows of this table.

Every argument has its seed name, its role, its default and the variant key field it feeds
(None when it selects nothing). Which values a kernel family accepts, requires or refuses
is not here but in the family's front policy, data of its manifest entries (dglu.front,
docs/manifest.md ``front``); ``refusal`` marks the arguments no frontend takes a value for
(dglu provides the workspaces). The orders below are the positional orders of the frontends: cuDNN FE 1.32.0's
(``grouped_gemm_dglu_wrapper_sm100``, ``GroupedGemmDgluSm100.__init__`` and ``execute``) for
the parameters both share, then dglu's own additions. tests/cpu/test_api_signatures.py checks
every frontend's signature (the wrapper, the class API, torch's op, dglu.jax) against it.

Roles: ``tensor`` (an input or accumulated tensor of the call), ``output`` (an output
execute() writes, or the wrapper's caller-provided one), ``sample`` (the class API's
sample of a tensor), ``option`` (a configuration value), ``stream``.

A tensor the call needs (``required``) defaults to None here as in no other frontend, so
that cuDNN FE's positional order can be kept after the optional ``sfa_tensor``; None is
refused by name after the dtype family and the options are checked (docs/frontends.md).
"""

from __future__ import annotations

from typing import Any

from .contract.records import Record

ROLES = ("tensor", "output", "sample", "option", "stream")


class Arg(Record):
    """One argument of the op."""

    name: str
    role: str
    default: Any = None
    key_field: str | None = None  # the variant key field (or kernel flag) it feeds
    required: bool = False  # a tensor the call cannot run without (None is refused)
    refusal: str | None = None  # why every frontend refuses a value other than None


def _table(*args: Arg) -> dict[str, Arg]:
    return {arg.name: arg for arg in args}


# Configuration, shared by the wrapper and the class constructor.
_OPTIONS = _table(
    Arg("generate_dbias", "option", False, "dbias"),
    Arg("n", "option", None, "weight_mode"),
    Arg("b_dtype", "option", None, "ab_dtype"),
    Arg("num_experts", "option", None, "weight_mode"),
    Arg("b_shape", "option", None, "weight_mode"),
    Arg("b_major", "option", "k", "b_major"),
    Arg("acc_dtype", "option", None),
    Arg("d_dtype", "option", None, "d_dtype"),
    Arg("cd_major", "option", "n"),
    Arg("mma_tiler_mn", "option", None, "tile_m, tile_n"),
    Arg("cluster_shape_mn", "option", None, "cluster_m, cluster_n"),
    Arg("sf_vec_size", "option", 16),
    Arg("sf_fp8_dtype_override", "option", None),
    Arg("vector_f32", "option", False),
    Arg("m_aligned", "option", 256),
    Arg("discrete_col_sfd", "option", False, "discrete_col_sfd"),
    Arg("act_func", "option", "dswiglu", "act_func"),
    Arg("linear_offset", "option", 1.0, "act_params"),
    Arg("geglu_alpha", "option", 1.702, "act_params"),
    Arg("glu_clamp_max", "option", 7.0, "act_params"),
    Arg("glu_clamp_min", "option", -7.0, "act_params"),
    Arg("situ_beta1", "option", 4.0, "act_params"),
    Arg("situ_beta2", "option", 25.0, "act_params"),
    Arg("epilogue_op", "option", None),
    Arg("use_dynamic_sched", "option", False, "scheduler"),
    Arg("use_single_group_runtime_offsets", "option", False, "use_single_group_runtime_offsets"),
    Arg("round_dgrad_to_input_dtype", "option", False, "round_dgrad_to_input_dtype"),
    Arg("deterministic", "option", False, "deterministic"),
    Arg("act_out", "option", False, "act_out"),
)

# The call's tensors by their wrapper / execute() names, and the stream.
_TENSORS = _table(
    Arg("a_tensor", "tensor", None, "ab_dtype", required=True),
    Arg("c_tensor", "tensor", None, "c_dtype", required=True),
    Arg("sfa_tensor", "tensor", None),
    Arg("padded_offsets", "tensor", required=True),
    Arg("alpha_tensor", "tensor", required=True),
    Arg("beta_tensor", "tensor", required=True),
    Arg("prob_tensor", "tensor", required=True),
    Arg("dprob_tensor", "tensor", required=True),
    Arg("b_tensor", "tensor", None, "weight_mode"),
    Arg("sfb_tensor", "tensor", None),
    Arg("b_ptrs", "tensor", None, "weight_mode"),
    Arg("sfb_ptrs", "tensor", None),
    Arg("norm_const_tensor", "tensor", None),
    Arg("d_row_tensor", "output", required=True),
    Arg("d_col_tensor", "output", None),
    Arg("dbias_tensor", "output", None, "dbias"),
    Arg("sfd_row_tensor", "output", None),
    Arg("sfd_col_tensor", "output", None),
    Arg("amax_tensor", "output"),
    Arg("activation_tensor", "output", None, "act_out"),
    Arg("act_out_tensor", "output", None, "act_out"),
    Arg("current_stream", "stream"),
    Arg(
        "workspace", "stream",
        refusal="dglu provides each variant's workspaces itself (pooled per stream, "
        "graph-owned under capture): pass None",
    ),
)

# The class constructor's samples: sample_<role> of the tensors above.
_SAMPLES = _table(
    *(
        Arg(f"sample_{name}", "sample", None, arg.key_field, arg.required)
        for name, arg in (
            ("a", _TENSORS["a_tensor"]),
            ("c", _TENSORS["c_tensor"]),
            ("d_row", _TENSORS["d_row_tensor"]),
            ("d_col", _TENSORS["d_col_tensor"]),
            ("sfa", _TENSORS["sfa_tensor"]),
            ("padded_offsets", _TENSORS["padded_offsets"]),
            ("alpha", _TENSORS["alpha_tensor"]),
            ("beta", _TENSORS["beta_tensor"]),
            ("prob", _TENSORS["prob_tensor"]),
            ("dprob", _TENSORS["dprob_tensor"]),
            ("b", _TENSORS["b_tensor"]),
            ("sfb", _TENSORS["sfb_tensor"]),
            ("dbias", _TENSORS["dbias_tensor"]),
            ("sfd_row", _TENSORS["sfd_row_tensor"]),
            ("sfd_col", _TENSORS["sfd_col_tensor"]),
            ("amax", _TENSORS["amax_tensor"]),
            ("norm_const", _TENSORS["norm_const_tensor"]),
            ("activation", _TENSORS["activation_tensor"]),
        )
    )
)

ARGUMENTS: dict[str, Arg] = {**_TENSORS, **_SAMPLES, **_OPTIONS}

# cuDNN FE 1.32.0's positional orders, then dglu's additions (after the last shared one).
WRAPPER = (
    "a_tensor", "c_tensor", "sfa_tensor", "padded_offsets", "alpha_tensor", "beta_tensor",
    "prob_tensor", "dprob_tensor", "b_tensor", "sfb_tensor", "generate_dbias", "b_ptrs",
    "sfb_ptrs", "n", "b_dtype", "b_major", "norm_const_tensor", "acc_dtype", "d_dtype",
    "cd_major", "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "sf_fp8_dtype_override",
    "vector_f32", "m_aligned", "discrete_col_sfd", "act_func", "linear_offset", "geglu_alpha",
    "glu_clamp_max", "glu_clamp_min", "situ_beta1", "situ_beta2", "epilogue_op",
    "use_dynamic_sched", "use_single_group_runtime_offsets", "current_stream",
    "round_dgrad_to_input_dtype", "activation_tensor", "deterministic",
    "act_out",
)  # fmt: skip
CONSTRUCTOR = (
    "sample_a", "sample_c", "sample_d_row", "sample_d_col", "sample_sfa",
    "sample_padded_offsets", "sample_alpha", "sample_beta", "sample_prob", "sample_dprob",
    "sample_b", "sample_sfb", "sample_dbias", "num_experts", "b_shape", "b_dtype",
    "sample_sfd_row", "sample_sfd_col", "sample_amax", "sample_norm_const", "acc_dtype",
    "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "sf_fp8_dtype_override", "vector_f32",
    "m_aligned", "discrete_col_sfd", "act_func", "b_major", "epilogue_op", "use_dynamic_sched",
    "use_single_group_runtime_offsets", "linear_offset", "geglu_alpha", "glu_clamp_max",
    "glu_clamp_min", "situ_beta1", "situ_beta2", "round_dgrad_to_input_dtype",
    "sample_activation", "deterministic",
    "act_out",
)  # fmt: skip
EXECUTE = (
    "a_tensor", "c_tensor", "d_row_tensor", "d_col_tensor", "sfa_tensor", "padded_offsets",
    "alpha_tensor", "beta_tensor", "prob_tensor", "dprob_tensor", "b_tensor", "sfb_tensor",
    "dbias_tensor", "b_ptrs", "sfb_ptrs", "sfd_row_tensor", "sfd_col_tensor", "amax_tensor",
    "norm_const_tensor", "current_stream", "activation_tensor",
    "act_out_tensor",
)  # fmt: skip
EXECUTE_KEYWORD_ONLY = ("workspace",)  # cuDNN FE's execute() takes it by keyword only

# Arguments each frontend does not offer, and why (every other one of WRAPPER it takes).
NOT_OFFERED = {
    "torch_op": {
        "current_stream": "the dispatcher runs the op on torch's current stream",
        "activation_tensor": "a custom op returns its outputs: act_out=True returns act_out_tensor",
    },
    "jax": {
        "current_stream": "XLA launches the custom call on its own stream",
        "activation_tensor": "JAX arrays are immutable: act_out=True returns act_out_tensor",
    },
}


def refused_value(name: str, value: Any) -> str | None:
    """The refusal of ``value`` for argument ``name`` when no frontend takes one, else None."""
    arg = ARGUMENTS[name]
    if arg.refusal is None or value is None:
        return None
    shown = repr(value) if isinstance(value, str | int | float | bool) else f"a {type(value).__name__}"
    return f"{name}: got {shown}; {arg.refusal}"

