"""Kernel variant specs: the YAML schema, its validation and expansion.

A spec file is a mapping with an optional ``defaults:`` mapping, a
``variants:`` list and an optional ``dispatch:`` list (the measured rules that choose a
call's launch shape when it leaves it open: dglu.contract.dispatch; the build writes them
into the artifact directory's dispatch.json). Each entry of ``variants`` is merged over ``defaults``;
any field given as a list stands for each of its values, and an entry
expands to the cartesian product of its lists. After expansion every
variant has all of the contract's key fields (``dglu.contract.keys``; those of
``KEY_FIELD_DEFAULTS``, e.g. ``deterministic``, take their default when omitted), each
of the right type and among the values its kernel family allows
(``dglu_build.kernels.registry``), and the
family's kernels can build the combination (``dglu_build.kernels.check_variant``,
pure Python); duplicates are rejected. Every error names the file, the entry
(index and line) and the field. YAML is read strictly (see
``dglu_build.yaml_strict``): ``yes``/``on`` are strings here, not booleans.
Nothing here imports CuTe DSL: spec files validate where only the wheel is installed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from dglu.contract.dispatch import DispatchRule, read_rule
from dglu.contract.errors import ManifestError
from dglu.contract.keys import ACT_PARAM_DEFAULTS, JOINT_FIELDS, KEY_FIELD_DEFAULTS, KEY_FIELDS, variant_name
from dglu.contract.schema import VariantKey
from dglu_build.kernels.family import KernelFamily
from dglu_build.kernels.registry import families, family_of
from dglu_build.yaml_strict import StrictLoader

_TYPE_NAMES = {str: "a string", bool: "a boolean (true or false)", int: "an integer", dict: "a mapping"}

TOP_LEVEL_KEYS = ("defaults", "variants", "dispatch")


class SpecError(ValueError):
    """A spec file that cannot be turned into variants."""


class Variant(VariantKey):
    """One kernel variant: the normalised fields of an expanded spec entry (the runtime's
    VariantKey, so the key's fields are written down once)."""

    __slots__ = ()

    @property
    def key(self) -> dict[str, Any]:
        """The variant's fields as the manifest's ``key`` mapping."""
        return self.as_dict()

    @property
    def name(self) -> str:
        """A readable, filesystem-safe name, unique per key (it also names the kernel symbols)."""
        return variant_name(self.key)


def load_specs(path: str | Path) -> list[Variant]:
    """Read, validate and expand the spec file at ``path``."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise SpecError(f"{path}: cannot read spec file: {err.strerror}") from None
    return parse_specs(text, str(path))


def parse_specs(text: str, source: str = "<spec>") -> list[Variant]:
    """Validate and expand spec ``text``; ``source`` names it in errors."""
    root_node, data = _load_yaml(text, source)
    if not isinstance(data, dict):
        raise SpecError(f"{source}: needs a mapping with keys {list(TOP_LEVEL_KEYS)}, got {_describe(data)}")
    unknown = [key for key in data if key not in TOP_LEVEL_KEYS]
    if unknown:
        raise SpecError(f"{source}: unknown top-level key {unknown[0]!r}; allowed: {', '.join(TOP_LEVEL_KEYS)}")
    lines = _top_level_lines(root_node)

    defaults = data.get("defaults", {})
    where = f"{source}: defaults (line {lines.get('defaults', '?')})"
    if not isinstance(defaults, dict):
        raise SpecError(f"{where}: needs a mapping of fields, got {_describe(defaults)}")
    _check_fields(defaults, where)

    entries = data.get("variants")
    if not isinstance(entries, list) or not entries:
        raise SpecError(f"{source}: 'variants' needs a non-empty list of entries, got {_describe(entries)}")

    variants: dict[str, tuple[Variant, str]] = {}  # name -> (variant, the entry that gave it)
    for index, entry in enumerate(entries):
        label = f"variants[{index}] (line {lines['entries'][index]})"
        where = f"{source}: {label}"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: needs a mapping of fields, got {_describe(entry)}")
        for variant in expand_fields({**defaults, **entry}, where):
            if variant.name in variants:
                known, known_label = variants[variant.name]
                problem = "duplicate variant" if known == variant else "variant name collision:"
                raise SpecError(f"{where}: {problem} {variant.name}, already given by {known_label}")
            variants[variant.name] = (variant, label)
    return [variant for variant, _ in variants.values()]


def load_spec_files(paths: Sequence[str | Path]) -> list[Variant]:
    """The variants of every spec file in ``paths``; a variant listed by several files counts once."""
    variants: dict[str, tuple[Variant, Path]] = {}
    for path in map(Path, paths):
        for variant in load_specs(path):
            known, known_path = variants.setdefault(variant.name, (variant, path))
            if known != variant:
                raise SpecError(f"{path}: variant name collision: {variant.name}, also given differently by {known_path}")
    return [variant for variant, _ in variants.values()]


def load_dispatch_files(paths: Sequence[str | Path], variants: Sequence[Variant]) -> list[DispatchRule]:
    """The ``dispatch:`` rules of the spec files in ``paths``, in order; SpecError when a
    rule is malformed or chooses a launch shape that none of ``variants`` (the files'
    variants) of its architecture has."""
    rules = []
    for path in map(Path, paths):
        _, data = _load_yaml(path.read_text(), str(path))
        entries = data.get("dispatch", []) if isinstance(data, dict) else []
        if not isinstance(entries, list):
            raise SpecError(f"{path}: 'dispatch' needs a list of rules, got {_describe(entries)}")
        for index, entry in enumerate(entries):
            where = f"{path}: dispatch[{index}]"
            try:
                rule = read_rule(entry, where)
            except ManifestError as err:
                raise SpecError(str(err)) from None
            if not any(_chooses(rule, variant) for variant in variants):
                raise SpecError(f"{where}: chooses {dict(rule.choose)} on {rule.arch}, which no variant of the spec files has")
            rules.append(rule)
    return rules


def _chooses(rule: DispatchRule, variant: Variant) -> bool:
    key = variant.key
    return key["arch"] == rule.arch and all(key[field] == value for field, value in rule.choose)


def expand_fields(fields: dict, where: str) -> list[Variant]:
    """Validate one entry's ``fields`` (lists allowed) and expand them into variants.

    This is the schema's one gate: spec files and command-line entries pass
    through it before any value reaches a variant name, a file or a compiler.
    """
    _check_fields(fields, where)
    return [_normalise(combo, where) for combo in _expand({**KEY_FIELD_DEFAULTS, **fields}, where)]


def _load_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    loader = StrictLoader(text)
    loader.name = source  # named in the marks of YAML errors
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    except yaml.YAMLError as err:
        raise SpecError(f"{source}: invalid YAML: {err}") from None
    finally:
        loader.dispose()


def _top_level_lines(root: yaml.MappingNode) -> dict[str, Any]:
    """1-based lines of ``defaults`` and of each ``variants`` entry."""
    lines: dict[str, Any] = {"entries": []}
    for key_node, value_node in root.value:
        if key_node.value == "defaults":
            lines["defaults"] = key_node.start_mark.line + 1
        elif key_node.value == "variants" and isinstance(value_node, yaml.SequenceNode):
            lines["entries"] = [item.start_mark.line + 1 for item in value_node.value]
    return lines


def _check_fields(fields: dict, where: str) -> None:
    """Reject unknown field names and values of the wrong type."""
    for name, value in fields.items():
        if name not in KEY_FIELDS:
            raise SpecError(f"{where}: unknown field {name!r}; allowed: {', '.join(KEY_FIELDS)}")
        for item in value if isinstance(value, list) else [value]:
            _check_type(name, item, where)
        if value == []:
            raise SpecError(f"{where}: field {name!r}: empty list, needs at least one value")


def _check_type(name: str, value: Any, where: str) -> None:
    wanted = KEY_FIELDS[name]
    # bool is a subclass of int: check the exact type.
    if type(value) is not wanted:
        hint = " (quote it if you meant a string)" if isinstance(value, (bool, int, float)) and wanted is str else ""
        raise SpecError(f"{where}: field {name!r}: got {_describe(value)}, needs {_TYPE_NAMES[wanted]}{hint}")


def _expand(fields: dict, where: str) -> list[dict]:
    """The cartesian product over list-valued fields, in ``KEY_FIELDS`` order."""
    missing = [name for name in KEY_FIELDS if name not in fields and name != "act_params"]
    if missing:
        raise SpecError(f"{where}: missing field(s) {', '.join(missing)} (give them in the entry or in defaults)")
    names = [name for name in KEY_FIELDS if name in fields]
    choices = [fields[name] if isinstance(fields[name], list) else [fields[name]] for name in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def _normalise(fields: dict, where: str) -> Variant:
    """Check one expanded variant against its family's allowed values and fill in act_params."""
    family = _family(fields, where)
    for table_key, allowed in family.allowed.items():
        names = JOINT_FIELDS.get(table_key, (table_key,))
        value = tuple(fields[name] for name in names) if len(names) > 1 else fields[table_key]
        if value not in allowed:
            label = f"fields ({', '.join(names)})" if len(names) > 1 else f"field {table_key!r}"
            raise SpecError(f"{where}: {label}: got {_format_value(value)}, allowed: {_format_values(allowed)}")
    params = _normalise_act_params(fields["act_func"], fields.get("act_params", {}), where)
    variant = Variant(**{**fields, "act_params": params})
    try:
        check_buildable(variant.key)
    except ValueError as err:
        raise SpecError(f"{where}: {variant.name}: {err}") from None
    return variant


def _family(fields: dict, where: str) -> KernelFamily:
    """The kernel family of the variant's arch and ab_dtype; SpecError naming the field that has none."""
    family = family_of(fields["arch"], fields["ab_dtype"])
    if family is not None:
        return family
    archs = _union(f.allowed["arch"] for f in families().values())
    if fields["arch"] not in archs:
        raise SpecError(f"{where}: field 'arch': got {_format_value(fields['arch'])}, allowed: {_format_values(archs)}")
    ab_dtypes = _union(f.allowed["ab_dtype"] for f in families().values() if fields["arch"] in f.allowed["arch"])
    raise SpecError(
        f"{where}: field 'ab_dtype': got {_format_value(fields['ab_dtype'])}, "
        f"allowed with arch {fields['arch']!r}: {_format_values(ab_dtypes)}"
    )


def _union(groups) -> tuple:
    """The values of ``groups`` in order of first appearance."""
    return tuple(dict.fromkeys(value for group in groups for value in group))


def check_buildable(key: dict[str, Any]) -> None:
    """ValueError when the kernels cannot build ``key`` (pure Python: nothing is compiled)."""
    from dglu_build.kernels import check_variant

    check_variant(key)


def _normalise_act_params(act_func: str, given: dict, where: str) -> tuple[tuple[str, float], ...]:
    defaults = ACT_PARAM_DEFAULTS[act_func]
    for name, value in given.items():
        if name not in defaults:
            allowed = ", ".join(defaults) if defaults else "none"
            raise SpecError(f"{where}: field 'act_params': unknown parameter {name!r} for {act_func}; allowed: {allowed}")
        if type(value) not in (int, float) or not math.isfinite(value):
            raise SpecError(f"{where}: field 'act_params': {name}: got {_describe(value)}, needs a finite number")
    params = {name: float(given.get(name, default)) for name, default in defaults.items()}
    if act_func == "dgeglu" and not params["glu_clamp_min"] < params["glu_clamp_max"]:
        raise SpecError(
            f"{where}: field 'act_params': glu_clamp_min ({params['glu_clamp_min']}) "
            f"must be below glu_clamp_max ({params['glu_clamp_max']})"
        )
    return tuple(params.items())


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "(" + ", ".join(_format_value(item) for item in value) + ")"
    return repr(value) if isinstance(value, str) else str(value)


def _format_values(values: Sequence[Any]) -> str:
    return ", ".join(_format_value(item) for item in values)


_KIND_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string", list: "list", dict: "mapping"}


def _describe(value: Any) -> str:
    """E.g. ``integer 96``, ``string 'yes'``, ``a list``, ``null``."""
    if value is None:
        return "null"
    kind = _KIND_NAMES.get(type(value), type(value).__name__)
    return f"a {kind}" if isinstance(value, (list, dict)) else f"{kind} {_format_value(value)}"
