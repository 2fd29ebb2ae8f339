"""TupleDict: the wrapper's outputs, readable by name and unpackable like a tuple."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class TupleDict(dict):
    """A dict whose iteration and integer indexing follow its values, in insertion order.

    ``out["d_row_tensor"]`` reads by name; ``d_row, d_col, ... = out`` and ``out[0]``
    read by position. keys(), values() and items() behave as for any dict.
    """

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int | slice) and not isinstance(key, bool):
            return tuple(self.values())[key]
        return super().__getitem__(key)
