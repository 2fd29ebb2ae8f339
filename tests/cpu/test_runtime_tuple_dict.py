"""dglu.TupleDict: read by name, unpack and index by position."""

from __future__ import annotations

from dglu import TupleDict

NAMES = (
    "d_row_tensor",
    "d_col_tensor",
    "dprob_tensor",
    "dbias_tensor",
    "amax_tensor",
    "sfd_row_tensor",
    "sfd_col_tensor",
)


def make() -> TupleDict:
    return TupleDict(
        (name, f"value of {name}" if i in (0, 2) else None) for i, name in enumerate(NAMES)
    )


def test_unpacks_in_insertion_order() -> None:
    d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col = make()
    assert (d_row, dprob) == ("value of d_row_tensor", "value of dprob_tensor")
    assert (d_col, dbias, amax, sfd_row, sfd_col) == (None,) * 5


def test_reads_by_name_and_position() -> None:
    out = make()
    assert out["dprob_tensor"] == out[2] == "value of dprob_tensor"
    assert out[-1] is None
    assert out[:3] == ("value of d_row_tensor", None, "value of dprob_tensor")
    assert len(out) == 7


def test_keeps_dict_behaviour() -> None:
    out = make()
    assert tuple(out.keys()) == NAMES
    assert "d_row_tensor" in out and "value of d_row_tensor" not in out
    assert dict(out)["dprob_tensor"] == "value of dprob_tensor"
    assert list(out) == list(out.values())
