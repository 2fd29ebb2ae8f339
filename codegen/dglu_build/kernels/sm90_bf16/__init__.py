"""The sm90 BF16 kernel family: Hopper (sm_90a), BF16 A and B, fp32 accumulation.

``check`` needs no CuTe DSL; ``compile_variant`` imports it (compile.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import Config

NAME = "sm90_bf16"


def check(key: Mapping[str, Any]) -> None:
    """Raise ValueError if the family's kernels cannot build this key."""
    Config.from_key(key)


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """The variant's cubin and its manifest fields (see compile.py)."""
    from .compile import compile_variant as compile_with_dsl

    return compile_with_dsl(key, symbol_prefix)
