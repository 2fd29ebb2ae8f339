"""The sm100 BF16 kernel family: Blackwell (sm_100a, sm_103a), NVIDIA's own BF16 dGLU
kernel (``MoEGroupedGemmDgluDbiasBf16Kernel`` of the pinned nvidia-cudnn-frontend,
kernels/cudnn_fe.py) compiled ahead of time with M, N and K symbolic and the expert count
compiled in (one cubin per L: see docs/manifest.md, "sm100_bf16").

``FAMILY`` (found by dglu_build.kernels.registry) checks and declares without CuTe DSL
or cuDNN FE; its ``compile`` imports both (compile.py).
"""

from __future__ import annotations

from pathlib import Path

from dglu.contract.element_types import FLOAT_TYPES
from dglu.contract.keys import ACT_PARAM_DEFAULTS

from ..family import PackagedFamily, package_sources
from .. import cudnn_fe as upstream
from . import interface
from .config import Config

NAME = "sm100_bf16"
OUTPUT_DTYPES = FLOAT_TYPES  # cuDNN FE's BF16 path: C and D each bf16, fp16 or fp32


class Sm100Bf16Family(PackagedFamily):
    """Blackwell, BF16 operands, cuDNN FE's kernel; ``experts`` is checked by ``check``."""

    config = Config
    interface = interface
    name = NAME
    architectures = ("sm_100a", "sm_103a")
    allowed = {
        "arch": architectures,
        "ab_dtype": ("bf16",),
        "c_dtype": OUTPUT_DTYPES,
        "d_dtype": OUTPUT_DTYPES,
        "act_func": tuple(name for name in ACT_PARAM_DEFAULTS if name in ("dswiglu", "dgeglu")),
        "dbias": (True, False),
        "weight_mode": ("dense", "discrete"),
        "b_major": ("k", "n"),
        # 2-CTA 256-row tiles on a CTA pair, 1-CTA 128-row tiles
        "tile_mn": ((256, 256), (256, 128), (128, 256), (128, 128)),
        "cluster_mn": ((2, 1), (1, 1)),
        "scheduler": ("static", "dynamic"),
        "consumer": ("cooperative",),  # the key's default: cuDNN FE's kernel is its own
        "deterministic": (False,),
        "act_out": (False,),
        "discrete_col_sfd": (False,),  # the block-scaled kernel's options
        "use_single_group_runtime_offsets": (False,),
    }

    def sources(self) -> dict[str, str]:
        return {**package_sources(Path(__file__).parent), **upstream.sources()}

    def notices(self) -> dict[str, bytes]:
        """cuDNN FE's Apache-2.0 LICENSE.txt and NOTICE: its kernel is in these cubins."""
        return {f"{upstream.DISTRIBUTION}/{name}": text for name, text in upstream.license_texts().items()}


FAMILY = Sm100Bf16Family()
