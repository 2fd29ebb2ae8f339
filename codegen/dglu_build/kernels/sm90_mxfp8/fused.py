"""The sm90 MXFP8 family's fused kernel: the sm90 BF16 kernel with FP8 operands decoded in
shared memory (blocks/mxfp8_decode.py) and D quantized in its epilogue, so that no decoded
A or B and no fp32 D goes through global memory.

The kernel is sm90_bf16's (kernel.py) but for its mainloop operand path and its output
stage (the hook points):
- the producer's TMA loads FP8 tiles of A (K-major) and B (K- or N-major; dense, or one
  expert's matrix through b_descriptors' descriptor) unswizzled into ``stages`` FP8 stages;
- the two MMA warpgroups, before each k-tile's WGMMAs, read the next k-tile's scale bytes
  (SFA, SFB: global memory, L1; their rows' addresses found once a tile), wait for the
  stage, decode it into one of two BF16 buffers (128-byte swizzled, K-major for both
  operands), release the stage, and meet at a named barrier; the WGMMAs of the k-tile
  before keep running meanwhile. The decode of k-tile j (counted over all of the CTA's
  tiles) writes the buffer the WGMMAs of k-tile j - 2 read: each warpgroup waits for its own
  WGMMAs of k-tile j - 1 before the barrier of k-tile j, so that buffer is free;
- FP8 C (Sm90Mxfp8FusedFp8C) comes into the slot ring by TMA one box per epilogue warp
  (config.Fp8CBoxes), where the epilogue reads it in place, as it reads other C dtypes from
  the BF16 kernel's boxes;
- the epilogue writes each group's fp32 D into its slot of the ring as the BF16 kernel does
  (dbias and dprob from those unquantized values); then, instead of the block mover's TMA
  store, the 256 epilogue threads meet at a named barrier and quantize the slot's 128 x 64
  block from shared memory with blocks/mxfp8.py's quantize_block: thread t takes the
  32-block t % 2 of row t // 2 (D_row, SFD_row), and column t % 64 of the 32-row block
  t // 64 (D_col, SFD_col, dense or discrete_col_sfd). The block mover only recycles the
  slots.
"""

import cutlass
import cutlass.cute as cute
import cutlass.tensor_utils as tensor_utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from dglu.contract.element_types import ELEMENT_TYPES

from ..blocks.expert_search import expert_of_row
from ..blocks.helper_kernels import DescriptorPrologue
from ..blocks.mxfp8 import (
    ATOM_BYTES,
    FP8_FORMATS,
    SF_VEC,
    col_sf_offset,
    gmem_array,
    gmem_vector,
    k_atoms,
    matrix_index,
    quantize_block,
    row_atoms,
    sf_offset,
    store_byte,
)
from ..blocks.mxfp8_decode import CHUNK_WORDS, PIECE, StageDecoder
from ..blocks.tile_scheduler import tile_coords
from ..blocks.tma_helpers import box_smem_layout, tma_atom
from ..dtypes import DTYPES
from ..sm90_bf16.config import (
    DESCRIPTOR_THREADS,
    EPILOGUE_SLOTS,
    EPILOGUE_THREADS,
    GROUP_COLUMNS,
    NUM_MMA_THREADS,
    RASTER_BAND,
    SWIZZLE_CHUNK_BITS,
    TILE_K,
    Config as Bf16Config,
)
from ..sm90_bf16.interface import b_tensor
from ..sm90_bf16.kernel import Sm90Bf16Kernel
from .config import DECODED_STAGES, Fp8CBoxes, FusedGeometry

DECODE_BARRIER = 1  # named barrier of the two MMA warpgroups (0 is __syncthreads)
EPILOGUE_BARRIER = 2  # named barrier of the two epilogue warpgroups (the quantizer)
SWIZZLE_ROWS = 8  # the 128-byte swizzle repeats every 8 rows


class Sm90Mxfp8Fused(Sm90Bf16Kernel):
    """The fused kernel of one MXFP8 variant; see the module docstring."""

    def __init__(self, main: Bf16Config, fp8_dtype: str, geometry: FusedGeometry, d_dtype: str):
        super().__init__(main)
        # the FP8 D of the quantizer (its PTX name and 1/max)
        self.d_kind, self.d_rcp = FP8_FORMATS[DTYPES[d_dtype]]
        self.fp8_dtype = DTYPES[fp8_dtype]
        kind, _ = FP8_FORMATS[self.fp8_dtype]
        # decoded B is K-major whatever B's own major
        self.b_layout = tensor_utils.LayoutEnum.ROW_MAJOR
        self.prologue = DescriptorPrologue(self.fp8_dtype, self.b_n_major, DESCRIPTOR_THREADS)
        self.num_stages = geometry.stages
        self.ab_bytes = geometry.stage_bytes
        self.decode_a = StageDecoder(self.tile_m, TILE_K, False, NUM_MMA_THREADS, kind)
        self.decode_b = StageDecoder(self.tile_n, TILE_K, self.b_n_major, NUM_MMA_THREADS, kind)

    # ------------------------------------------------------------------ layouts
    def _fp8_layouts(self):
        """The FP8 stages TMA fills: unswizzled boxes, K contiguous (A, K-major B) or N (N-major B)."""
        stages = self.num_stages
        a = cute.make_layout((self.tile_m, TILE_K, stages), stride=(TILE_K, 1, self.tile_m * TILE_K))
        b_stride = (1, self.tile_n) if self.b_n_major else (TILE_K, 1)
        b = cute.make_layout((self.tile_n, TILE_K, stages), stride=(*b_stride, self.tile_n * TILE_K))
        return a, b

    def _smem_layouts(self):
        """The decoded BF16 buffers (the WGMMA's operands) and the C and D views of the slot ring."""
        row_major = tensor_utils.LayoutEnum.ROW_MAJOR
        bf16 = cutlass.BFloat16
        a = sm90_utils.make_smem_layout_a(row_major, self.tile_shape_mnk, bf16, DECODED_STAGES)
        b = sm90_utils.make_smem_layout_b(row_major, self.tile_shape_mnk, bf16, DECODED_STAGES)
        d = box_smem_layout(*self.slots.d.box, self.d_dtype, self.slots.boxes)
        return a, b, self._c_layout(), d

    def _c_layout(self):
        """C's view of the slot ring: the BF16 kernel's boxes."""
        return box_smem_layout(*self.slots.c.box, self.c_dtype, self.slots.boxes)

    def storage_fields(self) -> dict:
        """The BF16 kernel's fields (its A and B: the decoded buffers), then the FP8 stages."""
        a8_layout, b8_layout = self._fp8_layouts()
        struct = cute.struct
        return {
            **super().storage_fields(),
            "sA8": struct.Align[struct.MemRange[self.fp8_dtype, cute.cosize(a8_layout)], 1024],
            "sB8": struct.Align[struct.MemRange[self.fp8_dtype, cute.cosize(b8_layout)], 1024],
        }

    def ab_atoms(self, a, b, m, n, k, l) -> dict:
        """FP8 A and B (dense K- or N-major, or one expert's template) into the FP8 stages."""
        a_mk = cute.make_tensor(a, cute.make_layout((m, k), stride=(k, 1)))
        if cutlass.const_expr(self.discrete_weights):
            b_nkl = cute.make_tensor(b, self.prologue.expert_b_layout(n, k))
        elif cutlass.const_expr(self.b_n_major):
            b_nkl = cute.make_tensor(b, cute.make_layout((n, k, l), stride=(1, n, n * k)))
        else:
            b_nkl = cute.make_tensor(b, cute.make_layout((n, k, l), stride=(k, 1, n * k)))
        a8, b8 = self._fp8_layouts()
        op = cpasync.CopyBulkTensorTileG2SOp()
        return {
            "a": tma_atom(op, a_mk, a8, (self.tile_m, TILE_K)),
            b_tensor(self.config): tma_atom(op, b_nkl, b8, (self.tile_n, TILE_K)),
        }

    # ------------------------------------------------------------- hook points
    def operand_buffers(self, storage, operand_inputs):
        """TMA loads the FP8 stages; the MMA warpgroups take the decoded buffers, word views
        of both for the decoder, and ``operand_inputs`` (the scale factors, m, n, k)."""
        a8, b8 = self._fp8_layouts()
        a_smem, b_smem, _, _ = self._smem_layouts()
        sA8 = storage.sA8.get_tensor(a8)
        sB8 = storage.sB8.get_tensor(b8)
        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        # 32-bit word views of the same bytes for the decoder: K-major stages as 16-byte
        # chunks, the N-major one as words
        words = cutlass.Int32
        fp8_chunks = lambda rows: self.num_stages * rows * TILE_K // (4 * CHUNK_WORDS)  # noqa: E731
        a8_words = cute.make_tensor(cute.recast_ptr(storage.sA8.data_ptr(), dtype=words),
                                    cute.make_layout((CHUNK_WORDS, fp8_chunks(self.tile_m))))
        if cutlass.const_expr(self.b_n_major):
            b8_words = cute.make_tensor(cute.recast_ptr(storage.sB8.data_ptr(), dtype=words),
                                        cute.make_layout(self.num_stages * self.tile_n * TILE_K // 4))
        else:
            b8_words = cute.make_tensor(cute.recast_ptr(storage.sB8.data_ptr(), dtype=words),
                                        cute.make_layout((CHUNK_WORDS, fp8_chunks(self.tile_n))))
        chunks = lambda rows: DECODED_STAGES * rows * TILE_K // PIECE  # noqa: E731
        a_chunks = cute.make_tensor(cute.recast_ptr(storage.sA.data_ptr(), dtype=words),
                                    cute.make_layout((4, chunks(self.tile_m))))
        b_chunks = cute.make_tensor(cute.recast_ptr(storage.sB.data_ptr(), dtype=words),
                                    cute.make_layout((4, chunks(self.tile_n))))
        return (sA8, sB8), (sA, sB, a8_words, b8_words, a_chunks, b_chunks, operand_inputs)

    @staticmethod
    def mma_operands(operands):
        return operands[0], operands[1]

    @cute.jit
    def accumulate(
        self, mainloop, read_state, release_state, tiled_mma, acc, tCrA, tCrB, k_tile_count,
        operands, mma_tidx, tile, tiles, offsets, l,
    ):
        """The k-tiles of one tile: decode each stage, then its WGMMAs (module docstring)."""
        _, _, a8_words, b8_words, a_chunks, b_chunks, (sfa_ptr, sfb_ptr, m, n, k) = operands
        num_m_tiles, num_n_tiles, _ = tiles
        m_tile, n_tile = tile_coords(tile, num_m_tiles, num_n_tiles, self.cluster_m, RASTER_BAND)
        expert = expert_of_row(offsets, l, m_tile * self.tile_m)
        atoms_k = k_atoms(k)
        blocks = (k + SF_VEC - 1) // SF_VEC
        if cutlass.const_expr(self.discrete_weights):
            sfb_address = gmem_array(sfb_ptr, cutlass.Int64, l, 8)[expert]
        else:
            expert_sf_bytes = row_atoms(n) * atoms_k * ATOM_BYTES
            sfb_address = sfb_ptr.toint() + cutlass.Int64(expert) * cutlass.Int64(expert_sf_bytes)
        num_k_blocks = cute.size(tCrA, mode=[2])
        # A's tiles hold owned rows only (below M), B's last n-tile may pass N
        a_tile = self.decode_a.tile(mma_tidx, sfa_ptr.toint(), m_tile * self.tile_m, atoms_k, m, blocks, False)
        b_tile = self.decode_b.tile(mma_tidx, sfb_address, n_tile * self.tile_n, atoms_k, n, blocks, True)
        # each k-tile's scale bytes are read a k-tile ahead (their L2 latency behind a decode)
        a_scales = self.decode_a.scales(a_tile, 0, False)
        b_scales = self.decode_b.scales(b_tile, 0, True)
        for k_tile in range(k_tile_count):
            # alternate over every k-tile the CTA decodes, across tiles too: a warpgroup done
            # with a tile must not decode into the buffer the other's last WGMMAs still read
            buffer = read_state.count % DECODED_STAGES
            # past the last k-tile: blocks past K, nothing read
            next_a = self.decode_a.scales(a_tile, k_tile + 1, False)
            next_b = self.decode_b.scales(b_tile, k_tile + 1, True)
            mainloop.consumer_wait(read_state)
            self.decode_a.decode(mma_tidx, a_tile, a8_words, read_state.index, a_chunks, buffer, a_scales)
            self.decode_b.decode(mma_tidx, b_tile, b8_words, read_state.index, b_chunks, buffer, b_scales)
            a_scales = next_a
            b_scales = next_b
            mainloop.consumer_release(read_state)
            read_state.advance()
            release_state.advance()
            # the decoded stores, to the WGMMAs (async proxy); the WGMMAs of the k-tile before
            # done in both warpgroups once they pass the barrier
            cute.arch.fence_proxy("async.shared", space="cta")
            warpgroup.wait_group(0)
            cute.arch.barrier(barrier_id=DECODE_BARRIER, number_of_threads=NUM_MMA_THREADS)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(num_k_blocks):
                coord = (None, None, kb, buffer)
                cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
            warpgroup.commit_group()
        warpgroup.wait_group(0)
        return read_state, release_state

    # --------------------------------------------------------------------- main
    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nkl: cute.Tensor,
        tma_atom_c: cute.CopyAtom,
        mC_mn: cute.Tensor,
        offsets_ptr: cute.Pointer,
        alpha_ptr: cute.Pointer,
        beta_ptr: cute.Pointer,
        prob_ptr: cute.Pointer,
        dprob_ptr: cute.Pointer,
        dbias_ws_ptr: cute.Pointer,
        b_desc_ws_ptr: cute.Pointer,
        tile_counter_ptr: cute.Pointer,
        sfa_ptr: cute.Pointer,
        sfb_ptr: cute.Pointer,
        d_row_ptr: cute.Pointer,
        d_col_ptr: cute.Pointer,
        sfd_row_ptr: cute.Pointer,
        sfd_col_ptr: cute.Pointer,
        norm_const_ptr: cute.Pointer,
        n: cutlass.Int32,
        l: cutlass.Int32,
        discrete_col_sfd: cutlass.Int32,
    ):
        """The BF16 kernel's parameters (no D atom, no rounding flag, no act_out), the scale
        factors (SFA, and SFB or sfb_ptrs), the outputs (D_row, D_col, SFD_row, SFD_col,
        norm_const) and the discrete_col_sfd flag."""
        m, k = mA_mk.shape
        outputs = (d_row_ptr, d_col_ptr, sfd_row_ptr, sfd_col_ptr, norm_const_ptr, offsets_ptr, m, n * 2, l,
                   discrete_col_sfd)
        self.run(
            tma_atom_a, mA_mk, tma_atom_b, mB_nkl, tma_atom_c, mC_mn, None, None, offsets_ptr, alpha_ptr,
            beta_ptr, prob_ptr, dprob_ptr, dbias_ws_ptr, b_desc_ws_ptr, tile_counter_ptr, n, l, None, None,
            (sfa_ptr, sfb_ptr, m, n, k), outputs,
        )

    def slot_offset(self, slot, row, col: int | cutlass.Int32):
        """Element offset, in the flat fp32 view of the ring, of D (``row``, ``col``) of a
        group in ``slot`` (ring_offset's swizzle, for any row and column)."""
        block = self.slots.d
        chunk = SWIZZLE_CHUNK_BITS // ELEMENT_TYPES[block.dtype].bits
        box, within = col // block.box_cols, col % block.box_cols
        box_base = (slot * self.slots.slot_boxes + box) * self.tile_m * block.box_cols
        return box_base + row * block.box_cols + ((within // chunk) ^ (row % SWIZZLE_ROWS)) * chunk + within % chunk

    @cute.jit
    def group_done(self, ring_d, slot, d_full, tile_row, group_column, epi_tidx, output_inputs):
        """Quantize the group's D block from its slot (module docstring), then free the slot."""
        d_row_ptr, d_col_ptr, sfd_row_ptr, sfd_col_ptr, norm_const_ptr, offsets_ptr, m, n2, l, discrete = output_inputs
        cute.arch.barrier(barrier_id=EPILOGUE_BARRIER, number_of_threads=EPILOGUE_THREADS)
        norm_const = gmem_array(norm_const_ptr, cutlass.Float32, 1, 4)[0]
        t = cutlass.Uint32(epi_tidx)
        self.quantize_row(ring_d, slot, tile_row, group_column, cutlass.Int32(t >> 1), cutlass.Int32(t & 1),
                          d_row_ptr, sfd_row_ptr, norm_const, n2)
        self.quantize_column(ring_d, slot, tile_row, group_column, cutlass.Int32(t & (GROUP_COLUMNS - 1)),
                             cutlass.Int32(t >> 6), d_col_ptr, sfd_col_ptr, norm_const, offsets_ptr, m, n2, l,
                             discrete)
        # the slot's reads before the next C's TMA load into it
        cute.arch.fence_proxy("async.shared", space="cta")
        cute.arch.mbarrier_arrive(d_full + slot)

    @cute.jit
    def quantize_row(self, ring_d, slot, tile_row, group_column, row, block, d_row_ptr, sfd_row_ptr, norm_const, n2):
        """32-block ``block`` (0: gates, 1: inputs) of the group's ``row``: D_row and SFD_row."""
        chunk = SWIZZLE_CHUNK_BITS // ELEMENT_TYPES[self.slots.d.dtype].bits
        chunks = cute.make_tensor(ring_d.iterator, cute.make_layout((chunk, cute.size(ring_d) // chunk)))
        values = cute.make_rmem_tensor((chunk, SF_VEC // chunk), cutlass.Float32)
        for q in cutlass.range_constexpr(SF_VEC // chunk):
            # chunk q of the block: the slot's box ``block`` (32 fp32 columns), swizzled
            at = self.slot_offset(slot, row, block * SF_VEC + q * chunk) // chunk
            cute.autovec_copy(chunks[None, at], values[None, q])
        words = cute.make_rmem_tensor(SF_VEC // 4, cutlass.Int32)
        byte = quantize_block(values, words, norm_const, self.d_kind, self.d_rcp, True)
        d_row = tile_row + row
        column = group_column + block * SF_VEC
        element = matrix_index(d_row, n2, column)
        cute.autovec_copy(words, gmem_vector(d_row_ptr.toint() + element, cutlass.Int32, SF_VEC // 4, 16))
        store_byte(sfd_row_ptr.toint() + cutlass.Int64(sf_offset(d_row, column // SF_VEC, k_atoms(n2))), byte)

    @cute.jit
    def quantize_column(self, ring_d, slot, tile_row, group_column, column, row_block, d_col_ptr, sfd_col_ptr,
                        norm_const, offsets_ptr, m, n2, l, discrete):
        """``column`` of the group over the tile's 32-row block ``row_block``: D_col and SFD_col
        (a warp's threads share the row block, as col_sf_offset's expert search needs)."""
        values = cute.make_rmem_tensor(SF_VEC, cutlass.Float32)
        for j in cutlass.range_constexpr(SF_VEC):
            values[j] = ring_d[self.slot_offset(slot, row_block * SF_VEC + j, column)]
        words = cute.make_rmem_tensor(SF_VEC // 4, cutlass.Int32)
        byte = quantize_block(values, words, norm_const, self.d_kind, self.d_rcp, False)
        first = tile_row + row_block * SF_VEC
        d_column = group_column + column
        for j in cutlass.range_constexpr(SF_VEC):
            code = (words[j // 4] >> (8 * (j % 4))) & 0xFF
            store_byte(d_col_ptr.toint() + matrix_index(first + j, n2, d_column), code)
        offset = col_sf_offset(offsets_ptr, d_column, first // SF_VEC, m, n2, l, discrete)
        store_byte(sfd_col_ptr.toint() + cutlass.Int64(offset), byte)


class Sm90Mxfp8FusedFp8C(Sm90Mxfp8Fused):
    """The fused kernel of an MXFP8 variant with FP8 C: C's boxes in the slot ring as
    ``fp8_c`` (config.Fp8CBoxes) places them, where the epilogue reads C in place."""

    def __init__(self, main: Bf16Config, fp8_dtype: str, geometry: FusedGeometry, d_dtype: str, fp8_c: Fp8CBoxes):
        super().__init__(main, fp8_dtype, geometry, d_dtype)
        self.fp8_c = fp8_c

    def _c_layout(self):
        """C's boxes as (rows, columns, (box, slot)), from the first box's bytes (c_boxes)."""
        placed = self.fp8_c
        return cute.make_layout((*placed.box, (placed.boxes, EPILOGUE_SLOTS)),
                                stride=(GROUP_COLUMNS, 1, (2 * placed.box_bytes, placed.slot_bytes)))

    @property
    def c_box(self) -> tuple[int, int]:
        return self.fp8_c.box

    @property
    def c_boxes_per_group(self) -> int:
        return self.fp8_c.boxes

    def c_boxes(self, storage, c_smem):
        return cute.make_tensor(storage.sC.data_ptr() + self.fp8_c.offset(0, 0), c_smem)

    def c_box_at(self, slot, box: int, m_tile, column):
        return (m_tile * self.fp8_c.boxes + box, column), slot * self.fp8_c.boxes + box

    def c_offset(self, slot, first_row, k: int, col0: int, lane, rows_8: int):
        # the epilogue warp's box is first_row // rows; one byte an element
        placed = self.fp8_c
        return placed.offset(slot, first_row // placed.rows) + (k + rows_8) * GROUP_COLUMNS + col0 + lane
