"""A JAX call's static configuration: the checked options that select its variant, carried
to the FFI handler as attributes with the names of the custom call's results."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..call import OpConfig
from ..contract.front import FrontPolicy
from ..contract.records import Record
from ..options import OpOptions
from ..weights import DENSE, DISCRETE, DiscreteWeights

# The custom call's operands, in order, by their variant roles: the weights ("b" dense or
# "b_ptrs" discrete), then the block-scaled ones a call gives, dprob last (its alias).
# A call's list travels as the "operands" attribute; a call exported without it has BF16_ROLES.
WEIGHTS = "weights"
ARG_ROLES = ("a", WEIGHTS, "c", "padded_offsets", "alpha", "beta", "prob", "sfa", "weight_scales",
             "norm_const", "dprob")
BF16_ROLES = ("a", WEIGHTS, "c", "padded_offsets", "alpha", "beta", "prob", "dprob")
ACT_PREFIX = "act_param_"  # activation constants travel as act_param_<name> scalars
NO_TILE = (0, 0)  # the tile (and cluster) attribute of "let the selection choose"
NAME_SEPARATOR = ","  # joins the result and workspace names into one string attribute


class CallConfig(Record):
    """Everything static about one call (hashable: jax.jit's static argument)."""

    weight_mode: str  # DENSE or DISCRETE
    discrete: DiscreteWeights | None  # discrete weights' n and b_dtype (dense: None)
    options: OpOptions
    d_dtype: str  # manifest name of D_row's dtype
    dbias: bool

    @property
    def weights_role(self) -> str:
        """The variant's argument the weights operand is: "b" or "b_ptrs"."""
        return "b_ptrs" if self.weight_mode == DISCRETE else "b"

    def role(self, operand: str) -> str:
        """The variant role of ARG_ROLES' ``operand`` (the weights and their scale factors
        by the weight mode: b / sfb dense, b_ptrs / sfb_ptrs discrete)."""
        if operand == WEIGHTS:
            return self.weights_role
        if operand == "weight_scales":
            return "sfb_ptrs" if self.weight_mode == DISCRETE else "sfb"
        return operand

    def given_scalars(self) -> dict[str, tuple[int, str]]:
        """Scalars the weight arguments fix (discrete weights' N, from ``n``)."""
        return self.discrete.given_scalars() if self.discrete else {}

    def op_config(self, policy: FrontPolicy) -> OpConfig:
        """This configuration as the torch path's OpConfig, with the front policy of the
        family that runs the call: not static, as the handler's device may run another
        family than the trace's (which need not be a GPU's)."""
        return OpConfig(self.weight_mode, self.discrete, self.options, self.d_dtype, self.dbias, policy)

    def attributes(
        self, operands: tuple[str, ...], results: tuple[str, ...], workspaces: tuple[str, ...]
    ) -> dict[str, Any]:
        """The FFI attributes carrying this configuration and the call's layout: the
        operands' roles, the results', then the hidden workspaces', in order."""
        import numpy as np

        options = self.options
        return {
            "weight_mode": self.weight_mode,
            "n": np.int64(self.discrete.n if self.discrete else 0),
            "b_dtype": self.discrete.dtype if self.discrete else "",
            "d_dtype": self.d_dtype,
            "dbias": self.dbias,
            "act_func": options.act_func,
            "b_major": options.b_major,
            "tile": np.array(options.tile or NO_TILE, np.int64),
            "cluster": np.array(options.cluster or NO_TILE, np.int64),
            "scheduler": options.scheduler,
            "m_aligned": np.int64(options.m_aligned),
            "deterministic": options.deterministic,
            "act_out": options.act_out,
            "round_dgrad_to_input_dtype": options.round_dgrad,
            "discrete_col_sfd": options.discrete_col_sfd,
            "use_single_group_runtime_offsets": options.single_group,
            "vector_f32": options.vector_f32,
            "epilogue_op": options.epilogue_op or "",
            "operands": NAME_SEPARATOR.join(operands),
            "results": NAME_SEPARATOR.join(results),
            "workspaces": NAME_SEPARATOR.join(workspaces),
            **{ACT_PREFIX + name: np.float64(value) for name, value in options.act_params},
        }


class DecodedAttributes(Record):
    """What ``CallConfig.attributes`` encoded, decoded from the handler's attributes."""

    config: CallConfig
    operands: tuple[str, ...]  # variant roles
    results: tuple[str, ...]
    workspaces: tuple[str, ...]


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split(NAME_SEPARATOR)) if text else ()


def decode_attributes(attrs: Mapping[str, Any]) -> DecodedAttributes:
    """Decode the attributes ``CallConfig.attributes`` made (read by dglu.jax.ffi)."""
    weight_mode = attrs["weight_mode"]
    if weight_mode not in (DENSE, DISCRETE):
        raise ValueError(f"weight_mode: expected {DENSE!r} or {DISCRETE!r}, got {weight_mode!r}")
    tile = tuple(attrs["tile"])
    options = OpOptions(
        act_func=attrs["act_func"],
        act_params=tuple(
            sorted(
                (name.removeprefix(ACT_PREFIX), float(value))
                for name, value in attrs.items()
                if name.startswith(ACT_PREFIX)
            )
        ),
        b_major=attrs["b_major"],
        tile=None if tile == NO_TILE else tile,
        cluster=None if tuple(attrs["cluster"]) == NO_TILE else tuple(attrs["cluster"]),
        scheduler=attrs["scheduler"],
        m_aligned=attrs["m_aligned"],
        deterministic=attrs["deterministic"],
        # absent from calls exported by a dglu before these options: their defaults
        act_out=attrs.get("act_out", False),
        round_dgrad=attrs.get("round_dgrad_to_input_dtype", False),
        discrete_col_sfd=attrs.get("discrete_col_sfd", False),
        single_group=attrs.get("use_single_group_runtime_offsets", False),
        vector_f32=attrs.get("vector_f32", False),
        epilogue_op=attrs.get("epilogue_op") or None,
    )
    discrete = (
        DiscreteWeights(n=attrs["n"], n_from="n", dtype=attrs["b_dtype"])
        if weight_mode == DISCRETE
        else None
    )
    config = CallConfig(weight_mode, discrete, options, attrs["d_dtype"], attrs["dbias"])
    operands = tuple(config.role(o) for o in _names(attrs.get("operands", NAME_SEPARATOR.join(BF16_ROLES))))
    return DecodedAttributes(config, operands, _names(attrs["results"]), _names(attrs["workspaces"]))
