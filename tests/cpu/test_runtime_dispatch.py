"""dglu.contract.dispatch: the dispatch table's rules, their checks and their file."""

from __future__ import annotations

from pathlib import Path

import pytest
from dglu.contract.dispatch import DISPATCH_FILE, dispatch_text, read_dispatch, read_rule, rules_for
from dglu.errors import ManifestError

WIDE_N = {"arch": "sm_90a", "when": {"min_n": 2049, "min_m": 16384},
          "choose": {"cluster_m": 2, "cluster_n": 1, "consumer": "pingpong"}}
SMALL_N = {"arch": "sm_90a", "when": {"max_n": 1024}, "choose": {"tile_m": 128, "tile_n": 128}}


def problem(m=16384, n=2880, k=2880, experts=16):
    return {"m": m, "n": n, "k": k, "experts": experts}


def test_bounds_are_inclusive_and_an_absent_bound_holds_for_any_value() -> None:
    rule = read_rule(WIDE_N, "test")
    assert rule.holds(problem()) and rule.holds(problem(m=16384, n=2049))
    assert not rule.holds(problem(n=2048)) and not rule.holds(problem(m=16383))
    assert rule.holds(problem(k=1, experts=1_000))


def test_the_rules_of_the_architecture_whose_bounds_hold_in_order() -> None:
    rules = tuple(read_rule(r, "test") for r in (WIDE_N, SMALL_N, {**SMALL_N, "when": {}}))
    assert rules_for(rules, "sm_90a", problem()) == (rules[0], rules[2])
    assert rules_for(rules, "sm_90a", problem(n=768)) == rules[1:]
    assert rules_for(rules, "sm_90a", problem(n=2048)) == (rules[2],)
    assert rules_for(rules, "sm_100a", problem()) == ()


def test_the_file_round_trips_in_order(tmp_path: Path) -> None:
    rules = [read_rule(WIDE_N, "a"), read_rule({**SMALL_N, "measured": "bench/RESULTS.md"}, "b")]
    (tmp_path / DISPATCH_FILE).write_text(dispatch_text(rules))
    assert list(read_dispatch(tmp_path)) == rules
    assert read_dispatch(tmp_path / "elsewhere") == ()


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({**WIDE_N, "extra": 1}, r"unknown \['extra'\]"),
        ({"arch": "sm_90a", "when": {}}, r"missing \['choose'\]"),
        ({**WIDE_N, "when": {"min_l": 2}}, "when: needs a mapping of bounds among"),
        ({**WIDE_N, "when": {"min_n": -1}}, r"when.min_n: needs a non-negative integer, got -1"),
        ({**WIDE_N, "when": {"min_n": True}}, r"when.min_n: needs a non-negative integer, got True"),
        ({**WIDE_N, "choose": {}}, "choose: needs a non-empty mapping"),
        ({**WIDE_N, "choose": {"scheduler": "dynamic"}}, "choose: needs a non-empty mapping of fields among"),
        ({**WIDE_N, "choose": {"tile_n": "256"}}, r"choose.tile_n: needs int, got '256'"),
        ({**WIDE_N, "arch": 90}, "arch: needs a string"),
    ],
)
def test_a_malformed_rule_is_refused_naming_where_and_the_field(rule, message) -> None:
    with pytest.raises(ManifestError, match=r"^here: .*" + message):
        read_rule(rule, "here")


def test_a_malformed_file_is_refused_naming_it(tmp_path: Path) -> None:
    (tmp_path / DISPATCH_FILE).write_text('{"version": 2, "rules": []}')
    with pytest.raises(ManifestError, match=r"dispatch.json: needs \{\"version\": 1"):
        read_dispatch(tmp_path)
    (tmp_path / DISPATCH_FILE).write_text("{")
    with pytest.raises(ManifestError, match="not readable as JSON"):
        read_dispatch(tmp_path)
