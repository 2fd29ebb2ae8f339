"""The sm90 BF16 kernel family: Hopper (sm_90a), BF16 A and B, fp32 accumulation.

``FAMILY`` (found by dglu_build.kernels.registry) checks and declares without CuTe DSL;
its ``compile`` imports it (compile.py).
"""

from __future__ import annotations

from pathlib import Path

from dglu.contract.element_types import FLOAT_TYPES as FLOAT_DTYPES
from dglu.contract.keys import ACT_PARAM_DEFAULTS

from ..family import KERNELS_DIR, PackagedFamily, package_sources
from . import interface
from .config import CONSUMERS, Config

NAME = "sm90_bf16"


class Sm90Bf16Family(PackagedFamily):
    """Hopper, BF16 operands; every key field but deterministic/act_out shared with sm90_mxfp8."""

    config = Config
    interface = interface
    name = NAME
    architectures = ("sm_90a",)
    allowed = {
        "arch": architectures,
        "ab_dtype": ("bf16",),
        "c_dtype": FLOAT_DTYPES,
        "d_dtype": FLOAT_DTYPES,
        "act_func": tuple(ACT_PARAM_DEFAULTS),
        "dbias": (True, False),
        "weight_mode": ("dense", "discrete"),
        "b_major": ("k", "n"),
        # 128x256: consumer cooperative_rf; 64x256: consumer pingpong
        "tile_mn": ((128, 128), (128, 64), (128, 256), (64, 256)),
        "cluster_mn": ((1, 1), (2, 1)),
        "scheduler": ("static", "dynamic"),
        "consumer": CONSUMERS,
        "deterministic": (False, True),
        "act_out": (False, True),
        # the block-scaled options no Hopper kernel compiles in (sm90_mxfp8 reads them as flags)
        "discrete_col_sfd": (False,),
        "use_single_group_runtime_offsets": (False,),
        "experts": (0,),  # any expert count, at run time
    }
    source_dirs: tuple[Path, ...] = (Path(__file__).parent, KERNELS_DIR / "blocks")

    def sources(self) -> dict[str, str]:
        return package_sources(*self.source_dirs)


FAMILY = Sm90Bf16Family()
