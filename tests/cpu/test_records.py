"""dglu.contract.records.Record: a class derived from it behaves as the class
typing.NamedTuple makes (fields, defaults, keyword binding, methods, docstring, repr,
refusals) but for its annotations, kept as written."""

from __future__ import annotations

import pickle
from typing import NamedTuple

import pytest

from dglu.contract.records import Record


class Point(Record):
    """A point."""

    x: int
    y: int = 0
    label: str | None = None

    @property
    def norm1(self) -> int:
        return abs(self.x) + abs(self.y)


class TypedPoint(NamedTuple):
    x: int
    y: int = 0
    label: str | None = None


def test_a_record_behaves_as_the_named_tuple_of_its_fields() -> None:
    point, typed = Point(3, -4), TypedPoint(3, -4)
    assert point == typed == (3, -4, None) and point.norm1 == 7
    assert Point._fields == TypedPoint._fields and Point._field_defaults == TypedPoint._field_defaults
    assert point._replace(label="a") == (3, -4, "a") and Point._make((1, 2, "b")).label == "b"
    assert point._asdict() == typed._asdict() and Point(x=1, label="c") == (1, 0, "c")
    assert Point.__doc__ == "A point." and Point.__qualname__ == "Point" and Point.__module__ == __name__
    assert Point.__annotations__ == {"x": "int", "y": "int", "label": "str | None"}  # as written
    assert issubclass(Point, tuple) and not hasattr(point, "__dict__")
    assert pickle.loads(pickle.dumps(point)) == point


def test_a_record_refuses_what_typing_named_tuple_refuses() -> None:
    with pytest.raises(TypeError, match="without a default follows one with a default"):
        type(Record)("Bad", (Record,), {"__module__": __name__, "__qualname__": "Bad",
                                        "__annotations__": {"a": "int", "b": "int"}, "a": 1})
    with pytest.raises(AttributeError, match="cannot define _replace"):
        type(Record)("Bad", (Record,), {"__module__": __name__, "__qualname__": "Bad",
                                        "__annotations__": {"a": "int"}, "_replace": None})
    with pytest.raises(TypeError, match="derives from Record alone"):
        type(Record)("Bad", (Record, int), {"__module__": __name__, "__qualname__": "Bad"})


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda cls: cls(), TypeError),  # x has no default
        (lambda cls: cls(1, 2, "a", 4), TypeError),  # one positional value too many
        (lambda cls: cls(1, z=2), TypeError),  # no such field
        (lambda cls: cls(1, x=2), TypeError),  # x twice
        (lambda cls: cls(1)._replace(z=2), ValueError),  # no such field to replace
    ],
)
def test_a_record_is_made_and_refused_as_a_named_tuple_is(make, error) -> None:
    with pytest.raises(error):
        make(TypedPoint)
    with pytest.raises(error):
        make(Point)


def test_a_record_binds_keywords_and_defaults_and_prints_as_a_named_tuple() -> None:
    for args, kwargs in [((), {"x": 5}), ((5,), {"label": "q"}), ((5, 6), {}), ((), {"label": "q", "x": 5})]:
        assert Point(*args, **kwargs) == TypedPoint(*args, **kwargs)
    assert repr(Point(1, label="a")) == repr(TypedPoint(1, label="a")).replace("TypedPoint", "Point")
    assert hash(Point(1, 2)) == hash((1, 2, None)) and Point.__match_args__ == TypedPoint.__match_args__


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((), {}, "Point() missing required arguments: 'x'"),
        ((), {"y": 1}, "Point() missing required arguments: 'x'"),
        ((1, 2, "a", 4), {}, "Point() takes 3 positional arguments but 4 were given"),
        ((1,), {"z": 2}, "Point() got an unexpected keyword argument 'z'"),
        ((1,), {"x": 2}, "Point() got multiple values for argument 'x'"),
        ((), {"z": 2}, "Point() got an unexpected keyword argument 'z'"),  # before the missing x
    ],
)
def test_a_record_names_what_does_not_bind(args, kwargs, message) -> None:
    with pytest.raises(TypeError) as error:
        Point(*args, **kwargs)
    assert str(error.value) == message
