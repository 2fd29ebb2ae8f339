"""The sm90 BF16 family's configuration, in pure Python (no CuTe DSL).

Its fixed geometry (warp roles, tile K, epilogue groups, shared-memory reserve), the
numbers a variant key derives (pipeline stages, the epilogue's slot ring, C/D boxes) and
the feasibility rules of a key. ``check_variant`` uses it without compiling; the DSL
kernel (kernel.py) and the manifest declaration (interface.py) take their numbers from
it, so nothing is restated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dglu.contract.element_types import ELEMENT_TYPES

THREADS_PER_WARPGROUP = 128
NUM_MMA_WARPGROUPS = 2
NUM_MMA_THREADS = NUM_MMA_WARPGROUPS * THREADS_PER_WARPGROUP
EPILOGUE_WARPGROUP = 1 + NUM_MMA_WARPGROUPS  # the first of the epilogue's warpgroups
# two epilogue warpgroups: one warp per scheduler leaves the epilogue latency-bound
# (shared-memory loads, MUFU), at a quarter of its issue rate (ncu, H200)
NUM_EPILOGUE_WARPGROUPS = 2
EPILOGUE_THREADS = NUM_EPILOGUE_WARPGROUPS * THREADS_PER_WARPGROUP
THREADS_PER_CTA = (1 + NUM_MMA_WARPGROUPS + NUM_EPILOGUE_WARPGROUPS) * THREADS_PER_WARPGROUP
PRODUCER_WARP = 0
MOVER_WARP = 1
WARP_SIZE = 32
# registers per thread after setmaxnreg. setmaxnreg only moves registers within the
# CTA's own pool, which holds what its 640 threads launched with (96 each: the
# register file's share, in steps of 8), so the roles' counts must fit in that pool:
# the load warpgroup gives most of its share to the MMA warpgroups (64 fp32
# accumulators per thread, ~140 registers in all); the epilogue's 16 rows per warp fit
# in 80 (dgeglu's keeps 4 values per group in local memory, in L1).
REGISTER_FILE = 65536  # 32-bit registers per SM, all of them this CTA's
LAUNCH_REGISTERS = REGISTER_FILE // THREADS_PER_CTA // 8 * 8
LOAD_REGISTERS = 24
MMA_REGISTERS = 144
EPILOGUE_REGISTERS = 80
if (
    LOAD_REGISTERS * THREADS_PER_WARPGROUP + MMA_REGISTERS * NUM_MMA_THREADS + EPILOGUE_REGISTERS * EPILOGUE_THREADS
    > LAUNCH_REGISTERS * THREADS_PER_CTA
):
    raise AssertionError("the warp roles' setmaxnreg counts exceed the registers the CTA launches with")
# The consumers whose MMA warpgroups run the epilogue in registers (registers.py):
# "pingpong" (each warpgroup owns alternate tiles) and "cooperative_rf" (both on each
# tile, 64 rows each). 384 threads, the producer warpgroup and the two MMA warpgroups (no
# staging buffer, no epilogue warpgroups); they launch with 168 registers each, the MMA
# warpgroups take 232 of the pool, the load warpgroup keeps 40.
CONSUMERS = ("cooperative", "pingpong", "cooperative_rf")
REGISTER_EPILOGUE_CONSUMERS = ("pingpong", "cooperative_rf")
REGISTER_EPILOGUE_THREADS_PER_CTA = (1 + NUM_MMA_WARPGROUPS) * THREADS_PER_WARPGROUP
REGISTER_EPILOGUE_LAUNCH_REGISTERS = REGISTER_FILE // REGISTER_EPILOGUE_THREADS_PER_CTA // 8 * 8
REGISTER_EPILOGUE_LOAD_REGISTERS = 40
REGISTER_EPILOGUE_MMA_REGISTERS = 232
if (
    REGISTER_EPILOGUE_LOAD_REGISTERS * THREADS_PER_WARPGROUP + REGISTER_EPILOGUE_MMA_REGISTERS * NUM_MMA_THREADS
    > REGISTER_EPILOGUE_LAUNCH_REGISTERS * REGISTER_EPILOGUE_THREADS_PER_CTA
):
    raise AssertionError("the register-epilogue roles' setmaxnreg counts exceed the registers the CTA launches with")
# an MMA thread's accumulators of one tile stay in its registers through the epilogue
MAX_REGISTER_ACCUMULATORS = 128  # fp32 per thread: 128x128 and 64x256 ping-pong, 128x256 cooperative_rf tiles
TILE_M = 64 * NUM_MMA_WARPGROUPS  # each MMA warpgroup owns 64 rows of the tile
# "pingpong" puts one warpgroup on the whole tile: 64 rows (one m64n<tile_n> WGMMA block, so
# a 64x256 tile issues m64n256k16) or 128 (two m64n<tile_n> blocks)
PINGPONG_TILE_MS = (64, TILE_M)
TILE_N_MULTIPLE = 64
TILE_K = 64
BLOCK_COLUMNS = 32  # gate/input interleave width of C and D: the pairs of one epilogue group
GROUP_COLUMNS = 2 * BLOCK_COLUMNS  # columns of C and D per epilogue group
EPILOGUE_SLOTS = 2  # C/D group buffers between the block mover and the epilogue
SMEM_ARCH = "sm_90"
# opt-in shared memory per block; compile.py checks it against the DSL's own table
SMEM_CAPACITY = {SMEM_ARCH: 232448}
SMEM_RESERVED = 1024  # mbarriers and alignment slack
SWIZZLE_BITS = 1024  # 128-byte swizzle: the width of one TMA box row
SWIZZLE_CHUNK_BITS = 128  # it permutes 16-byte chunks within the row
MIN_STAGES = 3  # operand pipeline stages a tile must leave room for
CLUSTER_SIZES = (1, 2)
ACC_BITS = 32  # fp32 accumulators


@dataclass(frozen=True)
class BlockShape:
    """A block of C or D moved by TMA in boxes one 128-byte swizzle row wide
    (64 16-bit or 32 fp32 columns) and ``rows`` tall."""

    rows: int
    cols: int
    dtype: str

    @property
    def box_cols(self) -> int:
        return SWIZZLE_BITS // ELEMENT_TYPES[self.dtype].bits

    @property
    def boxes(self) -> int:
        return self.cols // self.box_cols

    @property
    def box(self) -> tuple[int, int]:
        return (self.rows, self.box_cols)

    @property
    def bytes(self) -> int:
        return self.rows * self.cols * ELEMENT_TYPES[self.dtype].bits // 8


@dataclass(frozen=True)
class SlotRing:
    """The epilogue's C/D group buffers. A slot holds one group of C, which the
    epilogue overwrites with the group's D; C and D view the same bytes, each
    in its own dtype, as boxes of one 128-byte swizzle row by ``rows``."""

    rows: int
    c_dtype: str
    d_dtype: str

    @property
    def c(self) -> BlockShape:
        return BlockShape(self.rows, GROUP_COLUMNS, self.c_dtype)

    @property
    def d(self) -> BlockShape:
        return BlockShape(self.rows, GROUP_COLUMNS, self.d_dtype)

    @property
    def slot_boxes(self) -> int:
        return max(self.c.boxes, self.d.boxes)

    @property
    def boxes(self) -> int:
        return EPILOGUE_SLOTS * self.slot_boxes

    @property
    def bytes(self) -> int:
        return EPILOGUE_SLOTS * max(self.c.bytes, self.d.bytes)


def operand_fields(key: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration fields a variant key gives both Hopper families alike: dtypes, the
    activation and its constants, dbias, weights, scheduler and tile."""
    return {
        "ab_dtype": key["ab_dtype"],
        "c_dtype": key["c_dtype"],
        "d_dtype": key["d_dtype"],
        "act_func": key["act_func"],
        "act_params": dict(key.get("act_params") or {}),
        "dbias": key["dbias"],
        "discrete_weights": key["weight_mode"] == "discrete",
        "b_n_major": key["b_major"] == "n",
        "dynamic_schedule": key["scheduler"] == "dynamic",
        "tile_m": key["tile_m"],
        "tile_n": key["tile_n"],
    }


@dataclass(frozen=True)
class OperandConfig:
    """The configuration fields both Hopper families take from a variant key alike
    (operand_fields)."""

    ab_dtype: str
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


@dataclass(frozen=True)
class Config(OperandConfig):
    """One variant of the family, as the kernels see it; ``from_key`` checks it builds."""

    cluster_m: int
    deterministic: bool = False
    act_out: bool = False  # the epilogue also writes prob * GLU(X) (m, n) in bf16
    # the block-scaled contract's epilogue (the MXFP8 family's main kernel): dGeGLU reads C
    # as stored, and no round_dgrad_to_input_dtype flag (the BF16 contract's option)
    block_scaled_contract: bool = False
    # "cooperative": both MMA warpgroups on each tile, accumulators staged for the epilogue
    # warpgroups (kernel.py); "pingpong": each MMA warpgroup owns every other tile and runs
    # its epilogue in registers; "cooperative_rf": both on each tile, the epilogue in their
    # registers (registers.py)
    consumer: str = "cooperative"

    @classmethod
    def from_key(cls, key: Mapping[str, Any]) -> Config:
        """The configuration of a variant key; raises ValueError if the kernels cannot build it."""
        config = cls(
            **operand_fields(key),
            cluster_m=key["cluster_m"],
            deterministic=key.get("deterministic", False),
            act_out=key.get("act_out", False),
            consumer=key.get("consumer", "cooperative"),
        )
        config.check()
        return config

    def check(self) -> None:
        """Raise ValueError naming the field(s) of a combination the kernels cannot build."""
        if self.tile_m not in self.tile_ms:
            raise ValueError(
                f"tile_m must be {' or '.join(map(str, self.tile_ms))} with consumer {self.consumer!r}, "
                f"got {self.tile_m}"
            )
        if self.tile_n % TILE_N_MULTIPLE:
            raise ValueError(f"tile_n must be a multiple of {TILE_N_MULTIPLE}, got {self.tile_n}")
        if self.b_n_major and not self.discrete_weights:
            raise ValueError("b_major 'n' is for discrete weights; dense B is K-major")
        if self.cluster_m not in CLUSTER_SIZES:
            raise ValueError(f"cluster_m must be one of {list(CLUSTER_SIZES)}, got {self.cluster_m}")
        if self.cluster_m > 1 and self.dynamic_schedule:
            raise ValueError("a 2-CTA cluster walks its tiles statically: use scheduler 'static' with cluster_m 2")
        if self.cluster_m > 1 and self.discrete_weights:
            raise ValueError("2-CTA clusters are built for dense weights only: use cluster_m 1 with discrete weights")
        if self.consumer not in CONSUMERS:
            raise ValueError(f"consumer must be one of {list(CONSUMERS)}, got {self.consumer!r}")
        if self.register_epilogue and self.accumulators_per_thread > MAX_REGISTER_ACCUMULATORS:
            widest = MAX_REGISTER_ACCUMULATORS * THREADS_PER_WARPGROUP * self.tile_warpgroups // self.tile_m
            raise ValueError(
                f"consumer {self.consumer!r} keeps a tile's accumulators in the MMA threads' registers: tile "
                f"{self.tile_m}x{self.tile_n} needs {self.accumulators_per_thread} per thread, at most "
                f"{MAX_REGISTER_ACCUMULATORS} fit: use tile_n <= {widest}"
            )
        if self.num_stages < MIN_STAGES:
            raise ValueError(
                f"tile {self.tile_m}x{self.tile_n} with C {self.c_dtype} and D {self.d_dtype} "
                f"leaves shared memory for {self.num_stages} pipeline stages; it needs {MIN_STAGES}: "
                "use a narrower tile_n"
            )

    @property
    def tile_ms(self) -> tuple[int, ...]:
        """The tile heights the consumer builds: one warpgroup's 64-row blocks (ping-pong), or
        64 rows for each of the two MMA warpgroups."""
        return PINGPONG_TILE_MS if self.pingpong else (TILE_M,)

    @property
    def slots(self) -> SlotRing:
        """C and D move by TMA one group at a time: their boxes are the manifest's box rules."""
        return SlotRing(self.tile_m, self.c_dtype, self.d_dtype)

    @property
    def pingpong(self) -> bool:
        """Each MMA warpgroup owns alternate tiles and runs their epilogue in registers."""
        return self.consumer == "pingpong"

    @property
    def register_epilogue(self) -> bool:
        """The MMA warpgroups run the epilogue on their accumulators (no staging buffer)."""
        return self.consumer in REGISTER_EPILOGUE_CONSUMERS

    @property
    def tile_warpgroups(self) -> int:
        """MMA warpgroups that share one tile."""
        return 1 if self.pingpong else NUM_MMA_WARPGROUPS

    @property
    def accumulators_per_thread(self) -> int:
        """fp32 accumulators an MMA thread holds: one tile over its warpgroups."""
        return self.tile_m * self.tile_n // (THREADS_PER_WARPGROUP * self.tile_warpgroups)

    @property
    def threads_per_cta(self) -> int:
        return REGISTER_EPILOGUE_THREADS_PER_CTA if self.register_epilogue else THREADS_PER_CTA

    @property
    def tile_queue_readers(self) -> int:
        """Threads that pop the tile queue: the MMA warpgroups, the block mover and (the
        cooperative consumer's) epilogue warpgroups."""
        return NUM_MMA_THREADS + WARP_SIZE + (0 if self.register_epilogue else EPILOGUE_THREADS)

    @property
    def staging_bytes(self) -> int:
        """The fp32 accumulators of one tile, staged for the epilogue (none when the MMA
        warpgroups run it in registers)."""
        return 0 if self.register_epilogue else self.tile_m * self.tile_n * ACC_BITS // 8

    @property
    def ab_bytes(self) -> int:
        """Bytes of A and B one pipeline stage holds (one k-tile)."""
        return (self.tile_m + self.tile_n) * TILE_K * ELEMENT_TYPES[self.ab_dtype].bits // 8

    @property
    def num_stages(self) -> int:
        """Operand pipeline stages: what shared memory holds after the epilogue's buffers."""
        epilogue_bytes = self.staging_bytes + self.slots.bytes
        return (SMEM_CAPACITY[SMEM_ARCH] - SMEM_RESERVED - epilogue_bytes) // self.ab_bytes

    @property
    def b_tile_n(self) -> int:
        """Rows of B's tile each CTA loads: with a 2-CTA cluster, half, multicast to both."""
        return self.tile_n // self.cluster_m
DESCRIPTOR_THREADS = 128  # b_descriptors: experts per block
FINISH_THREADS = 256  # the finishers' threads per block (dbias_finish, dprob_finish: an element each)
PARTS_FINISH_WARPS = FINISH_THREADS // WARP_SIZE  # parts_finish: the warps sharing a dbias element's slabs
# deterministic dbias: each epilogue warp's column sums of its rows of a tile (a slab)
DBIAS_SLAB_ROWS = TILE_M // (EPILOGUE_THREADS // WARP_SIZE)
TILE_QUEUE_DEPTH = 4  # tiles the producer may run ahead of the slowest role
# every role of the CTA reads the tile queue: MMA warpgroups, epilogue, block mover
TILE_QUEUE_READERS = NUM_MMA_THREADS + EPILOGUE_THREADS + WARP_SIZE
RASTER_BAND = 8  # m-tiles per raster band
