"""The sm100 block-scaled family's configuration, in pure Python (no CuTe DSL, no cuDNN FE).

A variant key maps onto the constructor arguments of cuDNN FE's
``BlockScaledMoEGroupedGemmDgluDbiasKernel`` and the compile-time choices of its
``__call__``. The tiling, expert count, weight mode and scheduler are the sm100 BF16
family's (its ``Config``, whose checks this one extends); what is new is the recipe the
operand dtype selects (the seed's pairing, docs/blockscaled_contract.md):

- MXFP8: A and B ``e4m3`` or ``e5m2``, E8M0 scale factors per 32 elements; D e4m3 with
  SFD_row, SFD_col and norm_const (the kernel generates SFD exactly for FP8 A/B, E8M0 and
  FP8 D); no amax (cuDNN FE's wrapper passes one only for a 16-bit D).
- NVFP4: A and B ``e2m1`` (float4_e2m1fn_x2 or uint8 storage, two per byte), E4M3 scale
  factors per 16 elements; D bf16, fp16 or fp32 (cuDNN FE 1.32.0 refuses FP8 D for FP4
  A/B), amax with a 16-bit D.

The rules restate cuDNN FE's ``GroupedGemmDgluBlockScaledAPI.check_support`` for what a
key fixes; shape rules become the manifest's limits (interface.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from dglu.contract.element_types import FP8_TYPES
from dglu.contract.keys import ALL_ACT_PARAMS

from ..sm100_bf16.config import Config as Bf16Config


class Recipe(NamedTuple):
    """A block-scaled format: the scale factors' dtype and the elements each one scales."""

    name: str
    sf_dtype: str
    sf_vec_size: int
    d_dtypes: tuple[str, ...]


# D e5m2 is refused: cuDNN FE 1.32.0's own compile() of it fails inside CuTe DSL 4.8.1
# ("None to integer conversion is not supported"), as dglu's does
MXFP8 = Recipe("mxfp8", "e8m0", 32, ("e4m3",))
NVFP4 = Recipe("nvfp4", "e4m3", 16, ("bf16", "fp16", "fp32"))
FP4 = "e2m1x2"  # the operand's element type: float4_e2m1fn_x2 (two E2M1 values a byte)
RECIPES = {"e4m3": MXFP8, "e5m2": MXFP8, FP4: NVFP4}
AMAX_D_DTYPES = ("bf16", "fp16")  # cuDNN FE's wrapper passes amax for these D dtypes only
AB_BITS = {"e4m3": 8, "e5m2": 8, FP4: 4}
SFD_FRAME_BYTES = 48  # the MXFP8 main kernel's stack frame: its SFD quantizer's local array (no spills)
MMA_STATE_BYTES = 12  # each of the two TiledMma parameters (all zero: the host IR's make_atom)


@dataclass(frozen=True)
class Config(Bf16Config):
    """One variant of the family; ``from_key`` checks it builds."""

    descriptors_per_expert: ClassVar[int] = 2  # B's and SFB's, per expert (discrete weights)
    builds_dense_n_major: ClassVar[bool] = True  # cuDNN FE's default path: (L, K, N) B, N and K symbolic

    ab_dtype: str = "e4m3"
    discrete_col_sfd: bool = False  # SFD_col in each expert's own block (the kernel compiles it in)
    single_group: bool = False  # one expert whose rows are A's M (padded_offsets never read)

    @classmethod
    def parse(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a key, unchecked."""
        base = Bf16Config.parse(key)
        return cls(**{field.name: getattr(base, field.name) for field in fields(base)}, ab_dtype=key["ab_dtype"],
                   discrete_col_sfd=key.get("discrete_col_sfd", False),
                   single_group=key.get("use_single_group_runtime_offsets", False))

    def check(self) -> None:
        """Raise ValueError naming the field(s) of a combination the kernel cannot build."""
        super().check()
        if self.d_dtype not in self.recipe.d_dtypes:
            raise ValueError(
                f"d_dtype: {self.recipe.name.upper()} operands ({self.ab_dtype}) write D as {list(self.recipe.d_dtypes)} "
                f"(cuDNN FE's check_support; e5m2 D fails in cuDNN FE 1.32.0's own compile), got {self.d_dtype!r}"
            )
        if self.fp4 and self.b_n_major:
            raise ValueError("b_major: FP4 B must be K-major (cuDNN FE's check_support), got 'n'")
        if self.fp4 and self.d_dtype == "fp32" and not self.dbias:
            raise ValueError("d_dtype: FP4 operands with fp32 D need dbias (cuDNN FE refuses fp32 D without it)")
        if self.discrete_col_sfd and not self.generate_sfd:
            raise ValueError(
                "discrete_col_sfd: only MXFP8 variants with FP8 D write SFD_col (cuDNN FE ignores it otherwise), "
                f"got ab_dtype {self.ab_dtype!r}, d_dtype {self.d_dtype!r}"
            )
        if self.single_group and self.experts != 1:
            raise ValueError(
                f"use_single_group_runtime_offsets: needs experts 1 (the kernel's one expert takes A's rows), "
                f"got {self.experts}"
            )
        if self.act_func == "dsituglu" and not all(value > 0 for value in self.act_params.values()):
            raise ValueError("act_params: dSiTU-GLU needs situ_beta1 > 0 and situ_beta2 > 0")

    @property
    def recipe(self) -> Recipe:
        return RECIPES[self.ab_dtype]

    @property
    def fp4(self) -> bool:
        return self.ab_dtype == FP4

    @property
    def generate_sfd(self) -> bool:
        """The kernel quantizes D with row and column scale factors (FP8 A/B, E8M0, FP8 D)."""
        return self.recipe is MXFP8 and self.d_dtype in FP8_TYPES

    @property
    def amax(self) -> bool:
        """The kernel writes per-expert amax (cuDNN FE's wrapper asks for it with a 16-bit D)."""
        return self.d_dtype in AMAX_D_DTYPES

    @property
    def mma_state_bytes(self) -> int:
        return MMA_STATE_BYTES

    @property
    def call_act_params(self) -> dict[str, float]:
        """The activation constants the kernel's ``__call__`` compiles in: the key's, and for
        the others what cuDNN FE passes (the seed's defaults; linear_offset 0 but for dGeGLU)."""
        return {**ALL_ACT_PARAMS, "linear_offset": 0.0, **self.act_params}
