"""The sm100 BF16 family's configuration, in pure Python (no CuTe DSL, no cuDNN FE).

A variant key maps onto the constructor arguments of cuDNN FE's
``MoEGroupedGemmDgluDbiasBf16Kernel`` and the compile-time choices of its ``__call__``
(weight mode, B's major mode, C/D dtypes, dbias). The feasibility rules restate the ones
cuDNN FE's BF16 path applies before it compiles (``can_implement`` and
``GroupedGemmDgluBf16API.check_support``) for what a key fixes; the shape rules (M % 256,
N % 32, K's 16-byte rows) become the manifest's limits (interface.py). The compile tier
(tests/cpu/test_sm100_family.py) checks these numbers against the kernel itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

M_ALIGNED = 256  # cuDNN FE's FIX_PAD_SIZE: expert row ranges start at multiples of 256
MAX_EXPERTS = 1024  # the kernel's constructor refuses more
TWO_CTA_TILE_M = 256  # a 256-row MMA tile is split over a CTA pair (2-CTA tcgen05 instructions)
THREADS_PER_CTA = 256  # 4 epilogue warps, MMA, TMA, C-load and scheduler warps
HELPER_THREADS = 1
EPILOGUE_TILE = (128, 32)  # rows x columns of C and D each epilogue step moves by TMA
TILE_K = 64  # K of one TMA box of A or B: 128 bytes of bf16 (128-byte swizzle)
DESCRIPTOR_BYTES = 128  # one CUtensorMap per expert (discrete weights)
COUNTER_BYTES = 4  # the dynamic scheduler's tile counter
WORKSPACE_ALIGN = 128


@dataclass(frozen=True)
class Config:
    """One variant of the family; ``from_key`` checks it builds."""

    # TMA descriptors the helper writes per expert with discrete weights (B; the
    # block-scaled family's kernel writes B's and SFB's)
    descriptors_per_expert: ClassVar[int] = 1
    # N-major dense B with symbolic N and K: not built here (see check); the block-scaled
    # kernel's is cuDNN FE's own default compile
    builds_dense_n_major: ClassVar[bool] = False

    arch: str
    c_dtype: str
    d_dtype: str
    act_func: str
    act_params: Mapping[str, float]
    dbias: bool
    discrete_weights: bool
    b_n_major: bool
    dynamic_schedule: bool
    tile_m: int
    tile_n: int
    cluster_m: int
    cluster_n: int
    experts: int

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a variant key; ValueError if dglu does not build it."""
        config = cls.parse(key)
        config.check()
        return config

    @classmethod
    def parse(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a key, unchecked (cuDNN FE's static configurations, which its
        own check_support judges, use it in the parity tests)."""
        return cls(
            arch=key["arch"],
            c_dtype=key["c_dtype"],
            d_dtype=key["d_dtype"],
            act_func=key["act_func"],
            act_params=dict(key.get("act_params") or {}),
            dbias=key["dbias"],
            discrete_weights=key["weight_mode"] == "discrete",
            b_n_major=key["b_major"] == "n",
            dynamic_schedule=key["scheduler"] == "dynamic",
            tile_m=key["tile_m"],
            tile_n=key["tile_n"],
            cluster_m=key["cluster_m"],
            cluster_n=key["cluster_n"],
            experts=key.get("experts", 0),
        )

    def check(self) -> None:
        """Raise ValueError naming the field(s) of a combination the kernel cannot build."""
        if not 1 <= self.experts <= MAX_EXPERTS:
            raise ValueError(
                f"experts: the kernel compiles its expert count in: give 1..{MAX_EXPERTS}, got {self.experts}"
            )
        if self.two_cta and self.cluster_m != 2:
            raise ValueError(f"cluster_m: a {self.tile_m}-row tile spans a CTA pair: cluster_m must be 2, got {self.cluster_m}")
        if not self.two_cta and self.cluster_m != 1:
            raise ValueError(f"cluster_m: a {self.tile_m}-row tile runs on one CTA: cluster_m must be 1, got {self.cluster_m}")
        if self.b_n_major and not self.discrete_weights and not self.builds_dense_n_major:
            raise ValueError(
                "b_major: N-major dense B is not built for symbolic N and K: its launch differs from the one "
                "cuDNN FE's host code makes for that cubin (tests/cpu/test_sm100_launch_parity.py); "
                "use K-major dense B, or discrete weights (b_ptrs) with b_major 'n'"
            )
        if self.act_func == "dgeglu":
            p = self.act_params
            if p["geglu_alpha"] <= 0 or not p["glu_clamp_min"] < p["glu_clamp_max"]:
                raise ValueError("act_params: dGeGLU needs geglu_alpha > 0 and glu_clamp_min < glu_clamp_max")

    @property
    def two_cta(self) -> bool:
        """2-CTA MMA instructions: the 256-row tile."""
        return self.tile_m == TWO_CTA_TILE_M

    @property
    def cta_tile_m(self) -> int:
        """Rows of the tile each CTA holds."""
        return self.tile_m // (2 if self.two_cta else 1)

    @property
    def b_box_n(self) -> int:
        """Rows of B each CTA loads: a CTA pair splits the tile's N."""
        return self.tile_n // (2 if self.two_cta else 1)

    @property
    def linear_offset(self) -> float:
        """The kernel's run-time linear_offset: dGeGLU's constant, 0 for dSwiGLU (as cuDNN FE)."""
        return self.act_params.get("linear_offset", 0.0)

    @property
    def constructor_act_params(self) -> dict[str, float]:
        """The activation constants the kernel's constructor takes (linear_offset is a parameter)."""
        return {name: value for name, value in self.act_params.items() if name != "linear_offset"}

    @property
    def workspace_bytes(self) -> int:
        """The kernel's scratch: descriptors per expert (discrete) and the tile counter
        (dynamic), 128-byte aligned and never 0 (cuDNN FE's scratch_workspace_bytes)."""
        used = DESCRIPTOR_BYTES * self.descriptors_per_expert * self.experts * self.discrete_weights + COUNTER_BYTES * self.dynamic_schedule
        return max(-(-used // WORKSPACE_ALIGN) * WORKSPACE_ALIGN, WORKSPACE_ALIGN)

    @property
    def has_helper(self) -> bool:
        """The kernel launches its helper first: per-expert descriptors, or the counter reset."""
        return self.discrete_weights or self.dynamic_schedule

    @property
    def mma_state_bytes(self) -> int:
        """The TiledMma parameter: 64 bytes for 2-CTA instructions, 32 for 1-CTA (all zero)."""
        return 64 if self.two_cta else 32
