"""One call's problem: the named scalars and tensor views that manifest parameters refer to."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .dtypes import ELEMENT_TYPES

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
    """A scratch tensor the runtime allocates on the call's stream before the first kernel."""

    dtype: str
    elements: int  # per unit
    units: str | None  # the problem scalar counting the units; None: one unit
    zeroed: bool  # False: left uninitialised (the kernels write it before reading it)
    align: int  # bytes its address must be a multiple of

    def count(self, scalars: Mapping[str, int]) -> int:
        """Number of elements for a problem with these scalars."""
        return self.elements * (scalars[self.units] if self.units else 1)


WORKSPACES: dict[str, Workspace] = {
    # fp32 dbias sums, added into the caller's bf16 dbias by dbias_finish
    "dbias_ws": Workspace(dtype="fp32", elements=1, units="l_n2", zeroed=True, align=16),
    # discrete weights: one 128-byte TMA descriptor per expert, written by b_descriptors
    "b_desc_ws": Workspace(dtype="i64", elements=16, units="l", zeroed=False, align=128),
    # dynamic scheduler: the int32 count of tiles claimed past the first wave (16 bytes)
    "tile_counter": Workspace(dtype="i32", elements=4, units=None, zeroed=True, align=16),
}


class TensorView(NamedTuple):
    """A device tensor as the kernels see it: address, seed-rank shape, strides in elements."""

    device: int
    pointer: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        """Bytes a contiguous tensor of this shape and dtype spans."""
        return math.prod(self.shape) * ELEMENT_TYPES[self.dtype].size


@dataclass(frozen=True)
class Problem:
    """Sizes of one call (M rows, compact width N, reduction K, L experts) and its tensors."""

    m: int
    n: int
    k: int
    l: int
    tensors: Mapping[str, TensorView]

    @functools.cached_property
    def launch_cache(self) -> dict[Any, Any]:
        """Launch facts the runner derived for this problem (grids, plans), kept with it."""
        return {}

    @functools.cached_property
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
