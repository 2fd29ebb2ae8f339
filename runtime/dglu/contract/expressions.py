"""EXPRESSIONs of the manifest (docs/manifest.md): ``"2*n"``, ``"m*k"``, ``"n/128"``, ``4``."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from .records import Record

NAME = re.compile(r"[a-z][a-z0-9_]*")  # scalar, argument and field names
CACHE_CAPACITY = 4096

class Expr(Record):
    """A product of a positive integer and scalar names, divided by ``divisor`` rounding up
    (``"2*n"``: (2, ("n",)); ``"n/128"``: (1, ("n",), 128), the n-tiles of 128 columns)."""

    factor: int
    names: tuple[str, ...]
    divisor: int = 1

    def value(self, scalars: Mapping[str, int]) -> int:
        """The expression's value under ``scalars`` (every name must be bound)."""
        value = self.factor
        for name in self.names:  # at most a few names: a loop beats math.prod of a generator
            value *= scalars[name]
        return value if self.divisor == 1 else -(-value // self.divisor)

    def text(self) -> str:
        """Human form for messages: ``2N``, ``M*K``, ``16``, ``ceil(N/128)``."""
        names = "*".join(name.upper() for name in self.names)
        product = names if names and self.factor == 1 else f"{self.factor}{names}"
        return product if self.divisor == 1 else f"ceil({product}/{self.divisor})"


def parse_expr(value: Any) -> Expr:
    """Parse an EXPRESSION: a positive int, or factors (positive ints, scalar names) joined
    by ``*``, optionally followed by ``/`` and a positive int (division rounding up);
    raise ValueError saying why."""
    if type(value) is int:
        if value <= 0:
            raise ValueError(f"must be a positive integer or a product, got {value!r}")
        return Expr(value, ())
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be an EXPRESSION (e.g. \"2*n\" or 4), got {value!r}")
    product, slash, divisor = value.partition("/")
    if slash and not (divisor.strip().isdigit() and int(divisor) > 0):
        raise ValueError(f"has a bad divisor {divisor!r} in {value!r} (a positive int)")
    factor, names = 1, []
    for part in product.split("*"):
        part = part.strip()
        if part.isdigit() and int(part) > 0:
            factor *= int(part)
        elif NAME.fullmatch(part):
            names.append(part)
        else:
            raise ValueError(f"has a bad factor {part!r} in {value!r} (positive ints, scalar names)")
    return Expr(factor, tuple(names), int(divisor) if slash else 1)


@functools.lru_cache(maxsize=CACHE_CAPACITY)
def cached_expr(value: str | int) -> Expr:
    """parse_expr of a string or int, remembered: manifests repeat a few expressions."""
    return parse_expr(value)
