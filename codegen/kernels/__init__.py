"""Kernel families of dglu and their ahead-of-time compilation.

``compile_variant(key, symbol_prefix)`` compiles one variant (a normalised
spec entry, see kernel_specs/) for its architecture with no GPU present and
returns the cubin plus the manifest fields that describe how to launch it
(docs/manifest.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .hopper_compile import SUPPORTED, compile_hopper_variant


@dataclass(frozen=True)
class CompiledVariant:
    """A variant's cubin and the manifest fields the runtime launches it by."""

    cubin: bytes
    kernels: list[dict]
    tma: dict[str, dict]


def compile_variant(key: dict, symbol_prefix: str) -> CompiledVariant:
    """Compile one normalised variant; ``symbol_prefix`` names its kernels."""
    if key["arch"] != "sm_90a":
        raise ValueError(f"arch: no kernel family for {key['arch']!r}; supported: ['sm_90a']")
    cubin, kernels, tma = compile_hopper_variant(key, symbol_prefix)
    return CompiledVariant(cubin=cubin, kernels=kernels, tma=tma)


__all__ = ["SUPPORTED", "CompiledVariant", "compile_variant"]
