"""The sm100 block-scaled kernel family: Blackwell (sm_100a, sm_103a), NVIDIA's own
block-scaled dGLU kernel (``BlockScaledMoEGroupedGemmDgluDbiasKernel`` of the pinned
nvidia-cudnn-frontend, kernels/cudnn_fe.py) compiled ahead of time with M, N and K
symbolic and the expert count compiled in (one cubin per L, as sm100_bf16: see
docs/blackwell.md). MXFP8 (FP8 A/B, E8M0 per 32, FP8 D with SFD) and NVFP4 (FP4 A/B,
E4M3 per 16, bf16/fp16/fp32 D, amax), config.py.

``FAMILY`` (found by dglu_build.kernels.registry) checks and declares without CuTe DSL
or cuDNN FE; its ``compile`` imports both (compile.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dglu.contract.element_types import FLOAT_TYPES, FP8_TYPES
from dglu.contract.keys import ACT_PARAM_DEFAULTS

from .. import cudnn_fe as upstream
from ..family import KERNELS_DIR, PackagedFamily, package_sources
from ..sm100_bf16 import Sm100Bf16Family
from . import interface
from .config import FP4, SFD_FRAME_BYTES, Config

NAME = "sm100_blockscaled"


class Sm100BlockScaledFamily(PackagedFamily):
    """Blackwell, FP8 or FP4 operands with block scale factors, cuDNN FE's kernel."""

    config = Config
    interface = interface
    name = NAME
    architectures = Sm100Bf16Family.architectures
    allowed = {
        **Sm100Bf16Family.allowed,
        "ab_dtype": (*FP8_TYPES, FP4),
        "c_dtype": (*FLOAT_TYPES, *FP8_TYPES),
        "d_dtype": (*FP8_TYPES, *FLOAT_TYPES),
        "act_func": tuple(ACT_PARAM_DEFAULTS),
        # the seed's block-scaled tiles: TILE_M 128 or 256, TILE_N 256
        "tile_mn": ((256, 256), (128, 256)),
        # compiled in by cuDNN FE's kernel (``const_expr`` in its epilogue and prologue)
        "discrete_col_sfd": (False, True),
        "use_single_group_runtime_offsets": (False, True),
    }

    def sources(self) -> dict[str, str]:
        """Its own files, sm100_bf16's (whose compile, config and interface it builds on)
        and cuDNN FE's."""
        own = package_sources(Path(__file__).parent, KERNELS_DIR / "sm100_bf16")
        return {**own, **upstream.sources()}

    def local_frame_bytes(self, key: Mapping[str, Any], role: str) -> int:
        """The SFD quantizer's per-thread 32-byte array (PTX: ``.local .align 32 .b8
        __local_depot0[32]``) gives the MXFP8 main kernel a 48-byte frame; ptxas 13.0 and 13.3
        report "48 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" for it
        (docs/blackwell.md). NVFP4 kernels and the helper have none."""
        return SFD_FRAME_BYTES if role == "main" and Config.parse(key).generate_sfd else 0

    def notices(self) -> dict[str, bytes]:
        """cuDNN FE's Apache-2.0 LICENSE.txt and NOTICE: its kernel is in these cubins."""
        return {f"{upstream.DISTRIBUTION}/{name}": text for name, text in upstream.license_texts().items()}


FAMILY = Sm100BlockScaledFamily()
