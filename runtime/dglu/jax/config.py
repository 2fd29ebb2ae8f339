"""A JAX call's static configuration: what the trace-time checks chose, carried to the FFI
handler as attributes, and the custom call's fixed argument and result order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..options import OpOptions
from ..problem import WORKSPACES
from ..weights import DENSE, DISCRETE

# numpy dtype name -> manifest element type name (dglu.dtypes.ELEMENT_TYPES)
ELEMENT_NAMES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "int32": "i32",
    "int64": "i64",
}
NUMPY_NAMES = {manifest: numpy for numpy, manifest in ELEMENT_NAMES.items()}
# The custom call's operands, in order: the weights are "b" (dense) or "b_ptrs" (discrete).
ARG_ROLES = ("a", "weights", "c", "padded_offsets", "alpha", "beta", "prob", "dprob")
DPROB_ARG = ARG_ROLES.index("dprob")
DPROB_RET = 1  # results: d_row, dprob (aliased to the dprob operand), [dbias], workspaces
ACT_PREFIX = "act_param_"  # activation constants travel as act_param_<name> scalars
NO_TILE = (0, 0)  # the tile attribute of "let the selection choose"


class CallConfig(NamedTuple):
    """Everything static about one call (hashable: jax.jit's static argument)."""

    weight_mode: str  # DENSE or DISCRETE
    n: int  # discrete weights: N (dense: 0, N comes from B's shape)
    options: OpOptions
    d_dtype: str  # manifest name of D_row's dtype
    dbias: bool

    @property
    def workspaces(self) -> tuple[str, ...]:
        """The hidden workspace results, in order: those the variants of this configuration
        require (dglu.problem.WORKSPACES)."""
        needed = {
            "dbias_ws": self.dbias,
            "b_desc_ws": self.weight_mode == DISCRETE,
            "tile_counter": self.options.scheduler == "dynamic",
        }
        return tuple(name for name in sorted(WORKSPACES) if needed[name])

    def workspace_shapes(self, scalars: Mapping[str, int]) -> list[tuple[tuple[int], str]]:
        """(shape, numpy dtype) of each hidden workspace for a problem's scalars."""
        return [
            ((WORKSPACES[name].count(scalars),), NUMPY_NAMES[WORKSPACES[name].dtype])
            for name in self.workspaces
        ]

    def attributes(self) -> dict[str, Any]:
        """The FFI attributes that carry this configuration to the handler."""
        import numpy as np

        options = self.options
        return {
            "weight_mode": self.weight_mode,
            "n": np.int64(self.n),
            "d_dtype": self.d_dtype,
            "dbias": self.dbias,
            "act_func": options.act_func,
            "b_major": options.b_major,
            "tile": np.array(options.tile or NO_TILE, np.int64),
            "cluster": np.array(options.cluster, np.int64),
            "scheduler": options.scheduler,
            **{ACT_PREFIX + name: np.float64(value) for name, value in options.act_params},
        }


def config_from_attributes(attrs: Mapping[str, Any]) -> CallConfig:
    """The CallConfig that ``CallConfig.attributes`` encoded (decoded by dglu.jax.ffi)."""
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
        cluster=tuple(attrs["cluster"]),
        scheduler=attrs["scheduler"],
    )
    return CallConfig(weight_mode, attrs["n"], options, attrs["d_dtype"], attrs["dbias"])
