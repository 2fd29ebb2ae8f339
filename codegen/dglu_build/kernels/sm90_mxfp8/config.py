"""The sm90 MXFP8 family's configuration, in pure Python (no CuTe DSL).

Hopper has FP8 tensor cores but no block-scaled MMA, and MXFP8 scales change every 32 of K
along both A's rows and B's columns. This family's fused kernel (fused.py) is the sm90 BF16
family's with its operand path and output stage replaced: it decodes each stage of FP8 A
and B exactly (an FP8 value times a power of two fits BF16) into BF16 buffers in shared
memory for its WGMMAs, and quantizes the fp32 D of its epilogue into D_row and D_col with
their scale factors; no operand, C or D copy goes through global memory (FP8 C is read in
the slot ring, ``Fp8CBoxes``). ``Config.main`` is the BF16 kernel's configuration (its D the
fp32 of the epilogue), checked by its own rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dglu.contract.element_types import ELEMENT_TYPES, FP8_TYPES as FP8_DTYPES

from ..sm90_bf16.config import (
    EPILOGUE_SLOTS,
    EPILOGUE_THREADS,
    FINISH_THREADS,
    GROUP_COLUMNS,
    SMEM_ARCH,
    SMEM_CAPACITY,
    SMEM_RESERVED,
    TILE_K,
    WARP_SIZE,
    Config as Bf16Config,
    OperandConfig,
    operand_fields,
)

CONVERT_THREADS = FINISH_THREADS  # threads per block of the offsets' clamp
SF_VEC = 32  # elements per E8M0 scale factor (MXFP8)
ACC_DTYPE = "fp32"  # the unquantized D the epilogue's quantizer reads from shared memory
DECODED_STAGES = 2  # BF16 buffers the mainloop decode alternates between
MIN_FP8_STAGES = 2
BF16_BYTES = 2


@dataclass(frozen=True)
class FusedGeometry:
    """The fused kernel's shared memory: FP8 stages beside DECODED_STAGES BF16
    buffers and the BF16 kernel's staging buffer and slot ring."""

    tile_m: int
    tile_n: int
    epilogue_bytes: int

    @property
    def stage_bytes(self) -> int:
        return (self.tile_m + self.tile_n) * TILE_K

    @property
    def decoded_bytes(self) -> int:
        return DECODED_STAGES * self.stage_bytes * BF16_BYTES

    @property
    def stages(self) -> int:
        free = SMEM_CAPACITY[SMEM_ARCH] - SMEM_RESERVED - self.epilogue_bytes - self.decoded_bytes
        return free // self.stage_bytes


@dataclass(frozen=True)
class Fp8CBoxes:
    """FP8 C in a slot of the epilogue's ring, which the group's fp32 D then overwrites.

    The slot's first fp32 D box gives each row 128 bytes, twice an FP8 C row's 64, and each
    epilogue warp owns ``rows`` consecutive rows. C comes in one unswizzled TMA box per
    warp (its rows x the group's 64 columns), placed in the second half of the bytes the
    warp's D rows take in that D box: so D row i of a warp overwrites only C rows 2i - rows
    and 2i - rows + 1 of the same warp, both at most i and so read by the time the warp
    writes D row i (the epilogue reads a row's C, then writes its D).
    """

    tile_m: int
    slot_bytes: int  # of one slot of the ring (its D's)

    @property
    def rows(self) -> int:
        return self.tile_m // (EPILOGUE_THREADS // WARP_SIZE)

    @property
    def boxes(self) -> int:
        """Boxes per slot: one per epilogue warp."""
        return self.tile_m // self.rows

    @property
    def box(self) -> tuple[int, int]:
        return (self.rows, GROUP_COLUMNS)

    @property
    def box_bytes(self) -> int:
        return self.rows * GROUP_COLUMNS

    def offset(self, slot: int, box: int) -> int:
        """Byte offset of ``box`` of ``slot`` in the ring."""
        return slot * self.slot_bytes + (2 * box + 1) * self.box_bytes


@dataclass(frozen=True)
class Config(OperandConfig):
    """One variant of the family, as the kernels see it (A, B and D in "e4m3" or "e5m2");
    ``from_key`` checks it builds."""

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a variant key; raises ValueError if the kernels cannot build it."""
        config = cls(**operand_fields(key))
        config.main.check()
        if config.geometry.stages < MIN_FP8_STAGES:
            raise ValueError(
                f"tile {config.tile_m}x{config.tile_n} leaves shared memory for {config.geometry.stages} FP8 "
                f"stages beside the decoded buffers; the fused kernel needs {MIN_FP8_STAGES}"
            )
        return config

    @property
    def geometry(self) -> FusedGeometry:
        main = self.main
        return FusedGeometry(self.tile_m, self.tile_n, main.staging_bytes + main.slots.bytes)

    @property
    def fused_main(self) -> Bf16Config:
        """The fused kernel's BF16 configuration: the decoded operands' (BF16, so the
        epilogue's), with B's weight mode and major as the call's."""
        return replace(self.main, discrete_weights=self.discrete_weights, b_n_major=self.b_n_major)

    @property
    def fused_main_declared(self) -> Bf16Config:
        """``fused_main`` with the FP8 operand dtype: what the manifest declares of its B
        (the discrete template's dtype) and parameters."""
        return replace(self.fused_main, ab_dtype=self.ab_dtype)

    @property
    def fp8_c(self) -> bool:
        return self.c_dtype in FP8_DTYPES

    @property
    def fp8_c_boxes(self) -> Fp8CBoxes:
        """Where FP8 C sits in the slot ring (the fused kernel's and C's TMA rule)."""
        slots = self.main.slots
        if slots.d.box_cols * ELEMENT_TYPES[slots.d.dtype].bits != 2 * GROUP_COLUMNS * ELEMENT_TYPES[self.c_dtype].bits:
            raise AssertionError("Fp8CBoxes needs a D box row twice as wide as an FP8 C row")
        return Fp8CBoxes(self.tile_m, slots.bytes // EPILOGUE_SLOTS)

    @property
    def main(self) -> Bf16Config:
        """The BF16 kernel's configuration the fused kernel builds on: BF16 operands (dense,
        K-major), the fp32 D of its epilogue, the staged ("cooperative") consumer."""
        return Bf16Config(
            ab_dtype="bf16",
            c_dtype=self.c_dtype,
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
