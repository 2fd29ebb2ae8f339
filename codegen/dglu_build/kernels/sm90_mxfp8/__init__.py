"""The sm90 MXFP8 kernel family: Hopper (sm_90a), FP8 A and B with E8M0 scales per 32 of K
(the seed's block-scaled contract), FP8 D_row and D_col with their scale factors.

``check`` needs no CuTe DSL; ``compile_variant`` imports it (compile.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import Config

NAME = "sm90_mxfp8"


def check(key: Mapping[str, Any]) -> None:
    """Raise ValueError if the family's kernels cannot build this key."""
    Config.from_key(key)


def compile_variant(key: Mapping[str, Any], symbol_prefix: str) -> tuple[bytes, dict]:
    """The variant's cubin and its manifest fields (see compile.py)."""
    from .compile import compile_variant as compile_with_dsl

    return compile_with_dsl(key, symbol_prefix)
