"""One call's problem: its scalars (where each came from) and the tensor views the kernels see."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .contract.records import Record
from .dtypes import ELEMENT_TYPES


class TensorView(Record):
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


class Problem:
    """One call: every scalar its variant names (m, n, k, l and the derived ones), the
    argument each base scalar came from, and the views of its tensors. (A plain class: a
    dataclass costs ~0.5 ms to create at import.)"""

    __slots__ = ("scalars", "origins", "tensors")

    def __init__(
        self, scalars: Mapping[str, int], origins: Mapping[str, str], tensors: Mapping[str, TensorView]
    ) -> None:
        self.scalars = scalars
        self.origins = origins
        self.tensors = tensors

    def __repr__(self) -> str:
        return f"Problem(scalars={self.scalars!r}, origins={self.origins!r}, tensors={self.tensors!r})"

    def explain(self) -> str:
        """The scalars and their sources, e.g. ``M=8, K=16 (M, K from a_tensor)``."""
        values = ", ".join(f"{name.upper()}={self.scalars[name]}" for name in self.origins)
        by_source: dict[str, list[str]] = {}
        for name, source in self.origins.items():
            by_source.setdefault(source, []).append(name.upper())
        sources = "; ".join(f"{', '.join(names)} from {source}" for source, names in by_source.items())
        return f"{values} ({sources})"
