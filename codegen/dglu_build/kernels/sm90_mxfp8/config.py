"""The sm90 MXFP8 family's configuration, in pure Python (no CuTe DSL).

Hopper has FP8 tensor cores but no block-scaled MMA, and MXFP8 scales change every 32 of K
along both A's rows and B's columns. This family decodes A and B exactly (an FP8 value
times a power of two fits BF16) into BF16 workspaces, runs the sm90 BF16 family's fused
kernel on them with an fp32 D, and quantizes that D into D_row and D_col with their scale
factors. ``Config.main`` is the BF16 kernel's configuration, checked by its own rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dglu.contract.element_types import FP8_TYPES as FP8_DTYPES

from ..sm90_bf16.config import FINISH_THREADS, Config as Bf16Config, OperandConfig, operand_fields

CONVERT_THREADS = FINISH_THREADS  # threads per block of the dequantizers and quantizers
SF_VEC = 32  # elements per E8M0 scale factor (MXFP8)
ACC_DTYPE = "fp32"  # the unquantized D the quantizers read


@dataclass(frozen=True)
class Config(OperandConfig):
    """One variant of the family, as the kernels see it (A, B and D in "e4m3" or "e5m2");
    ``from_key`` checks it builds."""

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a variant key; raises ValueError if the kernels cannot build it."""
        config = cls(**operand_fields(key))
        config.main.check()
        return config

    @property
    def c_widened(self) -> bool:
        """FP8 C is widened to BF16 first (the BF16 kernel reads bf16, fp16 or fp32 C)."""
        return self.c_dtype in FP8_DTYPES

    @property
    def main(self) -> Bf16Config:
        """The fused BF16 kernel's configuration: decoded operands (dense, K-major), fp32 D."""
        return Bf16Config(
            ab_dtype="bf16",
            c_dtype="bf16" if self.c_widened else self.c_dtype,
            d_dtype=ACC_DTYPE,
            act_func=self.act_func,
            act_params=self.act_params,
            dbias=self.dbias,
            discrete_weights=False,
            b_n_major=False,
            dynamic_schedule=self.dynamic_schedule,
            tile_m=self.tile_m,
            tile_n=self.tile_n,
            cluster_m=1,
            block_scaled_contract=True,
        )
