"""Kernel families of dglu and their ahead-of-time compilation.

``compile_variant(key, symbol_prefix)`` compiles one variant (a normalised
spec entry, see kernel_specs/) for its architecture with no GPU present and
returns the cubin plus the manifest fields that describe how to launch it
(docs/manifest.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .hopper_compile import SUPPORTED, compile_hopper_variant, hopper_kernel


@dataclass(frozen=True)
class CompiledVariant:
    """A variant's cubin and the manifest fields the runtime launches it by."""

    cubin: bytes
    kernels: list[dict]
    tma: dict[str, dict]


def check_variant(key: dict) -> None:
    """Raise ValueError if the kernels cannot build this combination of (individually
    supported) fields, e.g. a tile too wide for its dtypes; nothing is compiled."""
    _check_arch(key)
    hopper_kernel(key)


def _check_arch(key: dict) -> None:
    if key["arch"] != "sm_90a":
        raise ValueError(f"arch: no kernel family for {key['arch']!r}; supported: ['sm_90a']")


def compile_variant(key: dict, symbol_prefix: str) -> CompiledVariant:
    """Compile one normalised variant; ``symbol_prefix`` names its kernels."""
    _check_arch(key)
    cubin, kernels, tma = compile_hopper_variant(key, symbol_prefix)
    return CompiledVariant(cubin=cubin, kernels=kernels, tma=tma)


__all__ = ["SUPPORTED", "CompiledVariant", "check_variant", "compile_variant"]
