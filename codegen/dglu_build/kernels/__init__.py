"""Kernel families of dglu and their ahead-of-time compilation.

``check_variant(key)`` says, without CuTe DSL, whether a variant key (a normalised spec
entry, see kernel_specs/) can be built: its family (found by ``registry``) allows each
field's value, and the family's own feasibility rules (e.g. the shared-memory budget)
accept the combination. ``compile_variant(key, symbol_prefix)`` compiles it for its
architecture with no GPU present and returns the cubin plus the manifest fields the
family declares for it (docs/manifest.md). What a family is: ``family.KernelFamily``.
Building blocks shared by families are in ``blocks/``; each family is a subpackage
(``sm90_bf16/``, ``sm90_mxfp8/``, ``sm100_bf16/``) defining ``FAMILY``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dglu.contract.keys import KEY_FIELD_DEFAULTS

from .registry import family_for


@dataclass(frozen=True)
class CompiledVariant:
    """A variant's cubin and its manifest fields: family, m_aligned, arguments, scalars,
    limits, views, workspaces, kernels and tma (the build adds the rest)."""

    cubin: bytes
    entry: dict[str, Any]


def check_variant(key: Mapping[str, Any]) -> None:
    """Raise ValueError naming the field(s) if no kernel can build this key; compiles nothing.
    Fields of KEY_FIELD_DEFAULTS that the key leaves out take their defaults."""
    key = {**KEY_FIELD_DEFAULTS, **key}
    family = family_for(key)
    family.check_allowed(key)
    family.check(key)


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> CompiledVariant:
    """Compile one normalised variant; ``symbol_prefix`` names its kernels."""
    check_variant(key)
    cubin, entry = family_for(key).compile(key, symbol_prefix)
    return CompiledVariant(cubin=cubin, entry=entry)


__all__ = ["CompiledVariant", "check_variant", "compile_variant"]
