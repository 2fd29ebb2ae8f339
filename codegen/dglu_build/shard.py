"""Split the variants of a build over N machines, the same way on each of them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_SHARD = re.compile(r"([0-9]+)/([0-9]+)")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"I/N"`` with 1 <= I <= N; ValueError naming what was given otherwise."""
        match = _SHARD.fullmatch(text.strip())
        if not match or not 1 <= int(match[1]) <= int(match[2]):
            raise ValueError(f"got {text!r}, needs I/N with 1 <= I <= N (e.g. 2/4)")
        return cls(int(match[1]), int(match[2]))

    def select(self, names: Sequence[str]) -> list[str]:
        """This shard's share of ``names``: every N-th of them in sorted order, starting at the I-th.

        Every shard of the same names gets a disjoint share, together all of
        them, and their sizes differ by at most one.
        """
        return sorted(names)[self.index - 1 :: self.count]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"
