"""The sm90 BF16 kernels whose MMA warpgroups run the dGLU epilogue in their own registers
(key field consumer "pingpong" or "cooperative_rf"; kernel.py's "cooperative" kernel
stages the accumulators for epilogue warpgroups instead).

384 threads, three warpgroups:

- warp 0 (the producer) and warp 1 (the block mover) as in kernel.py: A and B_g by TMA
  into the operand ring, each tile handed to every role through the tile queue, C
  streamed into a ring of EPILOGUE_SLOTS group slots and D stored back by TMA from it;
- warpgroups 1 and 2, the MMA warpgroups, run each tile's mainloop and then the dGLU
  epilogue on the accumulators in their registers:
  - "pingpong": each owns alternate tiles of the CTA's walk (the whole tile over one
    warpgroup: 128 x tile_n as two m64 WGMMA blocks, or 64 x 256 as one, so that its
    instructions are m64n256k16) and runs its epilogue while the other runs the next tile's
    mainloop. Named barriers hand the tensor cores, and the epilogue's slot ring, over in
    tile order: a warpgroup starts a mainloop (an epilogue) only once the other has run
    the previous tile's;
  - "cooperative_rf": both work on every tile, 64 rows each (so a 128 x 256 tile fits
    their registers), and the producer fills the next tile's stages during the epilogue.

No fp32 staging buffer and no epilogue warpgroups: the shared memory they took goes to
operand stages and wider tiles. The epilogue reads C and writes D in the slot ring in
group order (the ring's barriers order the two warpgroups' epilogues, which the tile order
already alternates); its output stage is an object the family passes in
(blocks/d_output.py), and its mainloop operand path is kernel.py's hook points
(storage_fields, operand_buffers, mma_operands, accumulate), as the staged kernel's.

A thread holds the WGMMA accumulator fragment: rows 64 mi + 16 w + lane / 4 + 8 h (w the
warp among the tile's MMA warps) and column pairs 8 j + 2 (lane % 4) + {0, 1}. An
epilogue group is 32 R columns (j = 4 g .. 4 g + 3): the gate of R column c of the group
is slot column c and its input slot column 32 + c. dprob: each thread's rows, summed over
its columns, reduced over the lane quad; dbias: each thread's column sums over its rows,
reduced over the 8 lanes of a warp that share the columns, one atomic (or, deterministic,
one store per 16-row slab) per column and warp.
"""

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from dglu.contract.element_types import ELEMENT_TYPES

from ..blocks.conversions import rounded_to_bf16
from ..blocks.expert_search import expert_of_row
from ..blocks.mainloop import start_tile
from ..blocks.reductions import add_column_pair, atomic_add_f32, reduce_scatter, store_column_pair
from ..blocks.tile_scheduler import create_tile_queue, pop_tile, tile_coords
from .config import (
    BLOCK_COLUMNS,
    DBIAS_SLAB_ROWS,
    EPILOGUE_SLOTS,
    MOVER_WARP,
    PRODUCER_WARP,
    RASTER_BAND,
    REGISTER_EPILOGUE_LAUNCH_REGISTERS,
    REGISTER_EPILOGUE_LOAD_REGISTERS,
    REGISTER_EPILOGUE_MMA_REGISTERS,
    SWIZZLE_CHUNK_BITS,
    THREADS_PER_WARPGROUP,
    TILE_K,
    TILE_QUEUE_DEPTH,
    WARP_SIZE,
    BlockShape,
    Config,
)
from .kernel import Sm90Bf16Kernel

# named barriers (0 is __syncthreads'): MMA warpgroup w may start its next mainloop, and
# its next epilogue
TURN_BARRIERS = (1, 2)
EPILOGUE_TURN_BARRIERS = (3, 4)
TURN_THREADS = 2 * THREADS_PER_WARPGROUP  # one warpgroup arrives, the other waits
# the lane bits over which a warp's threads share columns (lane / 4) and rows (lane % 4)
COLUMN_LANE_BITS = (16, 8, 4)
ROW_LANE_BITS = (2, 1)
MMA_WARPS_PER_WARPGROUP = THREADS_PER_WARPGROUP // WARP_SIZE
FRAGMENT_ROWS = 2  # rows per thread per 64-row WGMMA block (h: +0, +8)
PAIR = 2  # adjacent columns per thread per 8-column block (e)


def set_registers(count: int) -> None:
    """setmaxnreg this warpgroup's registers per thread to ``count``, from the launch count."""
    if count > REGISTER_EPILOGUE_LAUNCH_REGISTERS:
        cute.arch.setmaxregister_increase(count)
    elif count < REGISTER_EPILOGUE_LAUNCH_REGISTERS:
        cute.arch.setmaxregister_decrease(count)


class Sm90Bf16RegisterEpilogueKernel(Sm90Bf16Kernel):
    """Builds the kernels of one "pingpong" or "cooperative_rf" variant; see the module
    docstring. The host entry, producer, block mover and helper kernels are kernel.py's."""

    def __init__(self, config: Config, output_stage):
        super().__init__(config)
        self.output_stage = output_stage
        self.pingpong = config.pingpong
        # the warpgroups on one tile, and the threads that run a group's epilogue
        self.tile_warpgroups = config.tile_warpgroups
        self.tile_threads = self.tile_warpgroups * THREADS_PER_WARPGROUP
        self.turns = 2 if self.pingpong else 1  # warpgroups taking tiles in turn
        self.blocks_per_group = BLOCK_COLUMNS // 8  # 8-column accumulator blocks per group
        self.m_blocks = self.tile_m // 64 // self.tile_warpgroups  # 64-row WGMMA blocks per thread

    def _tiled_mma(self) -> cute.TiledMma:
        """The MMA of one tile: one warpgroup over all its rows (tile_m / 64 WGMMA blocks),
        or two over 64 rows each."""
        return sm90_utils.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            warpgroup.OperandMajorMode.K,
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.tile_warpgroups, 1, 1),
            tiler_mn=(64, self.tile_n),
        )

    def storage_fields(self) -> dict:
        """kernel.py's fields but for the staging buffer (and its barriers): no fp32 staging."""
        fields = super().storage_fields()
        del fields["staging_barriers"], fields["staging"]
        return fields

    @cute.jit
    def run(
        self, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, tma_atom_c, mC_mn, tma_atom_d, mD_mn, offsets_ptr, alpha_ptr,
        beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, b_desc_ws_ptr, tile_counter_ptr, n, l, round_dgrad,
        act_out_ptr, operand_inputs, output_inputs,
    ):
        """The main kernel's body, called by kernel.py's ``kernel`` entry (so that a family's
        entry calls either consumer alike): ``operand_inputs`` is what another
        family's mainloop operand path (operand_buffers, accumulate) takes. The output stage
        here is the ``output_stage`` object, so ``output_inputs`` must be None."""
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WARPGROUP)

        if warp_idx == 0:
            for atom in (tma_atom_a, tma_atom_b, tma_atom_c, tma_atom_d):
                cpasync.prefetch_descriptor(atom)

        _, _, c_smem, d_smem = self._smem_layouts()
        storage = utils.SmemAllocator().allocate(self.shared_storage())
        c_full = storage.c_full.data_ptr()
        d_full = storage.d_full.data_ptr()
        if tidx == 0:
            for slot in cutlass.range_constexpr(EPILOGUE_SLOTS):
                cute.arch.mbarrier_init(c_full + slot, 1)
                # the MMA threads of a tile run its groups' epilogue
                cute.arch.mbarrier_init(d_full + slot, self.tile_threads)
        mainloop = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.mainloop_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # a tile's MMA warps release a stage, in every CTA it was multicast to
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.cluster_m * self.tile_warpgroups * MMA_WARPS_PER_WARPGROUP
            ),
            tx_count=self.ab_bytes,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
            defer_sync=True,
        )
        queue = create_tile_queue(
            storage.tile_queue_barriers, storage.tile_ids, tile_counter_ptr,
            TILE_QUEUE_DEPTH, WARP_SIZE, self.config.tile_queue_readers, self.cluster_m,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=(self.cluster_m, 1), is_relaxed=True)
        pipeline.pipeline_init_wait(cluster_shape_mn=(self.cluster_m, 1))

        loaded, operands = self.operand_buffers(storage, operand_inputs)
        sC = self.c_boxes(storage, c_smem)
        if cutlass.const_expr(self.d_in_place):
            sD = sC
        else:
            sD = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), d_smem.inner, dtype=self.d_dtype), d_smem.outer
            )

        offsets = cute.make_tensor(offsets_ptr, cute.make_layout(l))
        # as kernel.py: rows past padded_offsets[-1] (or A's rows) belong to no tile
        num_m_tiles = cutlass.min(offsets[l - 1], mA_mk.shape[0]) // self.tile_m
        num_n_tiles = (n + self.tile_n - 1) // self.tile_n
        num_tiles = num_m_tiles // self.cluster_m * num_n_tiles
        k_tile_count = (mA_mk.shape[1] + TILE_K - 1) // TILE_K
        tiles = (num_m_tiles, num_n_tiles, num_tiles)

        if warpgroup_idx == 0:
            set_registers(REGISTER_EPILOGUE_LOAD_REGISTERS)
            if warp_idx == PRODUCER_WARP:
                self.produce(
                    mainloop, tma_atom_a, mA_mk, tma_atom_b, mB_nkl, *loaded, offsets, l, k_tile_count, tiles,
                    queue, b_desc_ws_ptr,
                )
            if warp_idx == MOVER_WARP:
                self.move_blocks(tma_atom_c, mC_mn, tma_atom_d, mD_mn, sC, sD, c_full, d_full, n, tiles, queue)
        else:
            set_registers(REGISTER_EPILOGUE_MMA_REGISTERS)
            # the thread among the tile's MMA threads (cooperative_rf: warpgroup 2 takes the
            # tile's first 64 rows); tidx % a power of two keeps its low bits known to the
            # compiler, which merges the epilogue's paired shared-memory accesses
            ring_bytes = self.slots.bytes
            ring_c = cute.make_tensor(storage.sC.data_ptr(), cute.make_layout(ring_bytes * 8 // self.c_dtype.width))
            ring_d = cute.make_tensor(
                cute.recast_ptr(storage.sC.data_ptr(), dtype=self.d_dtype),
                cute.make_layout(ring_bytes * 8 // self.d_dtype.width),
            )
            self.consume_pingpong(
                mainloop, operands, ring_c, ring_d, c_full, d_full, warpgroup_idx - 1,
                tidx % self.tile_threads, k_tile_count, tiles, queue, offsets, alpha_ptr, beta_ptr, prob_ptr,
                dprob_ptr, dbias_ws_ptr, mA_mk.shape[0], n, l, round_dgrad, act_out_ptr,
            )

    # ------------------------------------------------------------------ consumer
    @cute.jit
    def consume_pingpong(
        self, mainloop, operands, ring_c, ring_d, c_full, d_full, mine, mma_tidx, k_tile_count, tiles, queue,
        offsets, alpha_ptr, beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, m, n, l, round_dgrad, act_out_ptr,
    ):
        """MMA warpgroup ``mine`` (0 or 1; ``mma_tidx`` its thread among the tile's MMA
        threads): the mainloop and epilogue of each tile, or with "pingpong" those of the
        CTA's tiles 2 i + mine, skipping the other warpgroup's stages and epilogue groups.

        Ping-pong's tensor cores and epilogues pass in tile order: before the mainloop
        (and the epilogue) of any tile but the CTA's first, the warpgroup waits on its
        turn barrier, which the other warpgroup arrives on once it has run the previous
        tile's mainloop (epilogue) and seen that a next tile exists (so every arrive has
        its wait)."""
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
        queue_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, TILE_QUEUE_DEPTH)
        my_turn = cute.arch.make_warp_uniform(TURN_BARRIERS[0] + mine)
        their_turn = cute.arch.make_warp_uniform(TURN_BARRIERS[1] - mine)
        my_epilogue = cute.arch.make_warp_uniform(EPILOGUE_TURN_BARRIERS[0] + mine)
        their_epilogue = cute.arch.make_warp_uniform(EPILOGUE_TURN_BARRIERS[1] - mine)

        tile = pop_tile(queue, queue_state)
        queue_state.advance()
        ordinal = cutlass.Int32(0)  # the tile's place in the CTA's walk
        group = cutlass.Int32(0)  # the first epilogue group of the tile, over both warpgroups
        while tile < num_tiles:
            m_tile, n_tile = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
            groups = self.groups_in_tile(n_tile, n)
            next_tile = tile
            if ordinal % self.turns == mine % self.turns:
                # the epilogue's per-tile global reads, issued before the turn wait and the
                # mainloop they overlap, not on the epilogue's critical path
                expert, alpha, beta, probs = self.tile_scalars(tCcC, m_tile, offsets, alpha_ptr, beta_ptr, prob_ptr, m, l)
                if cutlass.const_expr(self.pingpong):
                    if ordinal > 0:
                        cute.arch.barrier(barrier_id=my_turn, number_of_threads=TURN_THREADS)
                start_tile(tiled_mma, acc)
                read_state, release_state = self.accumulate(
                    mainloop, read_state, release_state, tiled_mma, acc, tCrA, tCrB, k_tile_count,
                    operands, mma_tidx, tile, tiles, offsets, l,
                )
                next_tile = pop_tile(queue, queue_state)
                if cutlass.const_expr(self.pingpong):
                    if next_tile < num_tiles:
                        cute.arch.barrier_arrive(barrier_id=their_turn, number_of_threads=TURN_THREADS)
                    # the epilogues take the slot ring's groups in order: a slot's barrier
                    # tells its phases apart only by parity, so a warpgroup may not wait
                    # for a group two phases ahead while the other still consumes the slot
                    if ordinal > 0:
                        cute.arch.barrier(barrier_id=my_epilogue, number_of_threads=TURN_THREADS)
                self.epilogue_in_registers(
                    acc, tCcC, ring_c, ring_d, c_full, d_full, group, groups, m_tile, n_tile, mma_tidx, expert,
                    alpha, beta, probs, dprob_ptr, dbias_ws_ptr, m, n, l, round_dgrad, act_out_ptr,
                )
                if cutlass.const_expr(self.pingpong):
                    if next_tile < num_tiles:
                        cute.arch.barrier_arrive(barrier_id=their_epilogue, number_of_threads=TURN_THREADS)
            else:
                read_state.advance(k_tile_count)
                release_state.advance(k_tile_count)
                next_tile = pop_tile(queue, queue_state)
            queue_state.advance()
            group += groups
            ordinal += 1
            tile = next_tile

    # ------------------------------------------------------------------ epilogue
    @cute.jit
    def tile_scalars(self, tCcC, m_tile, offsets, alpha_ptr, beta_ptr, prob_ptr, m, l):
        """The epilogue's global reads of tile row ``m_tile``: its expert (a warp's search
        of padded_offsets), that expert's alpha and beta, and the prob of each of the
        thread's rows (64 mi + 8 h of its fragment), in registers."""
        row0 = m_tile * self.tile_m
        expert = expert_of_row(offsets, l, row0)
        alpha = cute.make_tensor(alpha_ptr, cute.make_layout(l))[expert]
        beta = cute.make_tensor(beta_ptr, cute.make_layout(l))[expert]
        prob_all = cute.make_tensor(prob_ptr, cute.make_layout(m))
        probs = cute.make_rmem_tensor((self.m_blocks * FRAGMENT_ROWS,), cutlass.Float32)
        for mi in cutlass.range_constexpr(self.m_blocks):
            for h in cutlass.range_constexpr(FRAGMENT_ROWS):
                row, _ = tCcC[((0, h, 0), mi, 0)]
                probs[mi * FRAGMENT_ROWS + h] = prob_all[row0 + row]
        return expert, alpha, beta, probs

    @cute.jit
    def epilogue_in_registers(
        self, acc, tCcC, ring_c, ring_d, c_full, d_full, group, groups, m_tile, n_tile, mma_tidx, expert,
        alpha, beta, probs, dprob_ptr, dbias_ws_ptr, m, n, l, round_dgrad, act_out_ptr,
    ):
        """dGLU on one tile's accumulators ``acc``, group by group from the slot ring
        (``group`` the tile's first group, ``groups`` its groups below n), with the tile's
        ``expert``, its ``alpha`` and ``beta`` and the thread's rows' ``probs``
        (tile_scalars).

        R = alpha_g^2 acc (under round_dgrad_to_input_dtype rounded to bf16 first, in
        place), X = beta_g C (c_scaled_by_beta) or C; D by the output stage; dprob's row
        sums and dbias's column sums as the module docstring says; act_out variants also
        store prob * GLU(X) in bf16. Deterministic mode: ``dprob_ptr`` and
        ``dbias_ws_ptr`` are dprob_parts [n_tiles, m] and dbias_parts [m_slabs, 2n]."""
        lane = cute.arch.lane_idx()
        warp = cute.arch.make_warp_uniform(mma_tidx // WARP_SIZE)  # 16 rows each per 64-row block
        row0 = m_tile * self.tile_m
        scale = alpha * alpha
        if cutlass.const_expr(self.dgrad_rounding):
            if round_dgrad != 0:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    acc[i] = rounded_to_bf16(acc[i] * scale)
            scale = cutlass.select_(round_dgrad != 0, cutlass.Float32(1.0), scale)
        if cutlass.const_expr(self.deterministic):
            num_slabs = (m + DBIAS_SLAB_ROWS - 1) // DBIAS_SLAB_ROWS
            num_n_tiles = (n + self.tile_n - 1) // self.tile_n
            dprob_parts = cute.make_tensor(dprob_ptr, cute.make_layout((num_n_tiles, m), stride=(m, 1)))
            dbias_parts = cute.make_tensor(dbias_ws_ptr, cute.make_layout((num_slabs, 2 * n), stride=(2 * n, 1)))
        else:
            dprob_all = cute.make_tensor(dprob_ptr, cute.make_layout(m))
            dbias_ws = cute.make_tensor(dbias_ws_ptr, cute.make_layout((l, 2 * n), stride=(2 * n, 1)))
        act_out_all = None
        if cutlass.const_expr(self.act_out):
            act_out_all = cute.make_tensor(act_out_ptr, cute.make_layout((m, n), stride=(cutlass.Int64(n), 1)))

        # dprob's partial sums of the thread's rows (mi, h)
        rows_per_thread = self.m_blocks * FRAGMENT_ROWS
        dprob_rows = cute.make_rmem_tensor((rows_per_thread,), cutlass.Float32)
        dprob_rows.fill(0.0)
        # dbias's partial sums of a group: (block j, column e, [64-row block,] gate/input)
        slabs = self.m_blocks if cutlass.const_expr(self.deterministic) else 1
        column_sums = cute.make_rmem_tensor((self.blocks_per_group * PAIR * slabs * 2,), cutlass.Float32)

        for g in cutlass.range_constexpr(self.tile_n // BLOCK_COLUMNS):
            if g < groups:
                slot = (group + g) % EPILOGUE_SLOTS
                cute.arch.mbarrier_wait(c_full + slot, ((group + g) // EPILOGUE_SLOTS) % 2)
                column_sums.fill(0.0)
                for mi in cutlass.range_constexpr(self.m_blocks):
                    for h in cutlass.range_constexpr(FRAGMENT_ROWS):
                        self.epilogue_row_block(
                            acc, tCcC, ring_c, ring_d, slot, g, mi, h, scale, beta, probs, dprob_rows, column_sums,
                            slabs, row0, n_tile, act_out_all,
                        )
                # D is in shared memory: make it visible to the block mover's TMA store
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.mbarrier_arrive(d_full + slot)
                if cutlass.const_expr(self.with_dbias):
                    # lane bits 4, 3, 2 pick (j, e): lane ends with its column's sums
                    reduce_scatter(column_sums, lane, COLUMN_LANE_BITS)
                    j = lane // 16 * 2 + lane // 8 % 2
                    e = lane // 4 % 2
                    _, first_col = tCcC[((0, 0, 0), 0, 0)]  # 2 (lane % 4)
                    column = 2 * n_tile * self.tile_n + g * 2 * BLOCK_COLUMNS + 8 * j + first_col + e
                    if cutlass.const_expr(self.deterministic):
                        for mi in cutlass.range_constexpr(self.m_blocks):
                            first_row, _ = tCcC[((0, 0, 0), mi, 0)]
                            slab = (row0 + first_row) // DBIAS_SLAB_ROWS
                            store_column_pair(
                                dbias_parts[(slab, None)], column, column_sums[mi * 2], column_sums[mi * 2 + 1],
                                BLOCK_COLUMNS,
                            )
                    else:
                        add_column_pair(dbias_ws[(expert, None)], column, column_sums[0], column_sums[1], BLOCK_COLUMNS)

        # lanes of a quad hold partial sums of the same rows (mi, h): summed over the quad
        # bits the rows do not spread over, then each lane keeps one row's sum
        row_bits = ROW_LANE_BITS[len(ROW_LANE_BITS) - (rows_per_thread.bit_length() - 1):]
        for width in ROW_LANE_BITS[: len(ROW_LANE_BITS) - len(row_bits)]:
            for i in cutlass.range_constexpr(rows_per_thread):
                dprob_rows[i] = dprob_rows[i] + cute.arch.shuffle_sync_bfly(dprob_rows[i], width)
        reduce_scatter(dprob_rows, lane, row_bits)
        mi = lane % rows_per_thread // FRAGMENT_ROWS
        h = lane % FRAGMENT_ROWS
        row = row0 + 64 * mi + 16 * warp + lane // 4 + 8 * h
        if lane % 4 < rows_per_thread:
            if cutlass.const_expr(self.deterministic):
                dprob_parts[(n_tile, row)] = dprob_rows[0]
            else:
                atomic_add_f32(dprob_all.iterator + row, dprob_rows[0])

    @cute.jit
    def epilogue_row_block(
        self, acc, tCcC, ring_c, ring_d, slot, g: int, mi: int, h: int, scale, beta, probs, dprob_rows,
        column_sums, slabs: int, row0, n_tile, act_out_all,
    ):
        """One group's elements on one of the thread's rows (64 mi + 8 h of its fragment):
        all their C read first, so that D in another dtype may overwrite the row's C."""
        gates, inputs, places = [], [], []
        for j in cutlass.range_constexpr(self.blocks_per_group):
            for e in cutlass.range_constexpr(PAIR):
                index = ((e, h, g * self.blocks_per_group + j), mi, 0)
                row, col = tCcC[index]
                c = col - g * BLOCK_COLUMNS  # the R column in the group
                gate = ring_c[self.slot_offset(self.slots.c, slot, row, 0, c)].to(cutlass.Float32)
                x = ring_c[self.slot_offset(self.slots.c, slot, row, BLOCK_COLUMNS, c)].to(cutlass.Float32)
                if cutlass.const_expr(self.c_scaled_by_beta):
                    gate, x = gate * beta, x * beta
                gates.append(gate)
                inputs.append(x)
                places.append((index, row, col, c, j, e))  # at j * PAIR + e
        if cutlass.const_expr(not self.d_in_place):
            cute.arch.sync_warp()
        r = mi * FRAGMENT_ROWS + h
        prob = probs[r]
        for j in cutlass.range_constexpr(self.blocks_per_group):
            scaled, d_gates, d_inputs = [], [], []
            for e in cutlass.range_constexpr(PAIR):
                at = j * PAIR + e
                index, row, col, c, _, _ = places[at]
                grad = acc[index] * scale
                d_gate, d_input, d_prob = self.activation(gates[at], inputs[at], self.act_params)
                scaled.append(grad * prob)
                d_gates.append(d_gate)
                d_inputs.append(d_input)
                dprob_rows[r] = dprob_rows[r] + grad * d_prob
                if cutlass.const_expr(self.act_out):
                    act_out_all[(row0 + row, n_tile * self.tile_n + col)] = (prob * d_prob).to(cutlass.BFloat16)
            index, row, col, c, _, _ = places[j * PAIR]
            stored_gates, stored_inputs = self.output_stage.store_pairs(
                ring_d,
                self.slot_offset(self.slots.d, slot, row, 0, c),
                self.slot_offset(self.slots.d, slot, row, BLOCK_COLUMNS, c),
                scaled, d_gates, d_inputs,
            )
            for e in cutlass.range_constexpr(PAIR):
                at = ((j * PAIR + e) * slabs + (mi if slabs > 1 else 0)) * 2
                column_sums[at] = column_sums[at] + stored_gates[e].to(cutlass.Float32)
                column_sums[at + 1] = column_sums[at + 1] + stored_inputs[e].to(cutlass.Float32)

    def slot_offset(self, block: BlockShape, slot, row, col0: int, c):
        """Element offset, in a flat view of the slot ring in ``block``'s dtype, of group
        column col0 + c (col0 0 or 32, c < 32) on tile row ``row`` of ``slot``: TMA's
        128-byte swizzle XORs a row's 16-byte chunk index with row % 8."""
        chunk = SWIZZLE_CHUNK_BITS // ELEMENT_TYPES[block.dtype].bits  # elements per 16-byte chunk
        box = col0 // block.box_cols
        within = col0 % block.box_cols + c  # still inside the box (box_cols >= 32)
        box_base = (slot * self.slots.slot_boxes + box) * self.tile_m * block.box_cols
        swizzled = ((within // chunk) ^ (row % 8)) * chunk + within % chunk
        return box_base + row * block.box_cols + swizzled

