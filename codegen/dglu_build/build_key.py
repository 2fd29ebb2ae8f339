"""The content hash that decides whether a built variant is up to date.

A variant's build key hashes everything its cubin and manifest entry depend
on: the variant's fields, the dglu version (the runtime's ``__version__``, which
the entry records), its kernel family's sources (``KernelFamily.sources()``: the
family's own files and the shared ones it builds on, and for a kernel imported from
another distribution that distribution's name, version and file hashes), the toolchain (the installed CuTe DSL distributions and
the Python version the manifest records), and the compile options (the
manifest schema and symbol prefix the build writes, and every
``CUTE_DSL_*`` / ``CUTE_EXPERIMENTAL_DSL_*`` environment variable: some of
them change what the DSL emits, e.g. CUTE_DSL_LINEINFO or
CUTE_DSL_COMPILER_OPT, and telling those apart would need the DSL itself).
Computing it imports no CuTe DSL (nor any family's kernel code), and reads the dglu
version without importing dglu.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dglu.contract.schema import SCHEMA_VERSION
from dglu_build.kernels.registry import families, family_for

# The builder's own settings that shape a variant's cubin and entry.
SYMBOL_PREFIX = "dglu_"
BUILDER_OPTIONS = {"schema_version": SCHEMA_VERSION, "symbol_prefix": SYMBOL_PREFIX}
DSL_DISTRIBUTION_PREFIX = "nvidia-cutlass-dsl"
DSL_ENV_PREFIXES = ("CUTE_DSL_", "CUTE_EXPERIMENTAL_DSL_")


@dataclass(frozen=True)
class BuildInputs:
    """What every variant of one build shares; see the module docstring."""

    dglu_version: str
    family_sources: dict[str, str]  # family name -> sha256 over its sources()
    toolchain: dict[str, str]
    compile_options: dict[str, Any]

    def sources_of(self, variant_key: dict[str, Any]) -> str:
        """The sources hash of the variant's family (its manifest ``build.source_hash``)."""
        return self.family_sources[family_for(variant_key).name]

    def key_for(self, variant_key: dict[str, Any]) -> str:
        """The build key (sha256 hex) of the variant with manifest key ``variant_key``."""
        content = {
            "variant": variant_key,
            "dglu_version": self.dglu_version,
            "kernel_sources": self.sources_of(variant_key),
            "toolchain": self.toolchain,
            "compile_options": self.compile_options,
        }
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def current_build_inputs() -> BuildInputs:
    """The inputs of a build run now, here."""
    return BuildInputs(
        dglu_version=dglu_version(),
        family_sources={name: family.sources_hash() for name, family in families().items()},
        toolchain={**dsl_versions(), "python": platform.python_version()},
        compile_options={
            **BUILDER_OPTIONS,
            "env": {name: value for name, value in sorted(os.environ.items()) if name.startswith(DSL_ENV_PREFIXES)},
        },
    )


_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def dglu_version() -> str:
    """The ``__version__`` of the dglu package next to this one, read from its source
    (importing dglu would run its package code)."""
    spec = importlib.util.find_spec("dglu")
    if spec is None or spec.origin is None:
        raise RuntimeError("dglu-build needs the dglu package (runtime/dglu) importable next to it")
    match = _VERSION_LINE.search(Path(spec.origin).read_text())
    if match is None:
        raise RuntimeError(f"{spec.origin}: no __version__ = '...' line")
    return match[1]


def dsl_versions() -> dict[str, str]:
    """Version of each installed CuTe DSL distribution (the DSL and its bundled compiler libraries)."""
    versions = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name.startswith(DSL_DISTRIBUTION_PREFIX):
            versions[name] = dist.version
    return dict(sorted(versions.items()))
