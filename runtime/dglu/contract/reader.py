"""The manifest's strict reader (docs/manifest.md).

``read_manifest(directory)`` parses ``directory/manifest.json`` into the records of
dglu.contract.schema, type-checking every field and refusing unknown ones; each error names
the file, the variant entry and the field. ``read_manifest(directory, lazy=True)`` (the
runtime's) checks each variant's identity fields at once and the rest when the variant is
used (VariantEntry); with a manifest index that matches the manifest (dglu.contract.index)
it parses only the index (with ``arch``, only that architecture's records) and, when a
variant is used, that variant's entry. Entries that
repeat (a family's variants share their tensor rules and kernel params) are read once per
context and shared (``_memoised``).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from .element_types import ELEMENT_TYPES

POINTER_BYTES = 8
from .errors import ManifestError
from .front import FrontPolicy, read_front
from .expressions import NAME as _NAME, Expr, cached_expr, parse_expr
from .index import INDEX_FILE, INDEX_FORMAT, REWRITE_HINT, Index, index_records, read_entry, read_index
from .keys import KEY_FIELD_DEFAULTS, KEY_FIELDS
from .records import Record
from .schema import (
    BASE_SCALARS,
    GRID_RULES,
    IO_KINDS,
    LAUNCH_ATTRIBUTES,
    MANIFEST_FILE,
    MAX_TMA_BOX,
    MAX_TMA_RANK,
    PARAM_SOURCES,
    REBUILD_HINT,
    SCHEMA_VERSION,
    STARTS,
    TMA_ENUMS,
    ZERO_KINDS,
    Argument,
    Build,
    GridSpec,
    KernelSpec,
    Limit,
    Manifest,
    ParamSpec,
    TmaRule,
    Variant,
    VariantKey,
    ViewRule,
    WorkspaceRule,
)

# variants repeat, so each distinct one is checked once (see _memoised).
MEMO_CAPACITY = 4096
_memo: dict[tuple[Any, ...], Any] = {}
T = TypeVar("T")

_SHA256 = re.compile(r"[0-9a-f]{64}")
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
    float: "a number",
}


def _frozen(mapping: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(mapping)


def _json_type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _is_json_type(value: Any, expected: type) -> bool:
    if expected is int:
        return type(value) is int
    if expected is float:
        return type(value) in (int, float)
    return isinstance(value, expected)


class _Entry:
    """A JSON object being read, with the location its error messages name."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: expected an object, got {_json_type(data)}")
        self.data = data
        self.where = where

    def fail(self, field: str, problem: str) -> Exception:
        """An error about one field of this entry."""
        return ManifestError(f"{self.where}: field '{field}' {problem}")

    def take(self, field: str, expected: type, default: Any = ...) -> Any:
        """The value of a field of JSON type ``expected`` (required unless ``default``)."""
        if field not in self.data:
            if default is not ...:
                return default
            raise ManifestError(f"{self.where}: missing field '{field}'")
        value = self.data[field]
        if not _is_json_type(value, expected):
            raise self.fail(
                field, f"must be {_TYPE_NAMES[expected]}, got {_json_type(value)} {value!r}"
            )
        return value

    def positive(self, field: str, zero_ok: bool = False) -> int:
        value = self.take(field, int)
        if value < (0 if zero_ok else 1):
            raise self.fail(field, f"must be {'>= 0' if zero_ok else 'positive'}, got {value}")
        return value

    def choice(self, field: str, allowed: Any) -> str:
        value = self.take(field, str)
        if value not in allowed:
            raise self.fail(field, f"is {value!r}, expected one of {sorted(allowed)}")
        return value

    def name(self, field: str) -> str:
        value = self.take(field, str)
        if not _NAME.fullmatch(value):
            raise self.fail(field, f"must be a lowercase name, got {value!r}")
        return value

    def triple(self, field: str) -> tuple[int, int, int]:
        value = self.take(field, list)
        if len(value) != 3 or not all(type(v) is int and v > 0 for v in value):
            raise self.fail(field, f"must be 3 positive integers, got {value!r}")
        return tuple(value)

    def expr(self, field: str, value: Any, scalars: AbstractSet[str]) -> Expr:
        """``value`` (found in ``field``) as an EXPRESSION over ``scalars``."""
        try:
            expr = cached_expr(value) if type(value) in (str, int) else parse_expr(value)
        except ValueError as exc:
            raise self.fail(field, str(exc)) from None
        unknown = [n for n in expr.names if n not in scalars]
        if unknown:
            raise self.fail(
                field, f"names unknown scalar(s) {unknown} in {value!r} (known: {sorted(scalars)})"
            )
        return expr

    def exprs(
        self, field: str, scalars: AbstractSet[str], length: int | None = None
    ) -> tuple[Expr, ...]:
        values = self.take(field, list)
        if not values or (length is not None and len(values) != length):
            wanted = f"{length} entries" if length is not None else "at least one entry"
            raise self.fail(field, f"must have {wanted}, got {values!r}")
        return tuple(self.expr(field, v, scalars) for v in values)

    def dtypes(self, field: str) -> tuple[str, ...]:
        values = self.take(field, list)
        if not values or not all(v in ELEMENT_TYPES for v in values):
            raise self.fail(field, f"must list element types of {list(ELEMENT_TYPES)}, got {values!r}")
        return tuple(values)

    def only(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
        """Refuse missing required fields and fields the schema does not define."""
        for field in required:
            if field not in self.data:
                raise ManifestError(f"{self.where}: missing field '{field}'")
        unknown = sorted(set(self.data) - set(required) - set(optional))
        if unknown:
            raise ManifestError(
                f"{self.where}: unknown field(s) {unknown} (schema_version {SCHEMA_VERSION} "
                f"defines {sorted({*required, *optional})})"
            )

    def objects(self, field: str) -> dict[str, _Entry]:
        """A field holding an object of named objects, each as an _Entry."""
        value = self.take(field, dict)
        entries = {}
        for name, data in value.items():
            if not _NAME.fullmatch(name):
                raise self.fail(field, f"has a bad name {name!r} (lowercase names)")
            entries[name] = _Entry(data, f"{self.where}, {field}.{name}")
        return entries


def _memoised(read: Callable[..., T]) -> Callable[..., T]:
    """``read(entry, *context)`` remembered by the entry's canonical JSON text and the
    (hashable) ``context``: a repeated entry read in the same context gets the first
    reading's value without being checked again (its checks passed, and depend on nothing
    else). A failed reading stores nothing, so every error names the entry it was found in.
    Entries are JSON-decoded data, whose text tells every value and type apart."""

    def cached(entry: _Entry, *context: Any) -> T:
        key = (read, repr(entry.data), context)
        value = _memo.get(key)
        if value is None:
            value = read(entry, *context)
            if len(_memo) >= MEMO_CAPACITY:
                _memo.clear()
            _memo[key] = value
        return value

    cached.__doc__ = read.__doc__
    return cached


_REQUIRED_KEY_FIELDS = tuple(name for name in KEY_FIELDS if name not in KEY_FIELD_DEFAULTS)
# (field, JSON type, the Python types json.loads makes of that JSON type): _is_json_type
# as one set lookup, for the key of every variant of an index
_JSON_TYPES = {int: frozenset({int}), float: frozenset({int, float}), bool: frozenset({bool}),
               str: frozenset({str}), dict: frozenset({dict}), list: frozenset({list})}
_KEY_JSON_TYPES = tuple((name, kind, _JSON_TYPES[kind]) for name, kind in KEY_FIELDS.items())


def _read_key(entry: _Entry) -> VariantKey:
    entry.only(_REQUIRED_KEY_FIELDS, tuple(KEY_FIELD_DEFAULTS))
    data = entry.data
    fields = {  # a value of the wrong type gets take's message (read for every variant: fast)
        name: (data[name] if type(data[name]) in types else entry.take(name, kind))
        if name in data else KEY_FIELD_DEFAULTS[name]
        for name, kind, types in _KEY_JSON_TYPES
    }
    bad = {k: v for k, v in fields["act_params"].items() if not _is_json_type(v, float)}
    if bad:
        raise entry.fail("act_params", f"must map names to numbers, got {bad!r}")
    fields["act_params"] = tuple(sorted((k, float(v)) for k, v in fields["act_params"].items()))
    return VariantKey(**fields)


@_memoised
def _read_build(entry: _Entry) -> Build:
    entry.only(("dglu_version", "source_hash", "toolchain"))
    source_hash = entry.take("source_hash", str)
    if not _SHA256.fullmatch(source_hash):
        raise entry.fail("source_hash", f"must be 64 lowercase hex digits, got {source_hash!r}")
    toolchain = entry.take("toolchain", dict)
    bad = {k: v for k, v in toolchain.items() if not isinstance(v, str)}
    if bad:
        raise entry.fail("toolchain", f"must map tool names to version strings, got {bad!r}")
    return Build(entry.take("dglu_version", str), source_hash, _frozen(dict(toolchain)))


def _read_scalars(entry: _Entry) -> dict[str, Expr]:
    """Derived scalars; each may use the base scalars and those listed before it."""
    known = set(BASE_SCALARS)
    scalars = {}
    for name, value in entry.take("scalars", dict).items():
        if not _NAME.fullmatch(name) or name in known:
            raise entry.fail("scalars", f"has a bad or repeated scalar name {name!r}")
        scalars[name] = entry.expr(f"scalars.{name}", value, known)
        known.add(name)
    return scalars


@_memoised
def _read_argument(entry: _Entry, scalars: frozenset[str]) -> Argument:
    entry.only(("shape", "strides", "dtypes", "align", "io"), ("rank_drop", "allocation", "start"))
    shape = entry.exprs("shape", scalars)
    start = entry.choice("start", STARTS) if "start" in entry.data else "zero"
    return Argument(
        shape=shape,
        strides=entry.exprs("strides", scalars, len(shape)),
        dtypes=entry.dtypes("dtypes"),
        align=entry.positive("align"),
        io=entry.choice("io", IO_KINDS),
        rank_drop=entry.take("rank_drop", bool, False),
        allocation=entry.take("allocation", str, None),
        start=start,
    )


@_memoised
def _read_limit(entry: _Entry) -> Limit:
    entry.only(("why",), ("min", "max", "multiple_of"))
    why = entry.take("why", str)
    bounds = {f: entry.take(f, int) for f in ("min", "max", "multiple_of") if f in entry.data}
    if bounds.get("multiple_of", 1) <= 0:
        raise entry.fail("multiple_of", f"must be positive, got {bounds['multiple_of']}")
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise entry.fail("min", f"{bounds['min']} exceeds max {bounds['max']}")
    return Limit(why=why, **bounds)


@_memoised
def _read_view(entry: _Entry, scalars: frozenset[str], sources: frozenset[str]) -> ViewRule:
    entry.only(("of", "dtype", "shape", "strides", "address_align_down"))
    shape = entry.exprs("shape", scalars)
    return ViewRule(
        of=entry.choice("of", sources),
        dtype=entry.choice("dtype", ELEMENT_TYPES),
        shape=shape,
        strides=entry.exprs("strides", scalars, len(shape)),
        address_align_down=entry.positive("address_align_down"),
    )


@_memoised
def _read_workspace(entry: _Entry, scalars: frozenset[str]) -> WorkspaceRule:
    entry.only(("dtype", "count", "align", "zero"))
    return WorkspaceRule(
        dtype=entry.choice("dtype", ELEMENT_TYPES),
        count=entry.expr("count", entry.data["count"], scalars),
        align=entry.positive("align"),
        zero=entry.choice("zero", ZERO_KINDS),
    )


@_memoised
def _read_tma(entry: _Entry) -> TmaRule:
    entry.only(("dtype", "dims", "box", *TMA_ENUMS))
    dims = entry.take("dims", list)
    if not 1 <= len(dims) <= MAX_TMA_RANK or sorted(dims) != list(range(len(dims))):
        raise entry.fail(
            "dims", f"must be a permutation of 0..rank-1 (rank 1..{MAX_TMA_RANK}), got {dims!r}"
        )
    box = entry.take("box", list)
    if len(box) != len(dims) or not all(type(b) is int and 0 < b <= MAX_TMA_BOX for b in box):
        raise entry.fail(
            "box", f"must be {len(dims)} integers in 1..{MAX_TMA_BOX} (one per dims entry), got {box!r}"
        )
    return TmaRule(
        dtype=entry.choice("dtype", ELEMENT_TYPES),
        dims=tuple(dims),
        box=tuple(box),
        **{name: entry.choice(name, members) for name, members in TMA_ENUMS.items()},
    )


@_memoised
def _read_grid(entry: _Entry, scalars: frozenset[str]) -> GridSpec:
    rule = entry.choice("rule", GRID_RULES)
    entry.only(("rule", *GRID_RULES[rule]))
    if rule == "elementwise":
        return GridSpec(rule, count=entry.expr("count", entry.data["count"], scalars))
    if rule == "active_clusters":
        return GridSpec(rule)
    return GridSpec(rule, tile_m=entry.positive("tile_m"), tile_n=entry.positive("tile_n"))


def _read_param(
    entry: _Entry, scalars: frozenset[str], tensors: frozenset[str], tma: frozenset[str]
) -> ParamSpec:
    kind = entry.choice("kind", PARAM_SOURCES)
    entry.only(("name", "kind", "size", "align", *PARAM_SOURCES[kind]), ("optional",) if kind == "pointer" else ())
    spec: dict[str, Any] = {
        "name": entry.take("name", str),
        "kind": kind,
        "size": entry.positive("size"),
        "align": entry.positive("align"),
    }
    if kind == "pointer":
        spec["optional"] = entry.take("optional", bool, False)
        spec["tensor"] = entry.name("tensor") if spec["optional"] else entry.choice("tensor", tensors)
    elif kind == "tensormap":
        spec["tensor"] = entry.choice("tensor", tma)
    elif kind == "i32_tuple":
        spec["values"] = entry.exprs("values", scalars)
    elif kind == "pointer_i32s":
        spec["tensor"] = entry.choice("tensor", tensors)
        spec["values"] = entry.exprs("values", scalars)
        if spec["size"] < POINTER_BYTES + 4 * len(spec["values"]):
            raise entry.fail("size", f"{spec['size']} cannot hold a pointer and {len(spec['values'])} int32 values")
    elif kind == "f32_const":
        spec["constant"] = float(entry.take("value", float))
    elif kind != "zeros":
        spec["values"] = (entry.expr("value", entry.data["value"], scalars),)
    return ParamSpec(**spec)


def _read_kernel(
    entry: _Entry, scalars: frozenset[str], tensors: frozenset[str], tma: frozenset[str]
) -> KernelSpec:
    entry.only(
        ("role", "symbol", "block", "cluster", "dynamic_smem_bytes", "attributes", "grid", "params")
    )
    cluster = entry.triple("cluster")
    attributes = {}
    for name, value in entry.take("attributes", dict).items():
        if name not in LAUNCH_ATTRIBUTES:
            raise entry.fail("attributes", f"has unknown attribute {name!r} (known: {list(LAUNCH_ATTRIBUTES)})")
        attributes[name] = _Entry({name: value}, entry.where).triple(name)
    if attributes.get("cluster_dimension", cluster) != cluster:
        raise entry.fail(
            "attributes",
            f"cluster_dimension {list(attributes['cluster_dimension'])} differs from cluster {list(cluster)}",
        )
    entry.take("params", list)
    return KernelSpec(
        role=entry.name("role"),
        symbol=entry.take("symbol", str),
        block=entry.triple("block"),
        cluster=cluster,
        dynamic_smem_bytes=entry.positive("dynamic_smem_bytes", zero_ok=True),
        attributes=_frozen(attributes),
        grid=_read_grid(_Entry(entry.take("grid", dict), f"{entry.where}, grid"), scalars),
        params=_read_params(_Entry({"params": entry.data["params"]}, entry.where), scalars, tensors, tma),
    )


@_memoised
def _read_params(
    entry: _Entry, scalars: frozenset[str], tensors: frozenset[str], tma: frozenset[str]
) -> tuple[ParamSpec, ...]:
    """A kernel's ``params`` list (``entry`` holds only it: kernels of a family share it)."""
    return tuple(
        _read_param(_Entry(p, f"{entry.where}, params[{i}]"), scalars, tensors, tma)
        for i, p in enumerate(entry.data["params"])
    )


RULE_FIELDS = ("scalars", "arguments", "limits", "views", "workspaces", "tma")
OPTIONAL_RULE_FIELDS = ("flags",)


class _Rules(Record):
    """A variant's tensor rules (RULE_FIELDS): variants of a family share them."""

    scalars: Mapping[str, Expr]
    arguments: Mapping[str, Argument]
    limits: Mapping[str, Limit]
    views: Mapping[str, ViewRule]
    workspaces: Mapping[str, WorkspaceRule]
    tma: Mapping[str, TmaRule]
    flags: tuple[str, ...]


@_memoised
def _read_rules(entry: _Entry) -> _Rules:
    """The RULE_FIELDS of a variant ``entry`` holding only those, checked together."""
    derived = _read_scalars(entry)
    flags = _read_flags(entry, derived)
    scalars = frozenset((*BASE_SCALARS, *derived, *flags))
    arguments = {
        role: _read_argument(e, scalars) for role, e in entry.objects("arguments").items()
    }
    if not arguments:
        raise entry.fail("arguments", "must list at least one argument")
    limits = {}
    for scalar, e in entry.objects("limits").items():
        if scalar not in scalars:
            raise entry.fail("limits", f"limits unknown scalar {scalar!r} (known: {sorted(scalars)})")
        limits[scalar] = _read_limit(e)
    workspaces = {w: _read_workspace(e, scalars) for w, e in entry.objects("workspaces").items()}
    views = {v: _read_view(e, scalars, frozenset(arguments)) for v, e in entry.objects("views").items()}
    clash = sorted((set(arguments) & set(views)) | (set(workspaces) & {*arguments, *views}))
    if clash:
        raise entry.fail("workspaces", f"reuses tensor names {clash} of arguments or views")
    tma = {}
    for tensor, e in entry.objects("tma").items():
        if tensor not in arguments and tensor not in views:
            raise entry.fail("tma", f"has a rule for {tensor!r}, which is no argument or view")
        tma[tensor] = _read_tma(e)
    return _Rules(
        _frozen(derived), _frozen(arguments), _frozen(limits), _frozen(views),
        _frozen(workspaces), _frozen(tma), flags,
    )


def _read_flags(entry: _Entry, derived: Mapping[str, Expr]) -> tuple[str, ...]:
    """``flags`` (optional): names of int32 0/1 scalars the call sets from its options."""
    flags = tuple(entry.take("flags", list, []))
    for name in flags:
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (*BASE_SCALARS, *derived):
            raise entry.fail("flags", f"has a bad or repeated scalar name {name!r}")
    if len(set(flags)) != len(flags):
        raise entry.fail("flags", f"repeats a name: {list(flags)}")
    return flags


VARIANT_FIELDS = (
    "name", "family", "key", "cubin", "sha256", "size", "build", "front", "min_driver", "m_aligned",
    "arguments", "scalars", "limits", "views", "workspaces", "kernels", "tma", *OPTIONAL_RULE_FIELDS,
)


IDENTITY_FIELDS = ("name", "family", "key", "cubin", "sha256", "size", "build", "front")


def _read_identity(
    data: Any, where: str, directory: Path, fronts: Mapping[str, FrontPolicy]
) -> tuple[_Entry, dict[str, Any]]:
    """A VARIANT entry's IDENTITY_FIELDS, checked, and its field names (none unknown, none
    missing): what selection, the front door's checks, the staleness rules and the cubin's
    integrity check read (``front``: the id of its family's policy among the manifest's
    ``fronts``, read). Returns the entry (its errors name the variant) and the fields."""
    entry = _Entry(data, where)
    name = entry.take("name", str)
    entry.where = f"{where} ('{name}')"
    entry.only(VARIANT_FIELDS[: -len(OPTIONAL_RULE_FIELDS)], OPTIONAL_RULE_FIELDS)
    cubin = entry.take("cubin", str)
    if os.path.basename(cubin) != cubin or cubin in ("", ".", ".."):
        raise entry.fail("cubin", f"must be a file name inside {directory}, got {cubin!r}")
    sha256 = entry.take("sha256", str)
    if not _SHA256.fullmatch(sha256):
        raise entry.fail("sha256", f"must be 64 lowercase hex digits, got {sha256!r}")
    return entry, {
        "name": name,
        "family": entry.name("family"),
        "key": _read_key(_Entry(entry.take("key", dict), f"{entry.where}, key")),
        "cubin": cubin,
        "sha256": sha256,
        "size": entry.positive("size"),
        "build": _read_build(_Entry(entry.take("build", dict), f"{entry.where}, build")),
        "front": _front_of(entry, fronts),
    }


def _front_of(entry: _Entry, fronts: Mapping[str, FrontPolicy]) -> FrontPolicy:
    """The policy an entry's ``front`` names: an id of ``fronts`` of the entry's family."""
    front_id = entry.take("front", str)
    if front_id not in fronts or not front_id.startswith(f"{entry.data['family']}/"):
        raise entry.fail("front", f"names {front_id!r}, which is no front policy of family "
                                  f"{entry.data['family']!r} in the manifest's fronts {sorted(fronts)}")
    return fronts[front_id]


_fronts: dict[str, FrontPolicy] = {}  # a front field's text (its order kept: check order) -> its policy


def _read_fronts(data: Mapping[str, Any], where: str) -> dict[str, FrontPolicy]:
    """A manifest's (or its index's) ``fronts``: policy id -> its policy, each checked."""
    fronts = {}
    for front_id, front in data.items():
        if not isinstance(front, dict):
            raise ManifestError(f"{where}.{front_id}: expected an object, got {_json_type(front)}")
        fronts[front_id] = _read_front(f"{where}.{front_id}", front)
    return fronts


def _read_front(where: str, data: dict[str, Any]) -> FrontPolicy:
    """An entry's front policy (dglu.contract.front): a family's entries share one, read
    and checked once per text (a bad one fails with the first entry's location). The text
    keeps the field's order: the order of its arguments is the order of their checks."""
    text = json.dumps(data)
    front = _fronts.get(text)
    if front is None:
        front = _fronts[text] = read_front(data, where, ELEMENT_TYPES)
    return front


def _read_rest(entry: _Entry, identity: Mapping[str, Any], directory: Path) -> Variant:
    """The Variant of an entry whose IDENTITY_FIELDS ``identity`` were read: the rest of
    its fields checked."""
    fields = {f: entry.data[f] for f in RULE_FIELDS}
    fields.update({f: entry.data[f] for f in OPTIONAL_RULE_FIELDS if f in entry.data})
    rules = _read_rules(_Entry(fields, entry.where))
    scalars = frozenset((*BASE_SCALARS, *rules.scalars, *rules.flags))
    kernels = entry.take("kernels", list)
    if not kernels:
        raise entry.fail("kernels", "must list at least one kernel")
    tensors = frozenset((*rules.arguments, *rules.views, *rules.workspaces))
    return Variant(
        **identity,
        min_driver=entry.positive("min_driver"),
        m_aligned=entry.positive("m_aligned"),
        arguments=rules.arguments,
        scalars=rules.scalars,
        limits=rules.limits,
        views=rules.views,
        workspaces=rules.workspaces,
        kernels=tuple(
            _read_kernel(
                _Entry(k, f"{entry.where}, kernels[{i}]"), scalars, tensors, frozenset(rules.tma)
            )
            for i, k in enumerate(kernels)
        ),
        tma=rules.tma,
        directory=directory,
        flags=rules.flags,
    )


def read_variant(data: Any, where: str, directory: Path, fronts: Mapping[str, FrontPolicy]) -> Variant:
    """One VARIANT entry, checked field by field (its front among ``fronts``, read); errors
    start with ``where``."""
    entry, identity = _read_identity(data, where, directory, fronts)
    return _read_rest(entry, identity, directory)


_ACT_PARAMS = tuple(KEY_FIELDS).index("act_params")


def _indexed_key(values: list[Any], act_params: list[tuple[tuple[str, float], ...]]) -> VariantKey:
    """An index record's key (its values in KEY_FIELDS' order, act_params by its place in
    ``act_params``, read), unchecked (the entry's key, read when the variant is used, must
    equal it)."""
    if len(values) != len(KEY_FIELDS):
        raise ValueError(f"a key of {len(values)} values, not {len(KEY_FIELDS)}")
    values = list(values)
    values[_ACT_PARAMS] = act_params[values[_ACT_PARAMS]]
    return tuple.__new__(VariantKey, values)


def _read_act_params(data: Any, where: str) -> tuple[tuple[str, float], ...]:
    """An index's act_params entry as a key holds it: sorted (name, value) pairs."""
    if not isinstance(data, dict) or not all(_is_json_type(v, float) for v in data.values()):
        raise ManifestError(f"{where}: expected an object of numbers, got {data!r}; {REWRITE_HINT}")
    return tuple(sorted((k, float(v)) for k, v in data.items()))


class VariantEntry:
    """A VARIANT entry read lazily: its IDENTITY_FIELDS (all that selecting a variant,
    telling a stale one and checking its cubin read) are read and checked at once,
    every other field only by ``variant()``, the first time the entry is used: a
    manifest of many variants costs one JSON parse and the checks of the variants a
    process runs. A bad field is refused then, with the message of a full read.

    ``indexed`` makes one from its record in the manifest's index: the entry itself is
    parsed (from its byte range of the manifest) by ``variant()``, and its identity must
    then equal the record's."""

    __slots__ = (*IDENTITY_FIELDS, "directory", "_entry", "_variant", "_where", "_source")

    def __init__(self, data: Any, where: str, directory: Path, fronts: Mapping[str, FrontPolicy]) -> None:
        self._entry, identity = _read_identity(data, where, directory, fronts)
        self._set(identity, where, directory)
        self._source: tuple[Path, Any, Any, Any, int, Mapping[str, FrontPolicy]] | None = None

    @classmethod
    def indexed(
        cls,
        record: Any,
        path: Path,
        directory: Path,
        act_params: list[tuple[tuple[str, float], ...]],
        builds: list[Build],
        fronts: Mapping[str, FrontPolicy],
    ) -> VariantEntry:
        """The entry of ``record`` (an index record, dglu.contract.index.RECORD_FIELDS) of
        the manifest at ``path`` (in ``directory``); ``act_params``, ``builds`` and
        ``fronts``: the index's, read. Only the record's layout is checked now (a
        ValueError, TypeError, KeyError, IndexError or AttributeError when it is not a
        record: parse_indexed names it): its fields are checked by ``variant()``, the first
        time the variant is used, as the entry's own (which they must equal)."""
        self = cls.__new__(cls)
        name, family, key, cubin, sha256, size, build, front, start, end, crc32, position = record
        if type(name) is not str or type(position) is not int:
            raise TypeError(f"name {name!r} is no string or position {position!r} no integer")
        self.key, self.build, self.front = _indexed_key(key, act_params), builds[build], fronts[front]
        self.name, self.family, self.cubin, self.sha256, self.size = name, family, cubin, sha256, size
        self.directory, self._where, self._variant, self._entry = directory, None, None, None
        self._source = (path, start, end, crc32, position, fronts)
        return self

    def _set(self, identity: Mapping[str, Any], where: str, directory: Path) -> None:
        for name, value in identity.items():
            setattr(self, name, value)
        self.directory = directory
        self._where = where
        self._variant: Variant | None = None

    @property
    def cubin_path(self) -> Path:
        """The cubin file of this variant."""
        return self.directory / self.cubin

    def variant(self) -> Variant:
        """The entry fully read and checked (once; ManifestError on a bad field, and
        again on every later use)."""
        if self._variant is None:
            identity = {name: getattr(self, name) for name in IDENTITY_FIELDS}
            if self._entry is None:
                self._entry = self._read_indexed_entry(identity)
            self._variant = _read_rest(self._entry, identity, self.directory)
        return self._variant

    def _read_indexed_entry(self, identity: Mapping[str, Any]) -> _Entry:
        """The entry this index record points at (its bytes must have the record's CRC-32),
        checked as a full read checks it, and its identity against the record's."""
        manifest, start, end, crc32, position, fronts = self._source
        self._where = f"{manifest}: variants[{position}]"
        raw = read_entry(manifest, start, end, crc32)
        if raw is None:
            raise ManifestError(
                f"{self.directory / INDEX_FILE}: the record of {self.name!r} names no byte range "
                f"of {MANIFEST_FILE} with its CRC-32 (bytes {start!r}..{end!r}, CRC-32 {crc32!r}); "
                f"{REWRITE_HINT}"
            )
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{self._where}: not valid JSON at its index's byte range: {exc}") from exc
        entry, found = _read_identity(data, self._where, self.directory, fronts)
        differ = sorted(name for name in IDENTITY_FIELDS if found[name] != identity[name])
        if differ:
            raise ManifestError(
                f"{entry.where}: fields {differ} differ from {self.directory / INDEX_FILE}'s "
                f"record of the variant; {REWRITE_HINT}"
            )
        return entry

    def __repr__(self) -> str:
        return f"VariantEntry({self.name!r}, directory={str(self.directory)!r})"


def full_variant(variant: Variant | VariantEntry) -> Variant:
    """The Variant of ``variant``, read in full now if it was read lazily."""
    return variant.variant() if isinstance(variant, VariantEntry) else variant


def parse_manifest(data: Any, path: Path, lazy: bool = False) -> Manifest:
    """A manifest's parsed JSON ``data`` (read from ``path``), checked; with ``lazy``,
    each variant as a VariantEntry (only its identity fields checked now)."""
    top = _Entry(data, str(path))
    _check_schema_version(top.data.get("schema_version"), "schema_version" in top.data, path)
    top.only(("schema_version", "fronts", "variants"))
    fronts = _read_fronts(top.take("fronts", dict), f"{path}: fronts")
    read = VariantEntry if lazy else read_variant
    variants = tuple(
        read(v, f"{path}: variants[{i}]", path.parent, fronts)
        for i, v in enumerate(top.take("variants", list))
    )
    _names_once(variants, path)
    return Manifest(path=path, variants=variants)


def _check_schema_version(version: Any, given: bool, path: Path) -> None:
    if version != SCHEMA_VERSION or type(version) is not int:
        shown = f"schema_version {version!r}" if given else "no schema_version"
        raise ManifestError(
            f"{path}: {shown}, but this dglu reads schema_version {SCHEMA_VERSION}; "
            f"{REBUILD_HINT}"
        )


def _names_once(variants: tuple[Any, ...], path: Path) -> None:
    counts = Counter(v.name for v in variants)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise ManifestError(f"{path}: variant names listed more than once: {duplicates}")


def parse_indexed(index: Index, path: Path, arch: str | None = None) -> Manifest:
    """The manifest at ``path`` from its ``index`` (only ``arch``'s variants when given: the
    other architectures' records are not parsed), each variant a VariantEntry whose record
    is checked, and whose entry is read, when it is used."""
    _check_schema_version(index.schema_version, True, path)
    where = f"{path.parent / INDEX_FILE}"
    fronts = _read_fronts(index.fronts, f"{where}: fronts")
    act_params = [_read_act_params(data, f"{where}: act_params[{i}]") for i, data in enumerate(index.act_params)]
    builds = [_read_build(_Entry(data, f"{where}: builds[{i}]")) for i, data in enumerate(index.builds)]
    variants, directory, records = [], path.parent, index_records(index, arch)
    for i, (group, record) in enumerate(records):
        try:
            variants.append(VariantEntry.indexed(record, path, directory, act_params, builds, fronts))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            place = sum(other == group for other, _ in records[:i])  # its place among its group's
            raise ManifestError(
                f"{where}: records of {group}[{place}]: not a record of index_format {INDEX_FORMAT} "
                f"({type(exc).__name__}: {exc}); {REWRITE_HINT}"
            ) from None
    _names_once(tuple(variants), path)
    return Manifest(path=path, variants=tuple(variants))


def read_manifest(directory: Path | str, lazy: bool = False, arch: str | None = None) -> Manifest:
    """Parse ``directory/manifest.json``; errors name the file, entry and field. With
    ``lazy`` (the runtime's way), a variant's fields past its identity are checked when
    it is used (VariantEntry), and a matching index (dglu.contract.index) is read instead
    of the whole manifest. With ``arch``, only that architecture's variants (from an index,
    only its records are parsed)."""
    path = Path(directory) / MANIFEST_FILE
    if lazy:
        index = read_index(Path(directory))
        if index is not None:
            return parse_indexed(index, path, arch)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON: {exc}") from exc
    manifest = parse_manifest(data, path, lazy)
    if arch is None:
        return manifest
    return Manifest(path=path, variants=tuple(v for v in manifest.variants if v.key.arch == arch))
