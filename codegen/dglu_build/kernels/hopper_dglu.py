"""Fused grouped GEMM + dGLU backward for Hopper (sm_90a), in CuTe DSL.

One persistent, warp-specialized kernel per variant (512 threads, four
warpgroups), in which the dGLU epilogue of one tile runs while the tensor
cores compute the next:

- warp 0 (the producer) loads A and B_g tiles by TMA into a multi-stage
  shared-memory ring;
- warpgroups 1 and 2 (cooperative, 64 rows each) issue WGMMA into fp32
  accumulators and, once a tile's mainloop is done, hand the accumulators
  over through a staging buffer in shared memory and go on to the next tile;
- warpgroup 3 (the epilogue) runs the dGLU epilogue from the staging buffer,
  32 gate/input column pairs (a "group": 64 columns of C and D) at a time:
  R = alpha_g^2 * acc, the pair of C from shared memory, the pair of D
  written in place, row sums into dprob and column sums into an fp32 dbias
  workspace;
- warp 1 (the block mover) streams each group's C block into a small ring
  of slots by TMA and stores the D block the epilogue wrote over it.

Tiles walk bands of RASTER_BAND m-tiles: within a band the m-tile varies
fastest, so the CTAs running together share B_g's n-tiles and a band of A
rows in L2. Expert boundaries are multiples of 256, so a 128-row tile never
straddles two experts; each tile finds its expert with a warp-parallel search of
padded_offsets, and the walk stops at padded_offsets[-1].

Variants also choose:
- discrete weights (per-expert pointers in b_ptrs, K- or N-major): a prologue
  kernel (``b_descriptors``) writes one TMA descriptor per expert into a
  workspace, from a template, on the device; the producer loads B through
  the tile's expert descriptor;
- the scheduler: the producer hands every role the CTA's tiles through a
  small queue in shared memory; static walks the grid stride, dynamic claims
  tiles past the first wave from a global counter;
- 2-CTA clusters: the CTAs of a cluster take adjacent m-tiles of one n-tile
  and share B's tile by TMA multicast.

A last, tiny kernel (``dbias_finish``) adds the fp32 workspace into the
caller's bf16 dbias.

The host entry takes only pointers and int32 extents, so the kernels'
parameters are CUtensorMaps (+ their int32 coordinate extents), raw
pointers and int32 scalars: an ABI the runtime reproduces from the
manifest without CuTe DSL.
"""

from dataclasses import dataclass, field

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.tensor_utils as tensor_utils
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

THREADS_PER_WARPGROUP = 128
NUM_MMA_WARPGROUPS = 2
NUM_MMA_THREADS = NUM_MMA_WARPGROUPS * THREADS_PER_WARPGROUP
EPILOGUE_WARPGROUP = 1 + NUM_MMA_WARPGROUPS
EPILOGUE_THREADS = THREADS_PER_WARPGROUP
THREADS_PER_CTA = (2 + NUM_MMA_WARPGROUPS) * THREADS_PER_WARPGROUP
PRODUCER_WARP = 0
MOVER_WARP = 1
WARP_SIZE = 32
# registers per thread after setmaxnreg: the load warpgroup gives most of its
# share to the MMA and epilogue warpgroups (512 threads launch with 128 each)
LOAD_REGISTERS = 40
MMA_REGISTERS = 160
EPILOGUE_REGISTERS = 152
TILE_K = 64
BLOCK_COLUMNS = 32  # gate/input interleave width of C and D: the pairs of one epilogue group
GROUP_COLUMNS = 2 * BLOCK_COLUMNS  # columns of C and D per epilogue group
EPILOGUE_SLOTS = 2  # C/D group buffers between the block mover and the epilogue
SMEM_CAPACITY = 232448  # sm_90 opt-in maximum per block
SMEM_RESERVED = 1024  # mbarriers and alignment slack
SWIZZLE_BITS = 1024  # 128-byte swizzle: the width of one TMA box row
SWIZZLE_CHUNK_BITS = 128  # it permutes 16-byte chunks within the row
RASTER_BAND = 8  # m-tiles per raster band
FINISH_THREADS = 256
TMA_DESCRIPTOR_BYTES = 128
DESCRIPTOR_THREADS = 128
TILE_QUEUE_DEPTH = 4  # tiles the producer may run ahead of the slowest role
# every role of the CTA reads the tile queue: MMA warpgroups, epilogue, block mover
TILE_QUEUE_READERS = NUM_MMA_THREADS + EPILOGUE_THREADS + WARP_SIZE
DESCRIPTORS = tensor_utils.TensorMapManager(tensor_utils.TensorMapUpdateMode.GMEM, TMA_DESCRIPTOR_BYTES)
MIN_STAGES = 3  # operand pipeline stages a tile must leave room for

DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "fp32": cutlass.Float32}


@dataclass
class TileQueue:
    """A CTA's tiles, handed from the producer warp to every other role through
    shared memory: bidx first, then every grid-th tile (static) or the next
    tile claimed from a global counter (dynamic)."""

    pipe: pipeline.PipelineAsync
    ids: cute.Tensor  # shared memory, TILE_QUEUE_DEPTH tile indices
    counter: cute.Tensor  # global Int32 counter of tiles claimed past the first wave (dynamic)
    first: cutlass.Int32
    stride: cutlass.Int32


class BlockGeometry:
    """A block of C or D moved by TMA in boxes one 128-byte swizzle row wide
    (64 16-bit or 32 fp32 columns) and ``rows`` tall."""

    def __init__(self, rows: int, cols: int, dtype: type):
        self.dtype = dtype
        self.box_cols = SWIZZLE_BITS // dtype.width
        self.boxes = cols // self.box_cols
        self.box = (rows, self.box_cols)
        self.bytes = rows * cols * dtype.width // 8

    def smem_layout(self, boxes: int):
        """``boxes`` boxes in shared memory as (rows, box columns, boxes), 128B-swizzled."""
        return sm90_utils.make_smem_layout_a(
            tensor_utils.LayoutEnum.ROW_MAJOR, (self.box[0], 0, self.box_cols), self.dtype, boxes
        )


class SlotRing:
    """The epilogue's C/D group buffers. A slot holds one group of C, which the
    epilogue overwrites with the group's D; C and D view the same bytes, each
    in its own dtype, as boxes of one 128-byte swizzle row by ``rows``."""

    def __init__(self, rows: int, c_dtype: type, d_dtype: type):
        self.c = BlockGeometry(rows, GROUP_COLUMNS, c_dtype)
        self.d = BlockGeometry(rows, GROUP_COLUMNS, d_dtype)
        self.slot_boxes = max(self.c.boxes, self.d.boxes)
        self.boxes = EPILOGUE_SLOTS * self.slot_boxes
        self.bytes = EPILOGUE_SLOTS * max(self.c.bytes, self.d.bytes)


@dataclass(frozen=True)
class Activation:
    """The dGLU flavour and the constants compiled into the epilogue."""

    name: str
    params: dict = field(default_factory=dict)


class HopperDgluKernel:
    """Builds the fused kernel of one variant; see the module docstring."""

    def __init__(
        self,
        tile_mn: tuple,
        activation: Activation,
        with_dbias: bool,
        c_dtype: type,
        d_dtype: type,
        discrete_weights: bool = False,
        b_n_major: bool = False,
        dynamic_schedule: bool = False,
        cluster_m: int = 1,
    ):
        self.tile_m, self.tile_n = tile_mn
        if self.tile_m != 64 * NUM_MMA_WARPGROUPS:
            raise ValueError(f"tile_m must be {64 * NUM_MMA_WARPGROUPS}, got {self.tile_m}")
        if self.tile_n % 64:
            raise ValueError(f"tile_n must be a multiple of 64, got {self.tile_n}")
        self.activation = activation
        self.with_dbias = with_dbias
        self.discrete_weights = discrete_weights
        if b_n_major and not discrete_weights:
            raise ValueError("b_major 'n' is for discrete weights; dense B is K-major")
        self.b_n_major = b_n_major
        self.dynamic_schedule = dynamic_schedule
        if cluster_m not in (1, 2):
            raise ValueError(f"cluster_m must be 1 or 2, got {cluster_m}")
        if cluster_m > 1 and dynamic_schedule:
            raise ValueError("a 2-CTA cluster walks its tiles statically: use scheduler 'static' with cluster_m 2")
        if cluster_m > 1 and discrete_weights:
            raise ValueError("2-CTA clusters are built for dense weights only: use cluster_m 1 with discrete weights")
        # The CTAs of a cluster take adjacent m-tiles of the same n-tile (one
        # expert: expert bounds are multiples of 256 rows) and share B by TMA multicast.
        self.cluster_m = cluster_m
        # B (N, K): K contiguous, or N contiguous (discrete weights, b_major "n")
        self.b_layout = tensor_utils.LayoutEnum.COL_MAJOR if b_n_major else tensor_utils.LayoutEnum.ROW_MAJOR
        self.ab_dtype = cutlass.BFloat16
        self.acc_dtype = cutlass.Float32
        self.c_dtype = c_dtype
        self.d_dtype = d_dtype
        self.tile_shape_mnk = (self.tile_m, self.tile_n, TILE_K)
        # each epilogue warp owns 32 rows of the tile (tile_m 128), one group pair per lane
        self.rows_per_epilogue_warp = self.tile_m // (EPILOGUE_THREADS // WARP_SIZE)
        # the butterfly steps of the dprob reduce-scatter: 16, 8, 4, 2, 1
        self.butterfly_widths = tuple(WARP_SIZE >> step for step in range(1, WARP_SIZE.bit_length()))
        # C and D move by TMA one group at a time: their boxes are the manifest's box rules
        self.slots = SlotRing(self.tile_m, c_dtype, d_dtype)
        self.d_in_place = c_dtype is d_dtype
        self.staging_bytes = self.tile_m * self.tile_n * self.acc_dtype.width // 8
        epilogue_bytes = self.staging_bytes + self.slots.bytes
        self.ab_bytes = (self.tile_m + self.tile_n) * TILE_K * self.ab_dtype.width // 8
        self.num_stages = (SMEM_CAPACITY - SMEM_RESERVED - epilogue_bytes) // self.ab_bytes
        if self.num_stages < MIN_STAGES:
            raise ValueError(
                f"tile {self.tile_m}x{self.tile_n} with C {c_dtype.__name__} and D {d_dtype.__name__} "
                f"leaves shared memory for {self.num_stages} pipeline stages; it needs {MIN_STAGES}: "
                "use a narrower tile_n"
            )

    # ------------------------------------------------------------------ layouts
    def _tiled_mma(self) -> cute.TiledMma:
        return sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            warpgroup.OperandMajorMode.K,
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (NUM_MMA_WARPGROUPS, 1, 1),
            tiler_mn=(64, self.tile_n),
        )

    def _smem_layouts(self):
        """Staged shared-memory layouts of A, B and the C and D views of the slot ring."""
        row_major = tensor_utils.LayoutEnum.ROW_MAJOR
        a = sm90_utils.make_smem_layout_a(row_major, self.tile_shape_mnk, self.ab_dtype, self.num_stages)
        b = sm90_utils.make_smem_layout_b(self.b_layout, self.tile_shape_mnk, self.ab_dtype, self.num_stages)
        c = self.slots.c.smem_layout(self.slots.boxes)
        d = self.slots.d.smem_layout(self.slots.boxes)
        return a, b, c, d

    def shared_storage(self):
        a_layout, b_layout, c_layout, _ = self._smem_layouts()

        @cute.struct
        class SharedStorage:
            mainloop_barriers: cute.struct.MemRange[cutlass.Int64, self.num_stages * 2]
            tile_queue_barriers: cute.struct.MemRange[cutlass.Int64, TILE_QUEUE_DEPTH * 2]
            staging_barriers: cute.struct.MemRange[cutlass.Int64, 2]
            c_full: cute.struct.MemRange[cutlass.Int64, EPILOGUE_SLOTS]
            d_full: cute.struct.MemRange[cutlass.Int64, EPILOGUE_SLOTS]
            tile_ids: cute.struct.MemRange[cutlass.Int32, TILE_QUEUE_DEPTH]
            slot_targets: cute.struct.MemRange[cutlass.Int32, 2 * EPILOGUE_SLOTS]
            sA: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(a_layout)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.ab_dtype, cute.cosize(b_layout)], 1024]
            staging: cute.struct.Align[cute.struct.MemRange[self.acc_dtype, self.tile_m * self.tile_n], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, cute.cosize(c_layout)], 1024]

        return SharedStorage

    # --------------------------------------------------------------------- host
    @cute.jit
    def host(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        d_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        alpha_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        prob_ptr: cute.Pointer,
        dprob_ptr: cute.Pointer,
        dbias_ws_ptr: cute.Pointer,
        dbias_ptr: cute.Pointer,
        b_ptrs_ptr: cute.Pointer,
        b_desc_ws_ptr: cute.Pointer,
        tile_counter_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """Compile-time entry: builds the TMA atoms and launches the kernels.

        Only the kernels' code and signatures matter: the runtime computes
        grids and encodes descriptors itself from the manifest. With discrete
        weights, B's descriptor is a template for one expert's (N, K) matrix
        that ``b_descriptors`` copies once per expert with that expert's address.
        """
        two_n = n * 2
        a = cute.make_tensor(a_ptr, cute.make_layout((m, k), stride=(k, 1)))
        if cutlass.const_expr(self.discrete_weights):
            b = cute.make_tensor(b_ptr, self.expert_b_layout(n, k))
        else:
            b = cute.make_tensor(b_ptr, cute.make_layout((n, k, l), stride=(k, 1, n * k)))
        c = cute.make_tensor(c_ptr, cute.make_layout((m, two_n), stride=(two_n, 1)))
        d = cute.make_tensor(d_ptr, cute.make_layout((m, two_n), stride=(two_n, 1)))
        a_smem, b_smem, c_smem, d_smem = self._smem_layouts()
        tma_atom_a, tma_a = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a, cute.slice_(a_smem, (None, None, 0)), (self.tile_m, TILE_K)
        )
        b_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1 else cpasync.CopyBulkTensorTileG2SOp()
        tma_atom_b, tma_b = cpasync.make_tiled_tma_atom(
            b_op, b, cute.slice_(b_smem, (None, None, 0)), (self.tile_n, TILE_K), num_multicast=self.cluster_m
        )
        tma_atom_c, tma_c = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), c, cute.slice_(c_smem, (None, None, 0)), self.slots.c.box
        )
        tma_atom_d, tma_d = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), d, cute.slice_(d_smem, (None, None, 0)), self.slots.d.box
        )
        # recorded for the manifest: the launch's dynamic shared memory
        self.smem_bytes = self.shared_storage().size_in_bytes()
        if cutlass.const_expr(self.discrete_weights):
            self.b_descriptors(tma_atom_b, b_ptrs_ptr, b_desc_ws_ptr, n, k, l).launch(
                grid=[1, 1, 1], block=[DESCRIPTOR_THREADS, 1, 1], stream=stream
            )
        self.kernel(
            tma_atom_a, tma_a, tma_atom_b, tma_b, tma_atom_c, tma_c, tma_atom_d, tma_d,
            offsets_ptr, alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, b_desc_ws_ptr, tile_counter_ptr,
            n, l,
        ).launch(
            grid=[1, 1, 1],
            block=[THREADS_PER_CTA, 1, 1],
            cluster=[self.cluster_m, 1, 1],
            smem=self.smem_bytes,
            stream=stream,
        )
        if cutlass.const_expr(self.with_dbias):
            self.dbias_finish(dbias_ws_ptr, dbias_ptr, l * two_n).launch(
                grid=[1, 1, 1], block=[FINISH_THREADS, 1, 1], stream=stream
            )

    # ------------------------------------------------------------------- device
    @cute.jit
    def next_tile(self, queue, tile: cutlass.Int32):
        """The producer's next tile: a grid stride on (static), or the next
        unclaimed tile of a global counter (dynamic, use_dynamic_sched)."""
        if cutlass.const_expr(self.dynamic_schedule):
            claimed = cutlass.Int32(0)
            if cute.arch.lane_idx() == 0:
                claimed = cute.arch.atomic_add(queue.counter.iterator, cutlass.Int32(1))
            return queue.stride + cute.arch.shuffle_sync(claimed, 0)
        else:
            return tile + queue.stride

    @cute.jit
    def push_tile(self, queue, state, tile: cutlass.Int32):
        """Producer warp: hand the consumers their next tile (>= num_tiles ends them)."""
        queue.pipe.producer_acquire(state)
        queue.ids[state.index] = tile
        queue.pipe.producer_commit(state)

    @cute.jit
    def pop_tile(self, queue, state):
        """Consumers: the next tile the producer handed over."""
        queue.pipe.consumer_wait(state)
        tile = queue.ids[state.index]
        queue.pipe.consumer_release(state)
        return tile

    @cute.jit
    def expert_of_row(self, offsets: cute.Tensor, l: cutlass.Int32, row: cutlass.Int32):
        """Index g of the expert owning ``row``: the first g with offsets[g] > row (at most
        l - 1, so malformed offsets cannot index past the per-expert arrays).

        A whole warp searches: each round its lanes read 32 evenly spaced offsets at
        once and a ballot narrows [lo, hi) 32-fold, so the search costs one global load
        round trip per round (1 for up to 32 experts, 2 for up to 1024).
        """
        lane = cute.arch.lane_idx()
        lo = cutlass.Int32(0)
        hi = l
        while lo < hi:
            step = (hi - lo + WARP_SIZE - 1) // WARP_SIZE
            probe = lo + lane * step
            below = cutlass.Boolean(False)
            if probe < hi:
                below = offsets[probe] <= row
            # offsets are sorted: the probes at or below the row come first
            count = cute.arch.popc(cute.arch.vote_ballot_sync(below))
            if count == 0:
                hi = lo
            else:
                hi = cutlass.min(lo + count * step, hi)
                lo = lo + (count - 1) * step + 1
        return cutlass.min(lo, l - 1)

    @cute.jit
    def tile_coords(self, tile: cutlass.Int32, num_m_tiles: cutlass.Int32, num_n_tiles: cutlass.Int32):
        """This CTA's (m-tile, n-tile) of a linear (cluster) tile index in the banded
        raster order; the CTAs of a cluster take adjacent m-tiles."""
        num_m_groups = num_m_tiles // self.cluster_m
        band = tile // (RASTER_BAND * num_n_tiles)
        first_m = band * RASTER_BAND
        band_rows = cutlass.min(RASTER_BAND, num_m_groups - first_m)
        rest = tile - first_m * num_n_tiles
        n_tile = rest // band_rows
        m_group = first_m + rest - n_tile * band_rows
        return m_group * self.cluster_m + self.cluster_rank(), n_tile

    def cluster_rank(self):
        """This CTA's rank in its cluster (0 without clusters)."""
        if self.cluster_m == 1:
            return 0
        return cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())

    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        mD_mn: cute.Tensor,
        offsets_ptr: cute.Pointer,
        alpha_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        prob_ptr: cute.Pointer,
        dprob_ptr: cute.Pointer,
        dbias_ws_ptr: cute.Pointer,
        b_desc_ws_ptr: cute.Pointer,
        tile_counter_ptr: cute.Pointer,
        n: cutlass.Int32,
        l: cutlass.Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WARPGROUP)

        if warp_idx == 0:
            for atom in (tma_atom_a, tma_atom_b, tma_atom_c, tma_atom_d):
                cpasync.prefetch_descriptor(atom)

        a_smem, b_smem, c_smem, d_smem = self._smem_layouts()
        storage = utils.SmemAllocator().allocate(self.shared_storage())
        c_full = storage.c_full.data_ptr()
        d_full = storage.d_full.data_ptr()
        if tidx == 0:
            for slot in cutlass.range_constexpr(EPILOGUE_SLOTS):
                cute.arch.mbarrier_init(c_full + slot, 1)
                cute.arch.mbarrier_init(d_full + slot, EPILOGUE_THREADS)
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mainloop_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # a stage is free once the consumer warps of every CTA it was multicast to release it
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cluster_m * NUM_MMA_WARPGROUPS * 4),
            tx_count=self.ab_bytes,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
            defer_sync=True,
        )
        # the accumulators of one tile, from the MMA warpgroups to the epilogue
        staging = pipeline.PipelineAsync.create(
            barrier_storage=storage.staging_barriers.data_ptr(),
            num_stages=1,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, NUM_MMA_THREADS),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, EPILOGUE_THREADS),
            defer_sync=True,
        )
        bidx, _, _ = cute.arch.block_idx()
        gdim, _, _ = cute.arch.grid_dim()
        queue = TileQueue(
            pipe=pipeline.PipelineAsync.create(
                barrier_storage=storage.tile_queue_barriers.data_ptr(),
                num_stages=TILE_QUEUE_DEPTH,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, WARP_SIZE),
                consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, TILE_QUEUE_READERS),
                defer_sync=True,
            ),
            ids=storage.tile_ids.get_tensor(cute.make_layout(TILE_QUEUE_DEPTH)),
            counter=cute.make_tensor(tile_counter_ptr, cute.make_layout(1)),
            first=bidx // self.cluster_m,
            stride=gdim // self.cluster_m,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=(self.cluster_m, 1), is_relaxed=True)
        pipeline.pipeline_init_wait(cluster_shape_mn=(self.cluster_m, 1))

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sAcc = storage.staging.get_tensor(cute.make_layout((self.tile_m, self.tile_n), stride=(self.tile_n, 1)))
        sC = storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)
        if cutlass.const_expr(self.d_in_place):
            sD = sC
        else:
            sD = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), d_smem.inner, dtype=self.d_dtype), d_smem.outer
            )
        slot_targets = storage.slot_targets.get_tensor(cute.make_layout((2, EPILOGUE_SLOTS)))

        offsets = cute.make_tensor(offsets_ptr, cute.make_layout(l))
        # rows past padded_offsets[-1] belong to no expert; never past A's rows, even
        # for offsets the host could not check (e.g. under graph capture)
        num_m_tiles = cutlass.min(offsets[l - 1], mA_mk.shape[0]) // self.tile_m
        num_n_tiles = (n + self.tile_n - 1) // self.tile_n
        # tiles are counted in cluster units: cluster_m adjacent m-tiles each
        num_tiles = num_m_tiles // self.cluster_m * num_n_tiles
        k_tile_count = (mA_mk.shape[1] + TILE_K - 1) // TILE_K
        tiles = (num_m_tiles, num_n_tiles, num_tiles)

        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(LOAD_REGISTERS)
            if warp_idx == PRODUCER_WARP:
                self.produce(
                    mainloop, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, sA, sB, offsets, l, k_tile_count, tiles,
                    queue, b_desc_ws_ptr,
                )
            if warp_idx == MOVER_WARP:
                self.move_blocks(tma_atom_c, mC_mn, tma_atom_d, mD_mn, sC, sD, slot_targets, c_full, d_full, n,
                                 tiles, queue)
        elif warpgroup_idx == EPILOGUE_WARPGROUP:
            cute.arch.setmaxregister_increase(EPILOGUE_REGISTERS)
            ring_bytes = self.slots.bytes
            ring_c = cute.make_tensor(storage.sC.data_ptr(), cute.make_layout(ring_bytes * 8 // self.c_dtype.width))
            ring_d = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), dtype=self.d_dtype), cute.make_layout(ring_bytes * 8 // self.d_dtype.width)
            )
            staged = cute.make_tensor(storage.staging.data_ptr(), cute.make_layout(self.tile_m * self.tile_n))
            self.epilogue(
                staging, staged, ring_c, ring_d, c_full, d_full, tidx - EPILOGUE_WARPGROUP * THREADS_PER_WARPGROUP, offsets,
                alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, n, l, tiles, queue,
            )
        else:
            cute.arch.setmaxregister_increase(MMA_REGISTERS)
            self.consume(mainloop, staging, sA, sB, sAcc, tidx - THREADS_PER_WARPGROUP, k_tile_count, tiles, queue)

    @cute.jit
    def produce(
        self, mainloop, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, sA, sB, offsets, l, k_tile_count, tiles,
        queue, b_desc_ws_ptr,
    ):
        """The producer warp: the A and B loads of this CTA's tiles, which it hands to every role."""
        num_m_tiles, num_n_tiles, num_tiles = tiles
        # (bM, bK, RestM, RestK), (bN, bK, RestN, RestK[, L])
        gA = cute.local_tile(mA_mk, (self.tile_m, TILE_K), (None, None))
        b_tiler = (None, None) if cutlass.const_expr(self.discrete_weights) else (None, None, None)
        gB = cute.local_tile(mB_nkl, (self.tile_n, TILE_K), b_tiler)
        one = cute.make_layout(1)
        tAsA, tAgA = cpasync.tma_partition(tma_atom_a, 0, one, cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        # each CTA of a cluster loads 1/cluster_m of B's tile and multicasts it to all
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b, self.cluster_rank(), cute.make_layout(self.cluster_m),
            cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
        )
        b_mcast_mask = cutlass.Int16((1 << self.cluster_m) - 1) if self.cluster_m > 1 else 0

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, TILE_QUEUE_DEPTH)
        tile = queue.first
        self.push_tile(queue, queue_state, tile)
        queue_state.advance()
        while tile < num_tiles:
            m_tile, n_tile = self.tile_coords(tile, num_m_tiles, num_n_tiles)
            expert = self.expert_of_row(offsets, l, m_tile * self.tile_m)
            tAgA_m = tAgA[(None, m_tile, None)]
            if cutlass.const_expr(self.discrete_weights):
                tBgB_n = tBgB[(None, n_tile, None)]
                cpasync.fence_tma_desc_acquire(self.expert_descriptor(b_desc_ws_ptr, expert))
                b_desc = self.expert_descriptor(b_desc_ws_ptr, expert, cute.AddressSpace.generic)
            else:
                tBgB_n = tBgB[(None, n_tile, None, expert)]
                b_desc = None
            for k_tile in range(k_tile_count):
                mainloop.producer_acquire(state)
                barrier = mainloop.producer_get_barrier(state)
                cute.copy(tma_atom_a, tAgA_m[(None, k_tile)], tAsA[(None, state.index)], tma_bar_ptr=barrier)
                cute.copy(
                    tma_atom_b, tBgB_n[(None, k_tile)], tBsB[(None, state.index)], tma_bar_ptr=barrier,
                    tma_desc_ptr=b_desc, mcast_mask=b_mcast_mask,
                )
                mainloop.producer_commit(state)
                state.advance()
            tile = self.next_tile(queue, tile)
            self.push_tile(queue, queue_state, tile)
            queue_state.advance()
        mainloop.producer_tail(state)

    @cute.jit
    def groups_in_tile(self, n_tile: cutlass.Int32, n: cutlass.Int32):
        """Epilogue groups of an n-tile that hold columns below n (n is a multiple of 32)."""
        return cutlass.min(self.tile_n, n - n_tile * self.tile_n) // BLOCK_COLUMNS

    @cute.jit
    def move_blocks(self, tma_atom_c, mC_mn, tma_atom_d, mD_mn, sC, sD, slot_targets, c_full, d_full, n, tiles, queue):
        """The block-mover warp: loads each group's C into the next slot of the ring,
        after storing the D block the epilogue wrote over the slot's previous group.

        ``slot_targets`` remembers, per slot, the m-tile and the group column
        (in groups of GROUP_COLUMNS columns) its D block goes to.
        """
        num_m_tiles, num_n_tiles, num_tiles = tiles
        # (rows, box, RestM, RestBoxes)
        gC = cute.local_tile(mC_mn, self.slots.c.box, (None, None))
        gD = cute.local_tile(mD_mn, self.slots.d.box, (None, None))
        one = cute.make_layout(1)
        tCsC, tCgC = cpasync.tma_partition(tma_atom_c, 0, one, cute.group_modes(sC, 0, 2), cute.group_modes(gC, 0, 2))
        tDsD, tDgD = cpasync.tma_partition(tma_atom_d, 0, one, cute.group_modes(sD, 0, 2), cute.group_modes(gD, 0, 2))
        groups_per_n_tile = self.tile_n // BLOCK_COLUMNS

        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = self.pop_tile(queue, queue_state)
        queue_state.advance()
        group = cutlass.Int32(0)
        while tile < num_tiles:
            m_tile, n_tile = self.tile_coords(tile, num_m_tiles, num_n_tiles)
            for g in range(self.groups_in_tile(n_tile, n)):
                slot = group % EPILOGUE_SLOTS
                if group >= EPILOGUE_SLOTS:
                    self.store_group(tma_atom_d, tDsD, tDgD, slot_targets, d_full, group - EPILOGUE_SLOTS)
                column = n_tile * groups_per_n_tile + g
                slot_targets[(0, slot)] = m_tile
                slot_targets[(1, slot)] = column
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(c_full + slot, self.slots.c.bytes)
                for box in cutlass.range_constexpr(self.slots.c.boxes):
                    cute.copy(
                        tma_atom_c,
                        tCgC[(None, m_tile, column * self.slots.c.boxes + box)],
                        tCsC[(None, slot * self.slots.slot_boxes + box)],
                        tma_bar_ptr=c_full + slot,
                    )
                group += 1
            tile = self.pop_tile(queue, queue_state)
            queue_state.advance()
        for j in cutlass.range_constexpr(EPILOGUE_SLOTS):
            if group + j >= EPILOGUE_SLOTS:
                self.store_group(tma_atom_d, tDsD, tDgD, slot_targets, d_full, group + j - EPILOGUE_SLOTS)

    @cute.jit
    def store_group(self, tma_atom_d, tDsD, tDgD, slot_targets, d_full, group: cutlass.Int32):
        """Wait for the epilogue of ``group``, store its D block, and wait until
        the store has read the slot (so the slot can take the next C)."""
        slot = group % EPILOGUE_SLOTS
        cute.arch.mbarrier_wait(d_full + slot, (group // EPILOGUE_SLOTS) % 2)
        m_tile = slot_targets[(0, slot)]
        column = slot_targets[(1, slot)]
        for box in cutlass.range_constexpr(self.slots.d.boxes):
            cute.copy(
                tma_atom_d,
                tDsD[(None, slot * self.slots.slot_boxes + box)],
                tDgD[(None, m_tile, column * self.slots.d.boxes + box)],
            )
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def consume(self, mainloop, staging, sA, sB, sAcc, mma_tidx, k_tile_count, tiles, queue):
        """The two MMA warpgroups: each tile's mainloop, then its accumulators into
        the staging buffer for the epilogue warpgroup."""
        num_tiles = tiles[2]
        tiled_mma = self._tiled_mma()
        thr_mma = tiled_mma.get_slice(mma_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))
        acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
        num_k_blocks = cute.size(tCrA, mode=[2])
        read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        staging_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)

        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = self.pop_tile(queue, queue_state)
        queue_state.advance()
        while tile < num_tiles:
            acc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            # Keep one k-tile of WGMMAs in flight: release a stage only once
            # the WGMMAs that read it have completed.
            for k_tile in range(cutlass.min(1, k_tile_count)):
                mainloop.consumer_wait(read_state)
                for kb in cutlass.range_constexpr(num_k_blocks):
                    coord = (None, None, kb, read_state.index)
                    cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
                warpgroup.commit_group()
                read_state.advance()
            for k_tile in range(1, k_tile_count):
                mainloop.consumer_wait(read_state)
                for kb in cutlass.range_constexpr(num_k_blocks):
                    coord = (None, None, kb, read_state.index)
                    cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
                warpgroup.commit_group()
                warpgroup.wait_group(1)
                mainloop.consumer_release(release_state)
                release_state.advance()
                read_state.advance()
            warpgroup.wait_group(0)
            for k_tile in range(cutlass.min(1, k_tile_count)):
                mainloop.consumer_release(release_state)
                release_state.advance()

            staging.producer_acquire(staging_state)
            for i in cutlass.range_constexpr(cute.size(acc)):
                row, col = tCcC[i]
                sAcc[(row, self.staged_column(row, col))] = acc[i]
            staging.producer_commit(staging_state)
            staging_state.advance()
            tile = self.pop_tile(queue, queue_state)
            queue_state.advance()

    @staticmethod
    def staged_column(row, col):
        """Column of accumulator (row, col) in the staging buffer: 8-column blocks
        swizzled by the row, so the WGMMA fragment's rows land in different banks."""
        return col ^ ((row % 8) * 8)

    # ---------------------------------------------------------------- epilogue
    @cute.jit
    def epilogue(
        self, staging, staged, ring_c, ring_d, c_full, d_full, epi_tidx, offsets,
        alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, n, l, tiles, queue,
    ):
        """The epilogue warpgroup: dGLU on each tile's staged accumulators, group by group.

        Warp w owns rows [32w, 32w + 32) of the tile; in a group, lane j handles
        gate/input pair j (C/D columns j and 32 + j of the group) on each of those
        rows. A lane keeps its rows' dprob partial sums over the whole tile and
        its pair's dbias column sums over the group. Groups at or past n are
        skipped (the TMA store would clip them anyway). ``staged`` is the staging
        buffer and ``ring_c``/``ring_d`` the slot ring, as flat views (ring_offset
        applies the swizzle).
        """
        num_m_tiles, num_n_tiles, num_tiles = tiles
        rows = self.rows_per_epilogue_warp
        lane = cute.arch.lane_idx()
        first_row = cute.arch.make_warp_uniform(epi_tidx // WARP_SIZE) * rows
        alpha_all = cute.make_tensor(alpha_ptr, cute.make_layout(l))
        beta_all = cute.make_tensor(beta_ptr, cute.make_layout(l))
        prob_all = cute.make_tensor(prob_ptr, cute.make_layout(offsets[l - 1]))
        dprob_all = cute.make_tensor(dprob_ptr, cute.make_layout(offsets[l - 1]))
        dbias_ws = cute.make_tensor(dbias_ws_ptr, cute.make_layout((l, 2 * n), stride=(2 * n, 1)))
        dprob_rows = cute.make_rmem_tensor((rows,), cutlass.Float32)

        staging_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = self.pop_tile(queue, queue_state)
        queue_state.advance()
        group = cutlass.Int32(0)
        while tile < num_tiles:
            m_tile, n_tile = self.tile_coords(tile, num_m_tiles, num_n_tiles)
            row0 = m_tile * self.tile_m + first_row
            expert = self.expert_of_row(offsets, l, row0)
            scale = alpha_all[expert] * alpha_all[expert]
            beta = beta_all[expert]
            my_prob = prob_all[row0 + lane]
            dprob_rows.fill(0.0)
            staging.consumer_wait(staging_state)
            for g in range(self.groups_in_tile(n_tile, n)):
                slot = group % EPILOGUE_SLOTS
                cute.arch.mbarrier_wait(c_full + slot, (group // EPILOGUE_SLOTS) % 2)
                pair = g * BLOCK_COLUMNS + lane
                gate_sum = cutlass.Float32(0.0)
                input_sum = cutlass.Float32(0.0)
                for r in cutlass.range_constexpr(rows):
                    # row first_row + r: its offsets are those of row first_row + r % 8, plus
                    # r // 8 blocks of 8 rows (the swizzles repeat every 8 rows)
                    k, rows_8 = r % 8, r // 8 * 8
                    gate_at = self.ring_offset(self.slots.c, slot, first_row, k, 0, lane, rows_8)
                    input_at = self.ring_offset(self.slots.c, slot, first_row, k, BLOCK_COLUMNS, lane, rows_8)
                    gate = ring_c[gate_at].to(cutlass.Float32)
                    x = ring_c[input_at].to(cutlass.Float32)
                    grad = staged[(first_row + k + rows_8) * self.tile_n + self.staged_column(k, pair)] * scale
                    d_gate, d_input, d_prob = self.activation_grads(gate, x, beta)
                    scaled = grad * cute.arch.shuffle_sync(my_prob, r)  # prob of row r
                    d_gate_out = (scaled * d_gate).to(self.d_dtype)
                    d_input_out = (scaled * d_input).to(self.d_dtype)
                    if cutlass.const_expr(not self.d_in_place):
                        # D of a row, in another dtype, overwrites that row's C: all of it read first
                        cute.arch.sync_warp()
                    ring_d[self.ring_offset(self.slots.d, slot, first_row, k, 0, lane, rows_8)] = d_gate_out
                    ring_d[self.ring_offset(self.slots.d, slot, first_row, k, BLOCK_COLUMNS, lane, rows_8)] = d_input_out
                    gate_sum = gate_sum + d_gate_out.to(cutlass.Float32)
                    input_sum = input_sum + d_input_out.to(cutlass.Float32)
                    dprob_rows[r] = dprob_rows[r] + grad * d_prob
                # D is in shared memory: make it visible to the TMA store
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.mbarrier_arrive(d_full + slot)
                if cutlass.const_expr(self.with_dbias):
                    column = 2 * n_tile * self.tile_n + g * GROUP_COLUMNS + lane
                    target = dbias_ws[(expert, None)].iterator + column
                    cute.arch.red(target, gate_sum, op="add", dtype="f32", sem="relaxed", scope="gpu")
                    cute.arch.red(target + BLOCK_COLUMNS, input_sum, op="add", dtype="f32", sem="relaxed", scope="gpu")
                group += 1
            staging.consumer_release(staging_state)
            staging_state.advance()
            self.add_dprob(dprob_rows, dprob_all, row0, lane)
            tile = self.pop_tile(queue, queue_state)
            queue_state.advance()

    def ring_offset(self, block: BlockGeometry, slot, first_row, k: int, col0: int, lane, rows_8: int):
        """Element offset, in a flat view of the slot ring in ``block``'s dtype, of group
        column col0 + lane (col0 0 or 32, lane < 32) on row first_row + k + rows_8 of ``slot``
        (first_row and rows_8 multiples of 8, k < 8).

        TMA's 128-byte swizzle XORs a row's 16-byte chunk index with the row % 8 = k;
        keeping the constant parts (k, col0, rows_8) apart lets the compiler fold them
        into the shared-memory instructions' offsets.
        """
        chunk = SWIZZLE_CHUNK_BITS // block.dtype.width  # elements per 16-byte chunk
        box = col0 // block.box_cols
        within = col0 % block.box_cols  # + lane: still inside the box (box_cols >= 32)
        box_base = (slot * self.slots.slot_boxes + box) * self.tile_m * block.box_cols
        swizzled = (((within + lane) // chunk) ^ k) * chunk + lane % chunk
        return box_base + (first_row + k + rows_8) * block.box_cols + swizzled

    @cute.jit
    def add_dprob(self, dprob_rows: cute.Tensor, dprob_all: cute.Tensor, row0: cutlass.Int32, lane: cutlass.Int32):
        """Add a warp's 32 row sums, spread over its lanes, into dprob[row0 + lane].

        A butterfly reduce-scatter: at each step a lane keeps the half of its
        rows selected by one bit of its lane index and adds in its partner's
        partial sums of that half, so lane j ends with the full sum of row j.
        """
        for width in self.butterfly_widths:
            upper = (lane & width) != 0
            for i in cutlass.range_constexpr(width):
                send = cutlass.select_(upper, dprob_rows[i], dprob_rows[i + width])
                keep = cutlass.select_(upper, dprob_rows[i + width], dprob_rows[i])
                dprob_rows[i] = keep + cute.arch.shuffle_sync_bfly(send, width)
        cute.arch.red(dprob_all.iterator + row0 + lane, dprob_rows[0], op="add", dtype="f32", sem="relaxed", scope="gpu")

    @cute.jit
    def activation_grads(self, gate: cutlass.Float32, x: cutlass.Float32, beta: cutlass.Float32):
        """(d_gate, d_input, dprob) of one gate/input pair, per unit of R and before prob.

        dswiglu scales C by beta; dgeglu and dsituglu read C as stored.
        """
        p = self.activation.params
        if cutlass.const_expr(self.activation.name == "dswiglu"):
            g = gate * beta
            u = x * beta
            s = self.sigmoid(g)
            act = g * s
            return u * s * (1.0 + g * (1.0 - s)), act, act * u
        elif cutlass.const_expr(self.activation.name == "dgeglu"):
            a = p["geglu_alpha"]
            hi = p["glu_clamp_max"]
            lo = p["glu_clamp_min"]
            offset = p["linear_offset"]
            gc = cute.arch.fmin(gate, cutlass.Float32(hi))
            xc = cute.arch.fmax(cute.arch.fmin(x, cutlass.Float32(hi)), cutlass.Float32(lo))
            s = self.sigmoid(a * gc)
            gate_mask = cutlass.Float32(cutlass.select_(gate <= hi, 1.0, 0.0))
            x_mask = cutlass.Float32(cutlass.select_((x >= lo) & (x <= hi), 1.0, 0.0))
            act = gc * s
            d_gate = (xc + offset) * s * (1.0 + a * gc * (1.0 - s)) * gate_mask
            return d_gate, act * x_mask, act * (xc + offset)
        else:
            # dSiTU-GLU: T_g = b1 tanh(G/b1) sigmoid(G), T_u = b2 tanh(U/b2)
            b1 = p["situ_beta1"]
            b2 = p["situ_beta2"]
            s = self.sigmoid(gate)
            tg = cute.math.tanh(gate * (1.0 / b1))
            tu = cute.math.tanh(x * (1.0 / b2))
            t_gate = b1 * tg * s
            t_input = b2 * tu
            dt_gate = (1.0 - tg * tg) * s + b1 * tg * s * (1.0 - s)
            dt_input = 1.0 - tu * tu
            return t_input * dt_gate, t_gate * dt_input, t_gate * t_input

    @cute.jit
    def sigmoid(self, z: cutlass.Float32):
        return cute.arch.rcp_approx(1.0 + cute.math.exp(-z, fastmath=True))


    def expert_b_layout(self, n, k):
        """Layout of one expert's (N, K) weight matrix (discrete weights)."""
        stride = (1, n) if self.b_n_major else (k, 1)
        return cute.make_layout((n, k), stride=stride)

    def expert_descriptor(self, b_desc_ws_ptr: cute.Pointer, expert, address_space=cute.AddressSpace.gmem):
        """Expert ``expert``'s B descriptor in the descriptor workspace, as a
        descriptor pointer (TMA copies take the generic address space)."""
        slot = cute.make_ptr(
            cutlass.Int64,
            b_desc_ws_ptr.toint() + cutlass.Int64(expert) * TMA_DESCRIPTOR_BYTES,
            cute.AddressSpace.gmem,
            assumed_align=TMA_DESCRIPTOR_BYTES,
        )
        return DESCRIPTORS.get_tensormap_ptr(slot, address_space)

    @cute.kernel
    def b_descriptors(
        self,
        tma_atom_b: cute.CopyAtom,
        b_ptrs_ptr: cute.Pointer,
        b_desc_ws_ptr: cute.Pointer,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """Discrete weights: write one TMA descriptor per expert into the workspace.

        Each is the host-encoded template with expert g's address from b_ptrs
        (a device array, so this stays correct under graph capture). A block
        covers DESCRIPTOR_THREADS experts; each warp writes 32 of them in turn,
        since the descriptor update is issued by one elected lane.
        """
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        first = bidx * DESCRIPTOR_THREADS + (tidx // 32) * 32
        b_ptrs = cute.make_tensor(b_ptrs_ptr, cute.make_layout(l))
        for j in cutlass.range(32):
            expert = first + j
            if expert < l:
                slot = self.expert_descriptor(b_desc_ws_ptr, expert)
                b_g = cute.make_tensor(
                    cute.make_ptr(self.ab_dtype, b_ptrs[expert], cute.AddressSpace.gmem, assumed_align=16),
                    self.expert_b_layout(n, k),
                )
                cpasync.copy_tensormap(tma_atom_b, slot)
                cute.arch.sync_warp()
                cpasync.update_tma_descriptor(tma_atom_b, b_g, slot)
                cute.arch.sync_warp()
        cpasync.fence_tma_desc_release()

    @cute.kernel
    def dbias_finish(self, ws_ptr: cute.Pointer, dbias_ptr: cute.Pointer, count: cutlass.Int32):
        """dbias[i] = bf16(float(dbias[i]) + workspace[i]) for i < count."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * FINISH_THREADS + tidx
        if i < count:
            ws = cute.make_tensor(ws_ptr, cute.make_layout(count))
            dbias = cute.make_tensor(dbias_ptr, cute.make_layout(count))
            dbias[i] = (dbias[i].to(cutlass.Float32) + ws[i]).to(dbias.element_type)
