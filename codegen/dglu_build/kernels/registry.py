"""Find the kernel families: every subpackage of dglu_build.kernels that defines
``FAMILY`` (a KernelFamily instance), and every entry point of the group
``dglu_build.families`` (a family another distribution provides), by name.

Importing a family's package must not import CuTe DSL: only its ``compile`` may.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import pkgutil
from collections.abc import Mapping
from typing import Any

from .family import KERNELS_DIR, KernelFamily

ENTRY_POINT_GROUP = "dglu_build.families"


def _package_families() -> list[KernelFamily]:
    found = []
    for module in pkgutil.iter_modules([str(KERNELS_DIR)]):
        if module.ispkg:
            family = getattr(importlib.import_module(f"{__package__}.{module.name}"), "FAMILY", None)
            if family is not None:
                found.append(family)
    return found


def _entry_point_families() -> list[KernelFamily]:
    return [point.load() for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]


@functools.cache
def families() -> Mapping[str, KernelFamily]:
    """Every family, by name (in name order); TypeError for a plugin that is no
    KernelFamily, ValueError for two of one name."""
    table: dict[str, KernelFamily] = {}
    for family in [*_package_families(), *_entry_point_families()]:
        if not isinstance(family, KernelFamily):
            raise TypeError(f"kernel family plugin {family!r} is not a dglu_build.kernels.family.KernelFamily")
        if family.name in table and table[family.name] is not family:
            raise ValueError(f"two kernel families are named {family.name!r}")
        table[family.name] = family
    return dict(sorted(table.items()))


def family_of(arch: str, ab_dtype: str) -> KernelFamily | None:
    """The family that builds keys of this architecture and operand dtype, if any."""
    return next((f for f in families().values() if f.matches(arch, ab_dtype)), None)


def family_for(key: Mapping[str, Any]) -> KernelFamily:
    """The family of a key; ValueError naming arch and ab_dtype when none builds them."""
    family = family_of(key["arch"], key["ab_dtype"])
    if family is None:
        supported = [(arch, ab) for f in families().values() for arch in f.allowed["arch"] for ab in f.allowed["ab_dtype"]]
        raise ValueError(
            f"arch, ab_dtype: no kernel family builds ({key['arch']!r}, {key['ab_dtype']!r}); supported: {supported}"
        )
    return family
