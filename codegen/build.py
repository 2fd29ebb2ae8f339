"""Compile variants into an artifact directory: one cubin each + manifest.json.

The directory's format is docs/manifest.md. Every variant is compiled and
checked against its own cubin before anything is written; then the cubins
are written and the manifest last, each file atomically, so a reader never
sees a manifest that points at missing or different cubins.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from codegen.abi_check import check_kernels, check_tma_rules
from codegen.atomic_write import write_atomic
from codegen.cubin_info import CubinError, read_cubin
from codegen.kernels import compile_variant
from codegen.specs import Variant

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
SYMBOL_PREFIX = "dglu_"


class BuildError(RuntimeError):
    """A variant whose compiled output cannot go into an artifact directory."""


def build_artifacts(
    variants: Sequence[Variant],
    out_dir: str | Path,
    progress: Callable[[str], None] | None = None,
    compile_fn: Callable[[dict, str], Any] = compile_variant,
) -> dict:
    """Compile ``variants`` into ``out_dir``; return the manifest written.

    ``progress`` receives one line per variant (default: stderr);
    ``compile_fn(key, symbol_prefix)`` returns an object with ``cubin``,
    ``kernels`` and ``tma`` (see codegen.kernels.compile_variant).
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BuildError(f"out_dir: {out_dir} exists and is not a directory")
    if not variants:
        raise BuildError("variants: got none, need at least one to build")
    report = progress or _print_to_stderr

    ordered = sorted(variants, key=lambda variant: variant.name)
    compiled = []
    for done, variant in enumerate(ordered, start=1):
        start = time.monotonic()
        compiled.append(_compile_checked(variant, compile_fn))
        report(f"[{done}/{len(ordered)}] {variant.name} {time.monotonic() - start:.1f}s")

    manifest = {
        "schema_version": SCHEMA_VERSION,
        "toolchain": _toolchain(ptxas={toolkit for _, _, toolkit in compiled}),
        "variants": [entry for entry, _, _ in compiled],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    for entry, cubin, _ in compiled:
        write_atomic(out_dir / entry["cubin"], cubin)
    write_atomic(out_dir / MANIFEST_NAME, (json.dumps(manifest, indent=2) + "\n").encode())
    return manifest


def _compile_checked(variant: Variant, compile_fn: Callable[[dict, str], Any]) -> tuple[dict, bytes, str]:
    """(manifest entry, cubin bytes, ptxas toolkit) of one variant, checked."""
    name = variant.name
    result = compile_fn(variant.key, SYMBOL_PREFIX + name)
    cubin = result.cubin
    try:
        info = read_cubin(cubin)
    except CubinError as err:
        raise BuildError(f"variant {name}: the compiled cubin is unreadable: {err}") from None
    arch_sm = int("".join(ch for ch in variant.arch if ch.isdigit()))
    if info.sm != arch_sm:
        raise BuildError(f"variant {name}: cubin is for sm_{info.sm}, the variant's arch is {variant.arch}")
    check_kernels(result.kernels, info, f"variant {name}")
    check_tma_rules(result.kernels, result.tma, f"variant {name}")
    entry = {
        "name": name,
        "key": variant.key,
        "cubin": f"{name}.cubin",
        "sha256": hashlib.sha256(cubin).hexdigest(),
        "size": len(cubin),
        "kernels": result.kernels,
        "tma": result.tma,
    }
    return entry, cubin, info.toolkit


def _toolchain(ptxas: set[str]) -> dict[str, str]:
    """Versions of what built the cubins; ``ptxas`` as read from them."""
    if len(ptxas) != 1:
        raise BuildError(f"cubins were built by different ptxas versions: {sorted(ptxas)}")
    return {
        "cutlass_dsl": importlib.metadata.version("nvidia-cutlass-dsl"),
        "ptxas": ptxas.pop(),
        "python": platform.python_version(),
    }


def _print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
