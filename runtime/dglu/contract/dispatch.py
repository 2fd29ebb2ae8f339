"""The dispatch table: which launch shape (tile, cluster, consumer) serves a problem class.

A call that names neither ``mma_tiler_mn`` nor ``cluster_shape_mn`` leaves its launch
shape to the selection (dglu.selection), which asks this table first. The table is data
written by the build from the ``dispatch:`` section of the spec files (measured on a GPU,
kernel_specs/default.yaml says where) into ``dispatch.json`` beside an artifact
directory's manifest; the runtime reads the file of every searched directory, earlier
directories' rules first. A rule is

    {"arch": "sm_90a", "when": {"min_n": 1025, "max_n": 2048},
     "choose": {"tile_m": 128, "tile_n": 256, "cluster_m": 2, "cluster_n": 1,
                "consumer": "cooperative_rf"}}

``when`` bounds (inclusive) the problem's rows ``m`` (A's), ``n`` (R's columns, half of
C's), ``k`` and ``experts`` (L); a bound left out holds for any value. ``choose`` gives
variant key fields (CHOICES). The rules of the call's architecture whose bounds hold are
its problem's, in order (rules_for): each narrows the variants that match everything else
the call asks to those with its fields, where any has them, so the first rule that some
matching variant takes decides (a rule of fields no variant of the call's family has, e.g.
a ping-pong consumer, passes over a block-scaled call); with no such variant, or no rule,
the selection's default serves the call. This module reads and checks the data only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ManifestError
from .records import Record

DISPATCH_FILE = "dispatch.json"
DISPATCH_VERSION = 1
PROBLEM_FIELDS = ("m", "n", "k", "experts")
BOUNDS = tuple(f"{side}_{field}" for field in PROBLEM_FIELDS for side in ("min", "max"))
# the key fields a rule may choose (the launch shape), and their JSON types
CHOICES: dict[str, type] = {
    "tile_m": int, "tile_n": int, "cluster_m": int, "cluster_n": int, "consumer": str,
}
RULE_FIELDS = ("arch", "when", "choose")
OPTIONAL_RULE_FIELDS = ("measured",)


class DispatchRule(Record):
    """One row of the table: the problems of ``arch`` within ``when``'s bounds take the
    variants whose key has ``choose``'s fields."""

    arch: str
    when: tuple[tuple[str, int], ...]  # (bound, value), e.g. ("max_n", 1024)
    choose: tuple[tuple[str, Any], ...]  # (key field, value)
    measured: str = ""  # where the measurement behind it is logged

    def holds(self, problem: Mapping[str, int]) -> bool:
        """Whether ``problem`` (PROBLEM_FIELDS -> value) is within every bound."""
        for bound, value in self.when:
            side, field = bound.split("_", 1)
            given = problem[field]
            if given < value if side == "min" else given > value:
                return False
        return True

    def as_dict(self) -> dict[str, Any]:
        data = {"arch": self.arch, "when": dict(self.when), "choose": dict(self.choose)}
        return {**data, "measured": self.measured} if self.measured else data


def _fail(where: str, problem: str) -> ManifestError:
    return ManifestError(f"{where}: {problem}")


def read_rule(data: Any, where: str) -> DispatchRule:
    """One rule from its JSON (or spec) mapping; ManifestError naming ``where`` and the
    field when it is malformed."""
    if not isinstance(data, dict):
        raise _fail(where, f"a rule needs a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(RULE_FIELDS) - set(OPTIONAL_RULE_FIELDS))
    missing = [name for name in RULE_FIELDS if name not in data]
    if unknown or missing:
        raise _fail(where, f"a rule has the fields {list(RULE_FIELDS)} (and optionally "
                           f"{list(OPTIONAL_RULE_FIELDS)}); unknown {unknown}, missing {missing}")
    if not isinstance(data["arch"], str):
        raise _fail(where, f"arch: needs a string, got {data['arch']!r}")
    when, choose = data["when"], data["choose"]
    if not isinstance(when, dict) or set(when) - set(BOUNDS):
        raise _fail(where, f"when: needs a mapping of bounds among {list(BOUNDS)}, got {when!r}")
    for bound, value in when.items():
        if type(value) is not int or value < 0:
            raise _fail(where, f"when.{bound}: needs a non-negative integer, got {value!r}")
    if not isinstance(choose, dict) or not choose or set(choose) - set(CHOICES):
        raise _fail(where, f"choose: needs a non-empty mapping of fields among {list(CHOICES)}, got {choose!r}")
    for field, value in choose.items():
        if type(value) is not CHOICES[field]:
            raise _fail(where, f"choose.{field}: needs {CHOICES[field].__name__}, got {value!r}")
    measured = data.get("measured", "")
    if not isinstance(measured, str):
        raise _fail(where, f"measured: needs a string, got {measured!r}")
    return DispatchRule(
        data["arch"],
        tuple((bound, when[bound]) for bound in BOUNDS if bound in when),
        tuple((field, choose[field]) for field in CHOICES if field in choose),
        measured,
    )


def dispatch_text(rules: list[DispatchRule]) -> str:
    """The dispatch.json of ``rules`` (in their order)."""
    return json.dumps({"version": DISPATCH_VERSION, "rules": [rule.as_dict() for rule in rules]}, indent=1) + "\n"


def read_dispatch(directory: Path) -> tuple[DispatchRule, ...]:
    """The rules of ``directory``'s dispatch.json; none when it has no such file."""
    path = directory / DISPATCH_FILE
    if not path.is_file():
        return ()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise _fail(str(path), f"not readable as JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("version") != DISPATCH_VERSION or not isinstance(data.get("rules"), list):
        raise _fail(str(path), f"needs {{\"version\": {DISPATCH_VERSION}, \"rules\": [...]}}")
    return tuple(read_rule(rule, f"{path}: rules[{i}]") for i, rule in enumerate(data["rules"]))


def rules_for(rules: tuple[DispatchRule, ...], arch: str, problem: Mapping[str, int]) -> tuple[DispatchRule, ...]:
    """The rules of ``arch`` whose bounds hold for ``problem``, in order."""
    return tuple(rule for rule in rules if rule.arch == arch and rule.holds(problem))
