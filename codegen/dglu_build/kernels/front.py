"""Front policies as kernel families declare them (dglu.contract.front reads them): rule
helpers, and the rules the families share. A family's ``interface.entry`` writes its
policy into every manifest entry (``front``); the runtime checks a call's arguments
against it before it selects a variant, so a family states here, as data, what its front
door accepts and why it refuses the rest."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dglu.contract.element_types import ELEMENT_TYPES

# The seed's return tuple, by role (dglu.front fills it from the allocated outputs).
SEED_OUTPUTS = ("d_row", "d_col", "dprob", "dbias", "amax", "sfd_row", "sfd_col")


def accepted(*values: Any, why: str, error: str = "ValueError") -> dict[str, Any]:
    """An argument that takes one of ``values`` (compared by type and value)."""
    rule = {"accepted": list(values), "refusal": why}
    return rule if error == "ValueError" else {**rule, "error": error}


def required(needed_by: str, with_: str | None = None) -> dict[str, Any]:
    """A tensor argument the family's calls need (``needed_by`` says who); ``with_``: only
    when that argument is given (a weight mode's own scale factors)."""
    rule: dict[str, Any] = {"required": True, "refusal": needed_by}
    return rule if with_ is None else {**rule, "with": with_}


def dtypes(types: Iterable[str], why: str, default: str | None = None) -> dict[str, Any]:
    """A dtype argument's accepted element types; ``default``: what None stands for."""
    rule: dict[str, Any] = {"dtypes": list(types), "refusal": why}
    return rule if default is None else {**rule, "default": default}


def absent(names: Iterable[str], why: str, error: str = "ValueError") -> dict[str, dict[str, Any]]:
    """Arguments the family takes no value for: each must be None."""
    return {name: accepted(None, why=why, error=error) for name in names}


def torch_names(types: Iterable[str]) -> str:
    """``torch.bfloat16, torch.float16`` for ("bf16", "fp16")."""
    return ", ".join(f"torch.{ELEMENT_TYPES[t].torch_name}" for t in types)


def spelled(types: Iterable[str]) -> str:
    """``torch.bfloat16, torch.float16 or torch.float32`` for ("bf16", "fp16", "fp32")."""
    names = [f"torch.{ELEMENT_TYPES[t].torch_name}" for t in types]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


# Rubin's E5M3 scale reinterpretation: no Hopper or Blackwell (sm_100a/sm_103a) kernel has it.
NO_E5M3_SCALES = {
    "sf_fp8_dtype_override": accepted(
        None,
        why="the E5M3 reinterpretation of FP8 scale factors is Rubin's (sm_110); Hopper and "
        "Blackwell (sm_100a/sm_103a) read E8M0 scales: pass None",
    )
}
# Hopper has no FP4 tensor cores: the seed's FP4 operand dtypes, by torch name.
HOPPER_FP4 = (
    "no FP4 tensor cores on Hopper; Blackwell cubins (sm_100a/sm_103a) run FP4 operands. "
    "On Hopper use torch.float8_e4m3fn or torch.float8_e5m2 with E8M0 scales (MXFP8)"
)
HOPPER_REFUSED_OPERANDS = {"float4_e2m1fn_x2": HOPPER_FP4, "uint8": HOPPER_FP4}

_BLOCK_SCALED = (
    "block-scaled (MXFP8) argument, for FP8 operands (torch.float8_e4m3fn/e5m2); these "
    "operands select the BF16 backend: pass None"
)
AMAX_REFUSED = "amax is produced only with the bf16/fp16 D of FP4 operands, which no installed Hopper family runs: pass None"


def float_front(float_types: tuple[str, ...], refused_operands: dict[str, str]) -> dict[str, Any]:
    """The policy of a family of BF16 operands (``float_types``: C's and D's types)."""
    return {
        "operands": ["bf16"],
        "refused_operands": dict(refused_operands),
        "arguments": {
            **NO_E5M3_SCALES,
            **absent(
                ("sfa_tensor", "sfb_tensor", "sfb_ptrs", "norm_const_tensor", "d_col_tensor",
                 "sfd_row_tensor", "sfd_col_tensor"),
                _BLOCK_SCALED, "NotImplementedError",
            ),
            "amax_tensor": accepted(None, why=_BLOCK_SCALED, error="NotImplementedError"),
            "sf_vec_size": accepted(16, why="must be 16 (scale-factor vectors belong to the block-scaled backend)"),
            "discrete_col_sfd": accepted(
                False, why="must be False (column scale factors belong to the block-scaled backend)"
            ),
            "epilogue_op": accepted(None, why="must be None (the BF16 contract has no epilogue op)"),
            "vector_f32": accepted(
                False, why="must be False (the packed-f32 epilogue is not available on SM90)",
                error="NotImplementedError",
            ),
            "use_single_group_runtime_offsets": accepted(
                False, why="must be False (single-group runtime offsets belong to the block-scaled backend)"
            ),
        },
        "dtypes": {
            "c_tensor": dtypes(float_types, f"C in {torch_names(float_types)}"),
            "d_dtype": dtypes(float_types, spelled(float_types), default="bf16"),
            "b_dtype": dtypes(float_types, f"the torch dtype of the experts' matrices ({spelled(float_types)})"),
        },
        "checks": ["dense_b_k_major"],
        "outputs": list(SEED_OUTPUTS),
    }


