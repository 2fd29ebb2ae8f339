"""Record: typing.NamedTuple's class syntax at collections.namedtuple's cost.

typing.NamedTuple checks each field's annotation when the class is made; under
``from __future__ import annotations`` each one is a string, which it compiles (~15 us a
field: ~3 ms of ``import dglu`` over the runtime's records). A Record subclass is the class
typing.NamedTuple makes (collections.namedtuple's, with the body's defaults, methods and
docstring) but for its ``__annotations__``, kept as written. Type checkers see
typing.NamedTuple itself.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

# Names a record's body may not define (typing.NamedTuple's rule), and those it sets itself.
_PROHIBITED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make", "_replace",
     "_asdict", "_source"}
)
_SPECIAL = frozenset({"__module__", "__qualname__", "__annotations__"})


class _RecordMeta(type):
    """Makes each ``class X(Record)`` a namedtuple class (not a subclass of Record)."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not bases:  # Record itself
            return super().__new__(mcls, name, bases, namespace)
        if bases != (Record,):
            raise TypeError(f"{name}: a Record derives from Record alone")
        annotations = namespace.get("__annotations__", {})
        defaults = [namespace[field] for field in annotations if field in namespace]
        if any(field not in namespace for field in list(annotations)[len(annotations) - len(defaults):]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        record = collections.namedtuple(name, annotations, defaults=defaults, module=namespace["__module__"])
        record.__qualname__ = namespace["__qualname__"]
        record.__annotations__ = dict(annotations)
        for key, value in namespace.items():
            if key in _PROHIBITED:
                raise AttributeError(f"{name}: a Record cannot define {key}")
            if key not in _SPECIAL and key not in annotations:
                setattr(record, key, value)
        return record


if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:

    class Record(metaclass=_RecordMeta):
        """Derive from it as from typing.NamedTuple (see the module docstring)."""
