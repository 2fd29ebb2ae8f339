"""Fused grouped GEMM + dGLU backward for Hopper (sm_90a), BF16 operands, in CuTe DSL.

One persistent, warp-specialized kernel per variant (640 threads, five
warpgroups), in which the dGLU epilogue of one tile runs while the tensor
cores compute the next:

- warp 0 (the producer) loads A and B_g tiles by TMA into a multi-stage
  shared-memory ring;
- warpgroups 1 and 2 (cooperative, 64 rows each) issue WGMMA into fp32
  accumulators and, once a tile's mainloop is done, hand the accumulators
  over through a staging buffer in shared memory and go on to the next tile
  (under the runtime flag round_dgrad_to_input_dtype they stage R = alpha_g^2
  * acc itself, rounded to A's dtype, and the epilogue takes R as staged);
- warpgroups 3 and 4 (the epilogue) run the dGLU epilogue from the staging buffer,
  32 gate/input column pairs (a "group": 64 columns of C and D) at a time:
  R = alpha_g^2 * acc, the pair of C from shared memory (times
  beta_g: X = beta_g C, but for the block-scaled contract's dGeGLU), the
  pair of D written in place, row sums into dprob and column sums into an
  fp32 dbias workspace;
- warp 1 (the block mover) streams each group's C block into a small ring
  of slots by TMA and stores the D block the epilogue wrote over it (both
  marked evict-first in L2, which keeps A and B's reused tiles).

Tiles walk bands of RASTER_BAND m-tiles (blocks/tile_scheduler.py). Expert
boundaries are multiples of 256, so a 128-row tile never straddles two experts;
each tile finds its expert with a warp-parallel search of padded_offsets
(blocks/expert_search.py), and the walk stops at padded_offsets[-1].

Variants also choose:
- discrete weights (per-expert pointers in b_ptrs, K- or N-major): a prologue
  kernel (``b_descriptors``, blocks/helper_kernels.py) writes one TMA descriptor
  per expert into a workspace, from a template, on the device; the producer
  loads B through the tile's expert descriptor;
- the scheduler: the producer hands every role the CTA's tiles through a
  small queue in shared memory; static walks the grid stride, dynamic claims
  tiles past the first wave from a global counter;
- 2-CTA clusters: the CTAs of a cluster take adjacent m-tiles of one n-tile
  and share B's tile by TMA multicast;
- the activation (blocks/activations.py) and the dtypes of C and D.

A last, tiny kernel (``dbias_finish``) adds the fp32 workspace into the
caller's bf16 dbias.

Deterministic variants use no float atomics: each epilogue warp stores its rows'
dprob sums of a tile into dprob_parts[n_tile, row] and its column sums of a tile
(a slab of DBIAS_SLAB_ROWS rows) into dbias_parts[slab, column], plain stores to
elements no other tile writes; one finisher (blocks/helper_kernels.py:
``parts_finish`` with dbias, else ``dprob_finish``) then adds them up in an order
that depends on the problem alone, whatever the scheduler or the timing.

Hook points, where another family would differ: ``b_operand`` (the mainloop
operand path) and ``store_d_pair`` (the epilogue output stage).

The host entry takes only pointers and int32 extents, so the kernels'
parameters are CUtensorMaps (+ their int32 coordinate extents), raw
pointers and int32 scalars: an ABI the runtime reproduces from the
manifest without CuTe DSL. The kernels' parameters, launch shapes and TMA
rules are declared once, in interface.py; shared-memory numbers in config.py.

Constraints:
- A and B are BF16 (ab_dtype bf16), accumulation fp32; C and D bf16, fp16 or fp32.
- tile_m is 128 (two MMA warpgroups of 64 rows; registers.py's ping-pong also 64);
  tile_n is a multiple of 64.
- The pipeline must fit at least 3 stages of A and B in shared memory beside the
  staging buffer and slot ring (sm_90: 227 KiB per block).
- Dense B is K-major; b_major "n" needs discrete weights.
- Clusters are 1x1 or 2x1; a 2-CTA cluster needs dense weights and the static scheduler.
- Every expert's rows start at a multiple of 256 (padded_offsets); at most 1024 experts.
- N is a multiple of 32, K a multiple of 8; A, B, C, D and dbias 16-byte aligned.
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.tensor_utils as tensor_utils
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from dglu.contract.element_types import ELEMENT_TYPES

from ..blocks.activations import ACTIVATIONS, scales_c_by_beta
from ..blocks.conversions import rounded_to_bf16
from ..blocks.expert_search import expert_of_row
from ..blocks.helper_kernels import DbiasFinish, DescriptorPrologue, DprobFinish, PartsFinish
from ..blocks.mainloop import mma_k_tiles, start_tile
from ..blocks.reductions import add_column_pair, add_row_sums, store_column_pair
from ..blocks.tile_scheduler import create_tile_queue, next_tile, pop_tile, push_tile, tile_coords, cluster_rank
from ..blocks.tma_helpers import L2_EVICT_FIRST, box_smem_layout, expert_descriptor, tma_atom
from ..declaration import launch_arguments
from ..dtypes import DTYPES
from . import interface
from .config import (
    BLOCK_COLUMNS,
    DBIAS_SLAB_ROWS,
    DESCRIPTOR_THREADS,
    EPILOGUE_REGISTERS,
    EPILOGUE_SLOTS,
    EPILOGUE_THREADS,
    EPILOGUE_WARPGROUP,
    FINISH_THREADS,
    GROUP_COLUMNS,
    LAUNCH_REGISTERS,
    LOAD_REGISTERS,
    MMA_REGISTERS,
    MOVER_WARP,
    NUM_MMA_THREADS,
    NUM_MMA_WARPGROUPS,
    PRODUCER_WARP,
    RASTER_BAND,
    SWIZZLE_CHUNK_BITS,
    THREADS_PER_WARPGROUP,
    TILE_K,
    TILE_QUEUE_DEPTH,
    TILE_QUEUE_READERS,
    WARP_SIZE,
    BlockShape,
    Config,
)


def set_registers(count: int) -> None:
    """setmaxnreg this warpgroup's registers per thread to ``count``: up or down from the
    launch count (an increase instruction may not lower it, nor a decrease raise it)."""
    if count > LAUNCH_REGISTERS:
        cute.arch.setmaxregister_increase(count)
    elif count < LAUNCH_REGISTERS:
        cute.arch.setmaxregister_decrease(count)


class Sm90Bf16Kernel:
    """Builds the kernels of one variant; see the module docstring."""

    def __init__(self, config: Config):
        self.config = config
        self.tile_m, self.tile_n = config.tile_m, config.tile_n
        self.activation = ACTIVATIONS[config.act_func]
        self.c_scaled_by_beta = scales_c_by_beta(config.act_func, config.block_scaled_contract)
        # the BF16 contract's kernel takes the round_dgrad_to_input_dtype flag
        self.dgrad_rounding = interface.takes_dgrad_rounding(config)
        self.act_params = dict(config.act_params)
        self.with_dbias = config.dbias
        self.discrete_weights = config.discrete_weights
        self.b_n_major = config.b_n_major
        self.dynamic_schedule = config.dynamic_schedule
        self.deterministic = config.deterministic
        self.act_out = config.act_out
        # The CTAs of a cluster take adjacent m-tiles of the same n-tile (one
        # expert: expert bounds are multiples of 256 rows) and share B by TMA multicast.
        self.cluster_m = config.cluster_m
        # B (N, K): K contiguous, or N contiguous (discrete weights, b_major "n")
        self.b_layout = tensor_utils.LayoutEnum.COL_MAJOR if self.b_n_major else tensor_utils.LayoutEnum.ROW_MAJOR
        self.ab_dtype = DTYPES[config.ab_dtype]
        self.acc_dtype = cutlass.Float32
        self.c_dtype = DTYPES[config.c_dtype]
        self.d_dtype = DTYPES[config.d_dtype]
        self.tile_shape_mnk = (self.tile_m, self.tile_n, TILE_K)
        # each epilogue warp owns tile_m / 8 rows of the tile, one group pair per lane
        self.rows_per_epilogue_warp = self.tile_m // (EPILOGUE_THREADS // WARP_SIZE)
        self.slots = config.slots
        self.d_in_place = config.c_dtype == config.d_dtype
        self.ab_bytes = config.ab_bytes
        self.num_stages = config.num_stages
        self.prologue = DescriptorPrologue(self.ab_dtype, self.b_n_major, DESCRIPTOR_THREADS)
        self.finish = DbiasFinish(FINISH_THREADS)
        # the finishers of deterministic mode cover the rows the fused kernel's walk covers
        walk_rows = self.tile_m * self.cluster_m
        self.dprob_finish = DprobFinish(FINISH_THREADS, walk_rows)
        self.parts_finish = PartsFinish(FINISH_THREADS, DBIAS_SLAB_ROWS, walk_rows)

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
        c = box_smem_layout(*self.slots.c.box, self.c_dtype, self.slots.boxes)
        d = box_smem_layout(*self.slots.d.box, self.d_dtype, self.slots.boxes)
        return a, b, c, d

    def storage_fields(self) -> dict:
        """The shared-memory struct's fields, in order: barriers, tile queue, A and B's
        stages (as the MMA reads them), the staging buffer and the slot ring."""
        a_layout, b_layout, _, _ = self._smem_layouts()
        struct, i64 = cute.struct, cutlass.Int64
        return {
            "mainloop_barriers": struct.MemRange[i64, self.num_stages * 2],
            "tile_queue_barriers": struct.MemRange[i64, TILE_QUEUE_DEPTH * 2],
            "staging_barriers": struct.MemRange[i64, 2],
            "c_full": struct.MemRange[i64, EPILOGUE_SLOTS],
            "d_full": struct.MemRange[i64, EPILOGUE_SLOTS],
            "tile_ids": struct.MemRange[cutlass.Int32, TILE_QUEUE_DEPTH],
            "sA": struct.Align[struct.MemRange[self.ab_dtype, cute.cosize(a_layout)], 1024],
            "sB": struct.Align[struct.MemRange[self.ab_dtype, cute.cosize(b_layout)], 1024],
            "staging": struct.Align[struct.MemRange[self.acc_dtype, self.tile_m * self.tile_n], 1024],
            "sC": struct.Align[struct.MemRange[self.c_dtype, self.slots.bytes * 8 // self.c_dtype.width], 1024],
        }

    def shared_storage(self):
        return cute.struct(type("SharedStorage", (), {"__annotations__": self.storage_fields()}))

    # --------------------------------------------------------------------- host
    @cute.jit
    def host(
        self,
        a: cute.Pointer,
        b: cute.Pointer,
        c: cute.Pointer,
        d_row: cute.Pointer,
        padded_offsets: cute.Pointer,
        alpha: cute.Pointer,
        beta: cute.Pointer,
        prob: cute.Pointer,
        dprob: cute.Pointer,
        dbias_ws: cute.Pointer,
        dbias: cute.Pointer,
        b_ptrs: cute.Pointer,
        b_desc_ws: cute.Pointer,
        tile_counter: cute.Pointer,
        dprob_parts: cute.Pointer,
        dbias_parts: cute.Pointer,
        act_out: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
        round_dgrad_to_input_dtype: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """Compile-time entry: builds the TMA atoms and launches the variant's kernels.

        Only the kernels' code and signatures matter: the runtime computes
        grids and encodes descriptors itself from the manifest. With discrete
        weights, B's descriptor is a template for one expert's (N, K) matrix
        (``b``) that ``b_descriptors`` copies once per expert with that expert's address.
        """
        two_n = n * 2
        values = {
            **self.operand_atoms(a, b, c, d_row, m, n, k, l),
            "padded_offsets": padded_offsets,
            "alpha": alpha,
            "beta": beta,
            "prob": prob,
            "dprob": dprob,
            "dbias_ws": dbias_ws,
            "dbias": dbias,
            "b_ptrs": b_ptrs,
            "b_desc_ws": b_desc_ws,
            "tile_counter": tile_counter,
            "dprob_parts": dprob_parts,
            "dbias_parts": dbias_parts,
            "act_out": act_out,
            "m": m,
            "n2": two_n,
            "n_tiles": (n + self.tile_n - 1) // self.tile_n,
            "n": n,
            "k": k,
            "l": l,
            "l_n2": l * two_n,
            "round_dgrad_to_input_dtype": round_dgrad_to_input_dtype,
        }
        # recorded for the manifest: the launch's dynamic shared memory
        self.smem_bytes = self.shared_storage().size_in_bytes()
        self.launch(values, stream)

    def operand_atoms(self, a, b, c, d_row, m, n, k, l) -> dict:
        """The main kernel's TMA atoms and tensors, by the tensor names interface.py gives
        A, B, C and D_row; traced inside a host entry (another family's too)."""
        return {**self.ab_atoms(a, b, m, n, k, l), **self.cd_atoms(c, d_row, m, n)}

    def ab_atoms(self, a, b, m, n, k, l) -> dict:
        """A's and B's TMA atoms and tensors (the mainloop operand path)."""
        a_mk = cute.make_tensor(a, cute.make_layout((m, k), stride=(k, 1)))
        if cutlass.const_expr(self.discrete_weights):
            b_nkl = cute.make_tensor(b, self.prologue.expert_b_layout(n, k))
        else:
            b_nkl = cute.make_tensor(b, cute.make_layout((n, k, l), stride=(k, 1, n * k)))
        a_smem, b_smem, _, _ = self._smem_layouts()
        b_op = cpasync.CopyBulkTensorTileG2SMulticastOp() if self.cluster_m > 1 else cpasync.CopyBulkTensorTileG2SOp()
        return {
            "a": tma_atom(cpasync.CopyBulkTensorTileG2SOp(), a_mk, a_smem, (self.tile_m, TILE_K)),
            interface.b_tensor(self.config): tma_atom(
                b_op, b_nkl, b_smem, (self.tile_n, TILE_K), num_multicast=self.cluster_m
            ),
        }

    def cd_atoms(self, c, d_row, m, n) -> dict:
        """C's and D_row's TMA atoms and tensors (the slot ring's); no D_row atom where
        ``d_row`` is None (an output stage that writes D itself, e.g. sm90_mxfp8's quantizer)."""
        two_n = n * 2
        _, _, c_smem, d_smem = self._smem_layouts()
        c_mn = cute.make_tensor(c, cute.make_layout((m, two_n), stride=(two_n, 1)))
        atoms = {"c": tma_atom(cpasync.CopyBulkTensorTileG2SOp(), c_mn, c_smem, self.c_box)}
        if d_row is not None:
            d_mn = cute.make_tensor(d_row, cute.make_layout((m, two_n), stride=(two_n, 1)))
            atoms["d_row"] = tma_atom(cpasync.CopyBulkTensorTileS2GOp(), d_mn, d_smem, self.slots.d.box)
        return atoms

    def launch(self, values: dict, stream) -> None:
        """Launch the variant's kernels by their declarations (interface.py), in order."""
        for declared in interface.kernels(self.config):
            function = self.kernel_functions()[declared.role]
            options = {"cluster": [self.cluster_m, 1, 1], "smem": self.smem_bytes} if declared.role == "main" else {}
            function(*launch_arguments(declared.params, values)).launch(
                grid=[1, 1, 1], block=[declared.block, 1, 1], **options, stream=stream
            )

    def kernel_functions(self) -> dict:
        """The DSL kernel of each declared role, bound to its builder."""
        if self.deterministic:
            finishers = {"dprob_finish": self.dprob_finish.kernel, "parts_finish": self.parts_finish.kernel}
        else:
            finishers = {"dbias_finish": self.finish.kernel}
        return {"b_descriptors": self.prologue.kernel, "main": self.kernel, **finishers}

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
        round_dgrad: cutlass.Int32 | None = None,
        act_out_ptr: cute.Pointer = None,
    ):
        # round_dgrad: declared (and passed) by the BF16 contract's kernels, act_out_ptr by
        # act_out variants only; None is a compile-time constant to the DSL, so a kernel
        # without them has no such parameter
        self.run(
            tma_atom_a, mA_mk, tma_atom_b, mB_nkl, tma_atom_c, mC_mn, tma_atom_d, mD_mn, offsets_ptr, alpha_ptr,
            beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, b_desc_ws_ptr, tile_counter_ptr, n, l, round_dgrad,
            act_out_ptr, None, None,
        )

    @cute.jit
    def run(
        self, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, tma_atom_c, mC_mn, tma_atom_d, mD_mn, offsets_ptr, alpha_ptr,
        beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, b_desc_ws_ptr, tile_counter_ptr, n, l, round_dgrad,
        act_out_ptr, operand_inputs, output_inputs,
    ):
        """The main kernel's body (``kernel``'s parameters); ``operand_inputs`` and
        ``output_inputs``: what another family's operand path (operand_buffers) and output
        stage (group_done) take beside them, None here. ``tma_atom_d`` None: the output stage
        stores D itself (the block mover only recycles the slots)."""
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WARPGROUP)

        if warp_idx == 0:
            for atom in (tma_atom_a, tma_atom_b, tma_atom_c, tma_atom_d):
                if cutlass.const_expr(atom is not None):
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
        queue = create_tile_queue(
            storage.tile_queue_barriers, storage.tile_ids, tile_counter_ptr,
            TILE_QUEUE_DEPTH, WARP_SIZE, TILE_QUEUE_READERS, self.cluster_m,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=(self.cluster_m, 1), is_relaxed=True)
        pipeline.pipeline_init_wait(cluster_shape_mn=(self.cluster_m, 1))

        loaded, operands = self.operand_buffers(storage, operand_inputs)
        sAcc = storage.staging.get_tensor(cute.make_layout((self.tile_m, self.tile_n), stride=(self.tile_n, 1)))
        sC = self.c_boxes(storage, c_smem)
        if cutlass.const_expr(self.d_in_place):
            sD = sC
        else:
            sD = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), d_smem.inner, dtype=self.d_dtype), d_smem.outer
            )

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
            set_registers(LOAD_REGISTERS)
            if warp_idx == PRODUCER_WARP:
                self.produce(
                    mainloop, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, *loaded, offsets, l, k_tile_count, tiles,
                    queue, b_desc_ws_ptr,
                )
            if warp_idx == MOVER_WARP:
                self.move_blocks(tma_atom_c, mC_mn, tma_atom_d, mD_mn, sC, sD, c_full, d_full, n, tiles, queue)
        elif warpgroup_idx >= EPILOGUE_WARPGROUP:
            set_registers(EPILOGUE_REGISTERS)
            ring_bytes = self.slots.bytes
            ring_c = cute.make_tensor(storage.sC.data_ptr(), cute.make_layout(ring_bytes * 8 // self.c_dtype.width))
            ring_d = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), dtype=self.d_dtype), cute.make_layout(ring_bytes * 8 // self.d_dtype.width)
            )
            staged = cute.make_tensor(storage.staging.data_ptr(), cute.make_layout(self.tile_m * self.tile_n))
            self.epilogue(
                staging, staged, ring_c, ring_d, c_full, d_full, tidx - EPILOGUE_WARPGROUP * THREADS_PER_WARPGROUP, offsets,
                alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, mA_mk.shape[0], n, l, tiles, queue,
                round_dgrad, act_out_ptr, output_inputs,
            )
        else:
            set_registers(MMA_REGISTERS)
            self.consume(
                mainloop, staging, operands, sAcc, tidx - THREADS_PER_WARPGROUP, k_tile_count, tiles, queue,
                offsets, alpha_ptr, l, round_dgrad,
            )

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
            tma_atom_b, cluster_rank(self.cluster_m), cute.make_layout(self.cluster_m),
            cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2),
        )
        b_mcast_mask = cutlass.Int16((1 << self.cluster_m) - 1) if self.cluster_m > 1 else 0

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, TILE_QUEUE_DEPTH)
        tile = queue.first
        push_tile(queue, queue_state, tile)
        queue_state.advance()
        while tile < num_tiles:
            m_tile, n_tile = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
            expert = expert_of_row(offsets, l, m_tile * self.tile_m)
            tAgA_m = tAgA[(None, m_tile, None)]
            tBgB_n, b_desc = self.b_operand(tBgB, n_tile, expert, b_desc_ws_ptr)
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
            tile = next_tile(queue, tile, self.dynamic_schedule)
            push_tile(queue, queue_state, tile)
            queue_state.advance()
        mainloop.producer_tail(state)

    @cute.jit
    def groups_in_tile(self, n_tile: cutlass.Int32, n: cutlass.Int32):
        """Epilogue groups of an n-tile that hold columns below n (n is a multiple of 32)."""
        return cutlass.min(self.tile_n, n - n_tile * self.tile_n) // BLOCK_COLUMNS

    @cute.jit
    def move_blocks(self, tma_atom_c, mC_mn, tma_atom_d, mD_mn, sC, sD, c_full, d_full, n, tiles, queue):
        """The block-mover warp: loads each group's C into the next slot of the ring,
        after storing the D block the epilogue wrote over the slot's previous group.

        The mover keeps the targets (m-tile, group column in groups of GROUP_COLUMNS
        columns) of the two groups in flight in registers, oldest first: with
        EPILOGUE_SLOTS == 2 the oldest is the group whose slot the next C goes to.
        """
        num_m_tiles, num_n_tiles, num_tiles = tiles
        # (rows, box, RestM, RestBoxes)
        gC = cute.local_tile(mC_mn, self.c_box, (None, None))
        one = cute.make_layout(1)
        tCsC, tCgC = cpasync.tma_partition(tma_atom_c, 0, one, cute.group_modes(sC, 0, 2), cute.group_modes(gC, 0, 2))
        tDsD, tDgD = None, None  # no D atom: the epilogue stored D itself
        if cutlass.const_expr(tma_atom_d is not None):
            gD = cute.local_tile(mD_mn, self.slots.d.box, (None, None))
            tDsD, tDgD = cpasync.tma_partition(
                tma_atom_d, 0, one, cute.group_modes(sD, 0, 2), cute.group_modes(gD, 0, 2)
            )
        groups_per_n_tile = self.tile_n // BLOCK_COLUMNS
        if cutlass.const_expr(EPILOGUE_SLOTS != 2):
            raise ValueError(f"move_blocks keeps the targets of 2 slots in registers; EPILOGUE_SLOTS is {EPILOGUE_SLOTS}")

        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = pop_tile(queue, queue_state)
        queue_state.advance()
        group = cutlass.Int32(0)
        older_m_tile, older_column = cutlass.Int32(0), cutlass.Int32(0)
        newer_m_tile, newer_column = cutlass.Int32(0), cutlass.Int32(0)
        while tile < num_tiles:
            m_tile, n_tile = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
            for g in range(self.groups_in_tile(n_tile, n)):
                slot = group % EPILOGUE_SLOTS
                if group >= EPILOGUE_SLOTS:
                    self.store_group(tma_atom_d, tDsD, tDgD, d_full, group - EPILOGUE_SLOTS, older_m_tile, older_column)
                column = n_tile * groups_per_n_tile + g
                older_m_tile = newer_m_tile
                older_column = newer_column
                newer_m_tile = m_tile
                newer_column = column
                with cute.arch.elect_one():
                    cute.arch.mbarrier_arrive_and_expect_tx(c_full + slot, self.slots.c.bytes)
                for box in cutlass.range_constexpr(self.c_boxes_per_group):
                    (row_box, column_box), ring_box = self.c_box_at(slot, box, m_tile, column)
                    cute.copy(
                        tma_atom_c,
                        tCgC[(None, row_box, column_box)],
                        tCsC[(None, ring_box)],
                        tma_bar_ptr=c_full + slot,
                        cache_policy=cutlass.Int64(L2_EVICT_FIRST),
                    )
                group += 1
            tile = pop_tile(queue, queue_state)
            queue_state.advance()
        if group >= EPILOGUE_SLOTS:
            self.store_group(tma_atom_d, tDsD, tDgD, d_full, group - EPILOGUE_SLOTS, older_m_tile, older_column)
        if group >= 1:
            self.store_group(tma_atom_d, tDsD, tDgD, d_full, group - 1, newer_m_tile, newer_column)

    @cute.jit
    def store_group(self, tma_atom_d, tDsD, tDgD, d_full, group: cutlass.Int32, m_tile: cutlass.Int32,
                    column: cutlass.Int32):
        """Wait for the epilogue of ``group``, store its D block to (``m_tile``, group
        ``column``), and wait until the store has read the slot (so the slot can take
        the next C); with no D atom, only the wait."""
        slot = group % EPILOGUE_SLOTS
        cute.arch.mbarrier_wait(d_full + slot, (group // EPILOGUE_SLOTS) % 2)
        if cutlass.const_expr(tma_atom_d is not None):
            self.store_d_block(tma_atom_d, tDsD, tDgD, slot, m_tile, column)

    @cute.jit
    def store_d_block(self, tma_atom_d, tDsD, tDgD, slot, m_tile: cutlass.Int32, column: cutlass.Int32):
        """``slot``'s D block to (``m_tile``, group ``column``) by TMA, waited until read."""
        for box in cutlass.range_constexpr(self.slots.d.boxes):
            cute.copy(
                tma_atom_d,
                tDsD[(None, slot * self.slots.slot_boxes + box)],
                tDgD[(None, m_tile, column * self.slots.d.boxes + box)],
                cache_policy=cutlass.Int64(L2_EVICT_FIRST),
            )
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def consume(
        self, mainloop, staging, operands, sAcc, mma_tidx, k_tile_count, tiles, queue, offsets, alpha_ptr, l,
        round_dgrad,
    ):
        """The two MMA warpgroups: each tile's mainloop, then its accumulators into
        the staging buffer for the epilogue warpgroups.

        ``round_dgrad`` non-zero (round_dgrad_to_input_dtype): they stage R = alpha_g^2 *
        acc rounded to A's dtype instead (the tile's expert found as the producer finds
        it). The flag is one value per launch, tested once per tile: the epilogue's
        per-element code does not change with it."""
        num_m_tiles, num_n_tiles, num_tiles = tiles
        tiled_mma = self._tiled_mma()
        thr_mma = tiled_mma.get_slice(mma_tidx)
        sA, sB = self.mma_operands(operands)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        tCcC = thr_mma.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))
        acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
        read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        staging_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)

        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = pop_tile(queue, queue_state)
        queue_state.advance()
        while tile < num_tiles:
            start_tile(tiled_mma, acc)
            read_state, release_state = self.accumulate(
                mainloop, read_state, release_state, tiled_mma, acc, tCrA, tCrB, k_tile_count,
                operands, mma_tidx, tile, tiles, offsets, l,
            )

            staging.producer_acquire(staging_state)
            if cutlass.const_expr(self.dgrad_rounding):
                if round_dgrad != 0:
                    m_tile, _ = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
                    expert = expert_of_row(offsets, l, m_tile * self.tile_m)
                    alpha = cute.make_tensor(alpha_ptr, cute.make_layout(l))[expert]
                    self.stage(acc, sAcc, tCcC, alpha * alpha)
                else:
                    self.stage(acc, sAcc, tCcC)
            else:
                self.stage(acc, sAcc, tCcC)
            staging.producer_commit(staging_state)
            staging_state.advance()
            tile = pop_tile(queue, queue_state)
            queue_state.advance()

    @cute.jit
    def accumulate(
        self, mainloop, read_state, release_state, tiled_mma, acc, tCrA, tCrB, k_tile_count,
        operands, mma_tidx, tile, tiles, offsets, l,
    ):
        """Mainloop operand path, consumer side: one tile's k-tiles into ``acc``; returns the
        pipeline states advanced past them. ``operands`` (operand_buffers) and the tile's
        coordinates are for an operand path that transforms stages before its WGMMAs."""
        return mma_k_tiles(tiled_mma, acc, tCrA, tCrB, mainloop, read_state, release_state, k_tile_count)

    @cute.jit
    def stage(self, acc, sAcc, tCcC, scale=None):
        """A tile's accumulators into the staging buffer; with ``scale`` (alpha_g^2), R =
        scale * acc rounded to A's dtype (bf16, the family's A) instead."""
        for i in cutlass.range_constexpr(cute.size(acc)):
            row, col = tCcC[i]
            value = acc[i]
            if cutlass.const_expr(scale is not None):
                value = rounded_to_bf16(value * scale)
            sAcc[(row, self.staged_column(row, col))] = value

    @staticmethod
    def staged_column(row, col):
        """Column of accumulator (row, col) in the staging buffer: 8-column blocks
        swizzled by the row, so the WGMMA fragment's rows land in different banks."""
        return col ^ ((row % 8) * 8)

    # ---------------------------------------------------------------- epilogue
    @cute.jit
    def epilogue(
        self, staging, staged, ring_c, ring_d, c_full, d_full, epi_tidx, offsets,
        alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, m, n, l, tiles, queue, round_dgrad, act_out_ptr,
        output_inputs,
    ):
        """The epilogue warpgroups: dGLU on each tile's staged accumulators, group by group.

        Epilogue warp w (of 8) owns rows [16w, 16w + 16) of the tile; in a group, lane j handles
        gate/input pair j (C/D columns j and 32 + j of the group) on each of those
        rows. A lane keeps its rows' dprob partial sums over the whole tile and
        its pair's dbias column sums over the group. Groups at or past n are
        skipped (the TMA store would clip them anyway). ``staged`` is the staging
        buffer and ``ring_c``/``ring_d`` the slot ring, as flat views (ring_offset
        applies the swizzle).

        Deterministic mode: ``dprob_ptr`` and ``dbias_ws_ptr`` are dprob_parts [n_tiles, m]
        and dbias_parts [m_slabs, 2n] (the module docstring), written by plain stores.

        X, the activation's input, is C times the expert's beta (c_scaled_by_beta) or C as
        stored. ``round_dgrad`` non-zero (round_dgrad_to_input_dtype): the MMA warpgroups
        staged R itself, rounded (consume), so the tile's scale is 1.

        act_out variants also store prob * GLU(X) (the dprob term times the row's prob) in
        bf16 into act_out (m, n) at ``act_out_ptr``: on each row the warp's 32 lanes write
        32 adjacent columns (64 contiguous bytes per store instruction).
        """
        num_m_tiles, num_n_tiles, num_tiles = tiles
        rows = self.rows_per_epilogue_warp
        lane = cute.arch.lane_idx()
        first_row = cute.arch.make_warp_uniform(epi_tidx // WARP_SIZE) * rows
        alpha_all = cute.make_tensor(alpha_ptr, cute.make_layout(l))
        beta_all = cute.make_tensor(beta_ptr, cute.make_layout(l))
        prob_all = cute.make_tensor(prob_ptr, cute.make_layout(offsets[l - 1]))
        if cutlass.const_expr(self.deterministic):
            num_slabs = (m + DBIAS_SLAB_ROWS - 1) // DBIAS_SLAB_ROWS
            dprob_parts = cute.make_tensor(dprob_ptr, cute.make_layout((num_n_tiles, m), stride=(m, 1)))
            dbias_parts = cute.make_tensor(dbias_ws_ptr, cute.make_layout((num_slabs, 2 * n), stride=(2 * n, 1)))
        else:
            dprob_all = cute.make_tensor(dprob_ptr, cute.make_layout(offsets[l - 1]))
            dbias_ws = cute.make_tensor(dbias_ws_ptr, cute.make_layout((l, 2 * n), stride=(2 * n, 1)))
        if cutlass.const_expr(self.act_out):
            # 64-bit row stride: m * n may pass 2**31
            act_out_all = cute.make_tensor(act_out_ptr, cute.make_layout((m, n), stride=(cutlass.Int64(n), 1)))
        dprob_rows = cute.make_rmem_tensor((rows,), cutlass.Float32)
        if cutlass.const_expr(self.dgrad_rounding):
            r_staged = round_dgrad != 0

        staging_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        tile = pop_tile(queue, queue_state)
        queue_state.advance()
        group = cutlass.Int32(0)
        while tile < num_tiles:
            m_tile, n_tile = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
            row0 = m_tile * self.tile_m + first_row
            expert = expert_of_row(offsets, l, row0)
            scale = alpha_all[expert] * alpha_all[expert]
            if cutlass.const_expr(self.dgrad_rounding):
                scale = cutlass.select_(r_staged, cutlass.Float32(1.0), scale)
            beta = beta_all[expert]
            my_prob = prob_all[row0 + lane % rows]  # lane j holds the prob of row j % rows
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
                    gate_at = self.c_offset(slot, first_row, k, 0, lane, rows_8)
                    input_at = self.c_offset(slot, first_row, k, BLOCK_COLUMNS, lane, rows_8)
                    gate = ring_c[gate_at].to(cutlass.Float32)
                    x = ring_c[input_at].to(cutlass.Float32)
                    if cutlass.const_expr(self.c_scaled_by_beta):
                        gate, x = gate * beta, x * beta
                    grad = staged[(first_row + k + rows_8) * self.tile_n + self.staged_column(k, pair)] * scale
                    d_gate, d_input, d_prob = self.activation(gate, x, self.act_params)
                    prob = cute.arch.shuffle_sync(my_prob, r)  # prob of row r
                    scaled = grad * prob
                    d_gate_out, d_input_out = self.store_d_pair(
                        ring_d, slot, first_row, k, lane, rows_8, scaled, d_gate, d_input
                    )
                    gate_sum = gate_sum + d_gate_out.to(cutlass.Float32)
                    input_sum = input_sum + d_input_out.to(cutlass.Float32)
                    dprob_rows[r] = dprob_rows[r] + grad * d_prob
                    if cutlass.const_expr(self.act_out):
                        act_out_all[(row0 + r, n_tile * self.tile_n + pair)] = (prob * d_prob).to(cutlass.BFloat16)
                self.group_done(
                    ring_d, slot, d_full, m_tile * self.tile_m, 2 * n_tile * self.tile_n + g * GROUP_COLUMNS,
                    epi_tidx, output_inputs,
                )
                if cutlass.const_expr(self.with_dbias):
                    column = 2 * n_tile * self.tile_n + g * GROUP_COLUMNS + lane
                    if cutlass.const_expr(self.deterministic):
                        slab = row0 // DBIAS_SLAB_ROWS
                        store_column_pair(dbias_parts[(slab, None)], column, gate_sum, input_sum, BLOCK_COLUMNS)
                    else:
                        add_column_pair(dbias_ws[(expert, None)], column, gate_sum, input_sum, BLOCK_COLUMNS)
                group += 1
            staging.consumer_release(staging_state)
            staging_state.advance()
            if cutlass.const_expr(self.deterministic):
                add_row_sums(dprob_rows, dprob_parts[(n_tile, None)], row0, lane, atomically=False)
            else:
                add_row_sums(dprob_rows, dprob_all, row0, lane)
            tile = pop_tile(queue, queue_state)
            queue_state.advance()

    def ring_offset(self, block: BlockShape, slot, first_row, k: int, col0: int, lane, rows_8: int):
        """Element offset, in a flat view of the slot ring in ``block``'s dtype, of group
        column col0 + lane (col0 0 or 32, lane < 32) on row first_row + k + rows_8 of ``slot``
        (first_row and rows_8 multiples of 8, k < 8).

        TMA's 128-byte swizzle XORs a row's 16-byte chunk index with the row % 8 = k;
        keeping the constant parts (k, col0, rows_8) apart lets the compiler fold them
        into the shared-memory instructions' offsets.
        """
        chunk = SWIZZLE_CHUNK_BITS // ELEMENT_TYPES[block.dtype].bits  # elements per 16-byte chunk
        box = col0 // block.box_cols
        within = col0 % block.box_cols  # + lane: still inside the box (box_cols >= 32)
        box_base = (slot * self.slots.slot_boxes + box) * self.tile_m * block.box_cols
        swizzled = (((within + lane) // chunk) ^ k) * chunk + lane % chunk
        return box_base + (first_row + k + rows_8) * block.box_cols + swizzled

    # ------------------------------------------------------------- hook points
    # What a family variant changes is confined to these methods: the mainloop operand
    # path (operand_buffers, mma_operands, b_operand, accumulate), C's place in the slot
    # ring (c_box, c_boxes_per_group, c_boxes, c_box_at, c_offset) and the output stage
    # (store_d_pair, group_done).
    @property
    def c_box(self) -> tuple[int, int]:
        """(rows, columns) of one of C's TMA boxes: one 128-byte swizzle row by the tile's rows."""
        return self.slots.c.box

    @property
    def c_boxes_per_group(self) -> int:
        """C's TMA boxes per epilogue group."""
        return self.slots.c.boxes

    def c_boxes(self, storage, c_smem):
        """The slot ring as C's TMA boxes (rows, columns, boxes), swizzled as ``c_smem``."""
        return storage.sC.get_tensor(c_smem.outer, swizzle=c_smem.inner)

    def c_box_at(self, slot, box: int, m_tile, column):
        """Where C's box ``box`` of the group at (``m_tile``, group ``column``) in ``slot``
        moves: ((row, column) of its TMA box in C, its box in the ring)."""
        return (m_tile, column * self.slots.c.boxes + box), slot * self.slots.slot_boxes + box

    def c_offset(self, slot, first_row, k: int, col0: int, lane, rows_8: int):
        """Element offset of C in the flat view of the ring: ring_offset's, of C's boxes."""
        return self.ring_offset(self.slots.c, slot, first_row, k, col0, lane, rows_8)

    def operand_buffers(self, storage, operand_inputs):
        """Mainloop operand path: the shared-memory tensors the producer's TMA loads (A's
        and B's stages), and what the MMA warpgroups take (mma_operands reads it and
        accumulate gets it); ``operand_inputs``: run's (None: BF16 operands need nothing)."""
        a_smem, b_smem, _, _ = self._smem_layouts()
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        return (sA, sB), (sA, sB)

    @staticmethod
    def mma_operands(operands):
        """The staged A and B tensors the WGMMAs read, of ``operands`` (operand_buffers)."""
        return operands

    @cute.jit
    def b_operand(self, tBgB, n_tile, expert, b_desc_ws_ptr):
        """Mainloop operand path: B's k-tiles of ``n_tile`` for ``expert``, and the descriptor
        the producer loads them by (None: the kernel parameter's).

        Dense weights index the expert's matrix of B (N, K, L); discrete weights read
        one expert's matrix through that expert's descriptor, which b_descriptors wrote.
        """
        if cutlass.const_expr(self.discrete_weights):
            tBgB_n = tBgB[(None, n_tile, None)]
            cpasync.fence_tma_desc_acquire(expert_descriptor(b_desc_ws_ptr, expert))
            return tBgB_n, expert_descriptor(b_desc_ws_ptr, expert, cute.AddressSpace.generic)
        else:
            return tBgB[(None, n_tile, None, expert)], None

    @cute.jit
    def group_done(self, ring_d, slot, d_full, tile_row, group_column, epi_tidx, output_inputs):
        """Epilogue output stage, once a thread has written its rows of a group's D into
        ``slot``: hand the slot to the block mover, which stores it by TMA (``tile_row``,
        ``group_column``: the block's first row and D column; ``output_inputs``: run's)."""
        # D is in shared memory: make it visible to the TMA store
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.mbarrier_arrive(d_full + slot)

    @cute.jit
    def store_d_pair(self, ring_d, slot, first_row, k: int, lane, rows_8: int, scaled, d_gate, d_input):
        """Epilogue output stage: D of one gate/input pair of a row, ``scaled`` times the
        activation's gradients, converted to D's dtype and written over C in ``slot``.
        Returns the two values as stored (the dbias sums add those)."""
        d_gate_out = (scaled * d_gate).to(self.d_dtype)
        d_input_out = (scaled * d_input).to(self.d_dtype)
        if cutlass.const_expr(not self.d_in_place):
            # D of a row, in another dtype, overwrites that row's C: all of it read first
            cute.arch.sync_warp()
        ring_d[self.ring_offset(self.slots.d, slot, first_row, k, 0, lane, rows_8)] = d_gate_out
        ring_d[self.ring_offset(self.slots.d, slot, first_row, k, BLOCK_COLUMNS, lane, rows_8)] = d_input_out
        return d_gate_out, d_input_out
