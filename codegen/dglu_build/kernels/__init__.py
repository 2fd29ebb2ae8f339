"""Kernel families of dglu and their ahead-of-time compilation.

``check_variant(key)`` says, without CuTe DSL, whether a variant key (a normalised spec
entry, see kernel_specs/) can be built: its family (``dglu.contract.keys.FAMILIES``)
allows each field's value, and the family's own feasibility rules (e.g. the shared-memory
budget) accept the combination. ``compile_variant(key, symbol_prefix)`` compiles it for
its architecture with no GPU present and returns the cubin plus the manifest fields the
family declares for it (docs/manifest.md). Building blocks shared by families are in
``blocks/``; each family is a subpackage (``sm90_bf16/``, ``sm90_mxfp8/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from dglu.contract.keys import ACT_PARAM_DEFAULTS, FAMILIES, JOINT_FIELDS, KEY_FIELD_DEFAULTS, Family, family_of

from . import sm90_bf16, sm90_mxfp8

FAMILY_MODULES: dict[str, ModuleType] = {sm90_bf16.NAME: sm90_bf16, sm90_mxfp8.NAME: sm90_mxfp8}


@dataclass(frozen=True)
class CompiledVariant:
    """A variant's cubin and its manifest fields: family, m_aligned, arguments, scalars,
    limits, views, workspaces, kernels and tma (the build adds the rest)."""

    cubin: bytes
    entry: dict[str, Any]


def _family(key: Mapping[str, Any]) -> Family:
    family = family_of(key["arch"], key["ab_dtype"])
    if family is None:
        supported = [(arch, ab) for f in FAMILIES.values() for arch in f.allowed["arch"] for ab in f.allowed["ab_dtype"]]
        raise ValueError(
            f"arch, ab_dtype: no kernel family builds ({key['arch']!r}, {key['ab_dtype']!r}); supported: {supported}"
        )
    return family


def _check_allowed(family: Family, key: Mapping[str, Any]) -> None:
    for field, allowed in family.allowed.items():
        names = JOINT_FIELDS.get(field, (field,))
        value = tuple(key[name] for name in names) if len(names) > 1 else key[field]
        if value not in allowed:
            raise ValueError(
                f"{', '.join(names)}: family {family.name} does not build {value!r}; allowed: {list(allowed)}"
            )
    expected = set(ACT_PARAM_DEFAULTS[key["act_func"]])
    given = set(key.get("act_params") or {})
    if given != expected:
        raise ValueError(f"act_params: {key['act_func']} takes {sorted(expected)}, got {sorted(given)}")


def check_variant(key: Mapping[str, Any]) -> None:
    """Raise ValueError naming the field(s) if no kernel can build this key; compiles nothing.
    Fields of KEY_FIELD_DEFAULTS that the key leaves out take their defaults."""
    key = {**KEY_FIELD_DEFAULTS, **key}
    family = _family(key)
    _check_allowed(family, key)
    FAMILY_MODULES[family.name].check(key)


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> CompiledVariant:
    """Compile one normalised variant; ``symbol_prefix`` names its kernels."""
    check_variant(key)
    cubin, entry = FAMILY_MODULES[_family(key).name].compile_variant(key, symbol_prefix)
    return CompiledVariant(cubin=cubin, entry=entry)


__all__ = ["CompiledVariant", "check_variant", "compile_variant"]
