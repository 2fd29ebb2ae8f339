"""The sm90 MXFP8 family's configuration, in pure Python (no CuTe DSL).

Hopper has FP8 tensor cores but no block-scaled MMA, and MXFP8 scales change every 32 of K
along both A's rows and B's columns. This family decodes A and B exactly (an FP8 value
times a power of two fits BF16) into BF16 workspaces, runs the sm90 BF16 family's fused
kernel on them with an fp32 D, and quantizes that D into D_row and D_col with their scale
factors. ``Config.main`` is the BF16 kernel's configuration, checked by its own rules;
the key's ``decode`` "mainloop" and "one_pass" decode (and quantize) inside the fused kernel
instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dglu.contract.element_types import FP8_TYPES as FP8_DTYPES

from ..sm90_bf16.config import (
    FINISH_THREADS,
    NUM_MMA_THREADS,
    SMEM_ARCH,
    SMEM_CAPACITY,
    SMEM_RESERVED,
    TILE_K,
    Config as Bf16Config,
    OperandConfig,
    operand_fields,
)

CONVERT_THREADS = FINISH_THREADS  # threads per block of the dequantizers and quantizers
SF_VEC = 32  # elements per E8M0 scale factor (MXFP8)
ACC_DTYPE = "fp32"  # the unquantized D the quantizers read
# The key field ``decode``: "prepass" (the dequantizers write decoded A and B to global
# memory, the BF16 kernel reads them and writes an fp32 D that quantize_d reads: the
# default), "mainloop" (fused.py decodes the FP8 stages in shared memory; the fp32 D and
# quantize_d as before) or "one_pass" (the mainloop decode and the quantizer in the fused
# kernel's epilogue: no fp32 D). bench/RESULTS.md (issue 26) has what each was verified
# and measured on.
DECODES = ("prepass", "mainloop", "one_pass")
DECODED_STAGES = 2  # BF16 buffers the mainloop decode alternates between
MIN_FP8_STAGES = 2
BF16_BYTES = 2
# the mainloop decode of N-major B gives each MMA thread 4 rows x 8 elements of a k-tile
# (blocks/mxfp8_decode.py, StageDecoder), so its tile_n is at most this
N_MAJOR_DECODE_TILE_N = NUM_MMA_THREADS * 4 * 8 // TILE_K


@dataclass(frozen=True)
class FusedGeometry:
    """The mainloop-decode kernel's shared memory: FP8 stages beside DECODED_STAGES BF16
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
class Config(OperandConfig):
    """One variant of the family, as the kernels see it (A, B and D in "e4m3" or "e5m2");
    ``from_key`` checks it builds."""

    mainloop_decode: bool = False  # the key's decode: "mainloop" or "one_pass"
    epilogue_quantize: bool = False  # "one_pass"
    # the BF16 kernel's consumer (sm90_bf16 Config.consumer): "cooperative" (staged) or, with
    # decode "mainloop", "cooperative_rf" (the epilogue in the MMA warpgroups' registers:
    # 128 x 256 tiles fit)
    consumer: str = "cooperative"

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a variant key; raises ValueError if the kernels cannot build it."""
        decode = key.get("decode", DECODES[0])
        if decode not in DECODES:
            raise ValueError(f"decode: got {decode!r}, need one of {list(DECODES)}")
        config = cls(**operand_fields(key), mainloop_decode=decode != "prepass", epilogue_quantize=decode == "one_pass",
                     consumer=key.get("consumer", "cooperative"))
        if config.consumer != "cooperative" and decode != "mainloop":
            raise ValueError(
                f"consumer {config.consumer!r} runs the mainloop decode only (decode 'mainloop'; 'one_pass' "
                f"quantizes in the staged kernel's epilogue warpgroups), got decode {decode!r}"
            )
        config.main.check()
        if config.mainloop_decode and config.b_n_major and config.tile_n > N_MAJOR_DECODE_TILE_N:
            raise ValueError(
                f"the mainloop decode of N-major B takes tile_n <= {N_MAJOR_DECODE_TILE_N} (4 rows x 8 elements "
                f"of a k-tile per MMA thread), got {config.tile_n}"
            )
        if config.mainloop_decode and config.geometry.stages < MIN_FP8_STAGES:
            raise ValueError(
                f"tile {config.tile_m}x{config.tile_n} leaves shared memory for {config.geometry.stages} FP8 "
                f"stages beside the decoded buffers; the mainloop decode needs {MIN_FP8_STAGES}"
            )
        return config

    @property
    def geometry(self) -> FusedGeometry:
        main = self.main
        return FusedGeometry(self.tile_m, self.tile_n, main.staging_bytes + main.slots.bytes)

    @property
    def fused_main(self) -> Bf16Config:
        """The mainloop-decode kernel's BF16 configuration: the decoded operands' (BF16, so
        the epilogue's), with B's weight mode and major as the call's."""
        return replace(self.main, discrete_weights=self.discrete_weights, b_n_major=self.b_n_major)

    @property
    def fused_main_declared(self) -> Bf16Config:
        """``fused_main`` with the FP8 operand dtype: what the manifest declares of its B
        (the discrete template's dtype) and parameters."""
        return replace(self.fused_main, ab_dtype=self.ab_dtype)

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
            consumer=self.consumer,
        )
