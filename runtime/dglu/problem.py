"""One call's problem: the named scalars and tensor views that manifest parameters refer to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SCALAR_NAMES = ("m", "n", "k", "l", "n2", "l_n2")
TENSOR_NAMES = (
    "a",
    "b",
    "c",
    "d_row",
    "padded_offsets",
    "alpha",
    "beta",
    "prob",
    "dprob",
    "dbias",
    "b_ptrs",
)
# Descriptor views a manifest may name besides the tensors: one expert's (N, K) matrix of
# discrete weights, the template that the b_descriptors kernel copies per expert.
DERIVED_VIEWS = ("b_expert",)


@dataclass(frozen=True)
class Workspace:
    """A scratch tensor the runtime allocates zeroed before the first kernel of a call."""

    dtype: str
    count: str  # the scalar that gives its number of elements


WORKSPACES: dict[str, Workspace] = {"dbias_ws": Workspace(dtype="fp32", count="l_n2")}
# Workspaces of variants this runtime does not launch yet: b_desc_ws (discrete weights: one
# TMA descriptor per expert) and tile_counter (the dynamic scheduler's). Other variants name
# them only as optional pointers, passed NULL.
UNLAUNCHED_WORKSPACES = ("b_desc_ws", "tile_counter")


@dataclass(frozen=True)
class TensorView:
    """A device tensor as the kernels see it: address, seed-rank shape, strides in elements."""

    device: int
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Problem:
    """Sizes of one call (M rows, compact width N, reduction K, L experts) and its tensors."""

    m: int
    n: int
    k: int
    l: int
    tensors: Mapping[str, TensorView]

    @property
    def scalars(self) -> dict[str, int]:
        """Every problem scalar a manifest parameter or grid rule may name."""
        return {
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "l": self.l,
            "n2": 2 * self.n,
            "l_n2": self.l * 2 * self.n,
        }
