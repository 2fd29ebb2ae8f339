"""What a kernel family is to the build: one pluggable unit (docs/manifest.md, "family").

A family names itself and the architectures it builds, allows a set of values per key
field (``allowed``: a field, or a joint name of ``dglu.contract.keys.JOINT_FIELDS``, to a
tuple of values), checks a key's combination (``check``) and declares the manifest fields
that need no compile (``declare``), all without CuTe DSL. ``compile`` builds one variant
into a cubin and its manifest fields (it may import the DSL). ``sources`` names every file
the family's cubins are built from, by path and sha256 (for a kernel imported from
another distribution: the distribution, its version and its files' hashes): they enter
the variant's build key, so a changed source rebuilds exactly its family's variants.
Families are found by ``dglu_build.kernels.registry``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from dglu.contract import element_types
from dglu.contract.keys import ACT_PARAM_DEFAULTS, JOINT_FIELDS

KERNELS_DIR = Path(__file__).resolve().parent
# the contract's element-type table: every family's kernels take their element sizes and
# CuTe DSL types from it (dglu_build.kernels.dtypes), so it is one of their sources
ELEMENT_TABLE = Path(element_types.__file__).resolve()


def file_hashes(paths: Iterable[Path], root: Path) -> dict[str, str]:
    """sha256 of each file, keyed by its path relative to ``root``."""
    return {path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(paths)}


def package_sources(*directories: Path) -> dict[str, str]:
    """The Python files under ``directories`` (recursively), the shared modules directly
    under kernels/ (aot.py, declaration.py, family.py, ...) and the contract's element-type
    table (as dglu/contract/element_types.py), by path and sha256."""
    files = {*KERNELS_DIR.glob("*.py")}
    for directory in directories:
        files.update(directory.rglob("*.py"))
    return {**file_hashes(files, KERNELS_DIR), **file_hashes([ELEMENT_TABLE], ELEMENT_TABLE.parents[2])}


class KernelFamily(ABC):
    """One kernel family; subclasses set the class attributes and implement the methods."""

    name: ClassVar[str]
    architectures: ClassVar[tuple[str, ...]]
    allowed: ClassVar[Mapping[str, tuple[Any, ...]]]  # includes "arch" and "ab_dtype"

    def matches(self, arch: str, ab_dtype: str) -> bool:
        """True when a key of this architecture and operand dtype belongs to the family."""
        return arch in self.allowed["arch"] and ab_dtype in self.allowed["ab_dtype"]

    def check_allowed(self, key: Mapping[str, Any]) -> None:
        """ValueError naming the field(s) whose value the family does not allow."""
        for field, allowed in self.allowed.items():
            names = JOINT_FIELDS.get(field, (field,))
            value = tuple(key[name] for name in names) if len(names) > 1 else key[field]
            if value not in allowed:
                raise ValueError(f"{', '.join(names)}: family {self.name} does not build {value!r}; allowed: {list(allowed)}")
        expected = set(ACT_PARAM_DEFAULTS[key["act_func"]])
        given = set(key.get("act_params") or {})
        if given != expected:
            raise ValueError(f"act_params: {key['act_func']} takes {sorted(expected)}, got {sorted(given)}")

    @abstractmethod
    def check(self, key: Mapping[str, Any]) -> None:
        """Raise ValueError naming the field(s) if the family's kernels cannot build this
        (allowed) key; pure Python."""

    @abstractmethod
    def declare(self, key: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest fields of the variant that need no compile (all but ``kernels``
        and ``family``); pure Python."""

    @abstractmethod
    def compile(self, key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict[str, Any]]:
        """The variant's cubin and its manifest fields (``declare``'s, ``family`` and
        ``kernels``); ``symbol_prefix`` names its kernels."""

    @abstractmethod
    def sources(self) -> dict[str, str]:
        """What the family's cubins are built from: path (or distribution field) -> sha256
        (or value); pure Python, imports no kernel code."""

    def local_frame_bytes(self, key: Mapping[str, Any], role: str) -> int:
        """The stack frame (local memory) ptxas gives the kernel ``role`` of a key for a
        local array its PTX declares: no spills (the compile tier allows this much, 0 for
        every kernel of dglu's own)."""
        return 0

    def notices(self) -> dict[str, bytes]:
        """License texts the family's cubins must ship with, by relative file name (none
        for dglu's own kernels; the license of the source a kernel was built from)."""
        return {}

    def sources_hash(self) -> str:
        """sha256 over ``sources()``: the family's part of a variant's build key."""
        return hashlib.sha256(json.dumps(self.sources(), sort_keys=True).encode()).hexdigest()


class PackagedFamily(KernelFamily):
    """A family laid out as dglu's families are: a ``Config`` (config.py) whose ``from_key``
    checks a key, an ``interface`` module (interface.py) whose ``entry(config)`` declares it,
    and compile.py's ``compile_variant(key, symbol_prefix)``, imported only to compile."""

    config: ClassVar[type]
    interface: ClassVar[ModuleType]

    def check(self, key: Mapping[str, Any]) -> None:
        self.config.from_key(key)

    def declare(self, key: Mapping[str, Any]) -> dict[str, Any]:
        return self.interface.entry(self.config.from_key(key))

    def compile(self, key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict[str, Any]]:
        compile_module = importlib.import_module(".compile", type(self).__module__)
        return compile_module.compile_variant(key, symbol_prefix)
