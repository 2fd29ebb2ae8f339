"""Record: typing.NamedTuple's class syntax, made cheaply.

typing.NamedTuple checks each field's annotation when the class is made, and
collections.namedtuple compiles each class's ``__new__`` from source (``eval``, ~40 us a
class in a torch-sized process: over a millisecond of ``import dglu`` for the runtime's
records). A ``class X(Record)`` is instead a tuple subclass made by ``type()``: the fields
are C-level item getters, and construction, ``_make``, ``_replace``, ``_asdict``, the
repr and pickling are shared by every record (_RecordTuple). It behaves as the class
typing.NamedTuple makes (positional and keyword construction with the body's defaults,
tuple equality and hashing, the body's methods and docstring), but for its
``__annotations__``, kept as written. Type checkers see typing.NamedTuple itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import TYPE_CHECKING, Any

try:  # the C-level field getter collections.namedtuple uses (CPython)
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover (other Pythons)

    def _tuplegetter(index: int, doc: str) -> Any:
        return property(itemgetter(index), doc=doc)


# Names a record's body may not define (typing.NamedTuple's rule).
_PROHIBITED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults", "_make", "_replace",
     "_asdict", "_source"}
)


class _RecordTuple(tuple):
    """What every record class shares: construction and namedtuple's helpers."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()
    _field_defaults: dict[str, Any] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != len(cls._fields):
            args = cls._arguments(args, kwargs)
        return tuple.__new__(cls, args)

    @classmethod
    def _arguments(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The field values of a call with ``args`` and ``kwargs``, bound as Python binds
        a function's parameters (the same TypeErrors, from _binding_error)."""
        fields, defaults = cls._fields, cls._field_defaults
        if len(args) > len(fields):
            raise cls._binding_error(args, kwargs)
        values, taken = list(args), 0
        for name in fields[len(args):]:
            if name in kwargs:
                values.append(kwargs[name])
                taken += 1
            elif name in defaults:
                values.append(defaults[name])
            else:
                raise cls._binding_error(args, kwargs)
        if taken != len(kwargs):  # a keyword names no field, or one given by position
            raise cls._binding_error(args, kwargs)
        return tuple(values)

    @classmethod
    def _binding_error(cls, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TypeError:
        """The TypeError Python raises for a call with ``args`` and ``kwargs`` that does
        not bind to the fields (checked in its order)."""
        fields = cls._fields
        if len(args) > len(fields):
            return TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments but {len(args)} were given")
        for name in kwargs:
            if name not in fields:
                return TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
            if name in fields[:len(args)]:
                return TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
        missing = [name for name in fields[len(args):] if name not in kwargs and name not in cls._field_defaults]
        return TypeError(f"{cls.__name__}() missing required arguments: {', '.join(map(repr, missing))}")

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> Any:
        """A record from an iterable of all its field values."""
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"{cls.__name__}: expected {len(cls._fields)} values, got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self, **changes: Any) -> Any:
        """This record with the fields named in ``changes`` replaced."""
        result = self._make(map(changes.pop, self._fields, self))
        if changes:
            raise ValueError(f"{type(self).__name__}: got unexpected field names {list(changes)!r}")
        return result

    def _asdict(self) -> dict[str, Any]:
        """The fields by name, in order."""
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self))
        return f"{type(self).__name__}({fields})"

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)


class _RecordMeta(type):
    """Makes each ``class X(Record)`` a _RecordTuple subclass (not a subclass of Record)."""

    def __new__(mcls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> Any:
        if not bases:  # Record itself
            return super().__new__(mcls, name, bases, namespace)
        if bases != (Record,):
            raise TypeError(f"{name}: a Record derives from Record alone")
        annotations = namespace.get("__annotations__", {})
        fields = tuple(annotations)
        defaults = {field: namespace[field] for field in fields if field in namespace}
        if any(field not in defaults for field in fields[len(fields) - len(defaults):]):
            raise TypeError(f"{name}: a field without a default follows one with a default")
        body: dict[str, Any] = {"__doc__": f"{name}({', '.join(fields)})"}
        for key, value in namespace.items():
            if key in _PROHIBITED:
                raise AttributeError(f"{name}: a Record cannot define {key}")
            if key not in annotations:
                body[key] = value
        body.update(__slots__=(), __annotations__=dict(annotations), __match_args__=fields, _fields=fields,
                    _field_defaults=defaults)
        for index, field in enumerate(fields):
            body[field] = _tuplegetter(index, f"Alias for field number {index}")
        return type(name, (_RecordTuple,), body)


if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:

    class Record(metaclass=_RecordMeta):
        """Derive from it as from typing.NamedTuple (see the module docstring)."""
