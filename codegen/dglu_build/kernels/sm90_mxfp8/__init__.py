"""The sm90 MXFP8 kernel family: Hopper (sm_90a), FP8 A and B with E8M0 scales per 32 of K
(the seed's block-scaled contract), FP8 D_row and D_col with their scale factors.

``FAMILY`` (found by dglu_build.kernels.registry) checks and declares without CuTe DSL;
its ``compile`` imports it (compile.py). It builds on sm90_bf16's kernel, whose sources
are its sources too.
"""

from __future__ import annotations

from pathlib import Path

from dglu.contract.element_types import FP8_TYPES as FP8_DTYPES

from ..family import PackagedFamily, package_sources
from ..sm90_bf16 import FLOAT_DTYPES, Sm90Bf16Family
from . import interface
from .config import Config

NAME = "sm90_mxfp8"


class Sm90Mxfp8Family(PackagedFamily):
    """Hopper, FP8 operands with E8M0 block scales; FP8 D with SFD_row/SFD_col."""

    config = Config
    interface = interface
    name = NAME
    architectures = ("sm_90a",)
    # sm90_bf16's key fields, but for the operand and output dtypes and what the fused
    # kernel does not build (2x1 clusters, the register-epilogue consumers, deterministic,
    # act_out)
    allowed = {
        **Sm90Bf16Family.allowed,
        "ab_dtype": FP8_DTYPES,
        "c_dtype": FLOAT_DTYPES + FP8_DTYPES,
        "d_dtype": FP8_DTYPES,
        "cluster_mn": ((1, 1),),
        "consumer": ("cooperative",),
        "deterministic": (False,),
        "act_out": (False,),
    }

    def sources(self) -> dict[str, str]:
        return package_sources(Path(__file__).parent, *Sm90Bf16Family.source_dirs)


FAMILY = Sm90Mxfp8Family()
