"""Decode one pipeline stage of an FP8 operand tile in shared memory into the BF16 tile a
WGMMA reads, with the operand's E8M0 scales: bf16(value * 2^(scale - 127)), the same
operation (blocks/mxfp8.py's ``widen_words``) and so the same bits as the dequantizers.

The FP8 stage is TMA's unswizzled box: ``rows`` x TILE_K bytes, K contiguous (K-major) or
``rows`` contiguous (N-major). The BF16 tile is K-major with the 128-byte swizzle
(sm90_utils.make_smem_layout_a/b of a TILE_K = 64 tile: row r's 16-byte chunk c at chunk
r * 8 + (c ^ r % 8)). A "piece" is 8 K-consecutive elements of one row: 8 FP8 bytes in,
one 16-byte BF16 chunk out, all under one scale (32-blocks hold 4 pieces).

Threads split a tile's pieces evenly (``threads`` must divide them). K-major: thread t
decodes piece t % 8 of rows t // 8 + (threads / 8) j. N-major: thread t < rows * 2 decodes
the 4 rows 4 (t % (rows / 4)) + i at piece t // (rows / 4): 8 words of 4 rows' bytes, one
per K, transposed in registers. Scale bytes are read from global memory (L1/L2), issued
before the stage's wait; a scale of a 32-block past K decodes as 1 (TMA filled its data
with zeros, and the allocation's padding byte may be anything), as does one of a row
past the operand's rows.
"""

import cutlass
import cutlass.cute as cute

from .mxfp8 import SF_VEC, byte_value, e8m0_decode, gmem_vector, sf_offset, widen_words

PIECE = 8  # elements of one piece
CHUNK_WORDS = 4  # 32-bit words of one 16-byte BF16 chunk
SWIZZLE_ROWS = 8  # the 128-byte swizzle repeats every 8 rows
N_MAJOR_ROWS = 4  # rows per N-major thread: one 32-bit word of FP8 bytes per K


def pieces_per_row(tile_k: int) -> int:
    return tile_k // PIECE


E8M0_ONE = 127  # the E8M0 byte of 1.0


@cute.jit
def scale_byte_of(
    sf_address: cutlass.Int64,
    row: cutlass.Int32,
    block: cutlass.Int32,
    atoms_k: cutlass.Int32,
    rows: cutlass.Int32,
    blocks: cutlass.Int32,
) -> cutlass.Int32:
    """The E8M0 byte of (row, block), or that of 1 for a row or 32-block outside the operand."""
    byte = cutlass.Int32(E8M0_ONE)
    if row < rows and block < blocks:
        offset = cutlass.Int64(sf_offset(row, block, atoms_k))
        byte = byte_value(gmem_vector(sf_address + offset, cutlass.Uint8, 1, 1)[0])
    return byte


class StageDecoder:
    """Decodes one operand's stages: a ``rows`` x ``tile_k`` tile, K- or N-major, split over
    ``threads`` threads (see the module docstring)."""

    def __init__(self, rows: int, tile_k: int, n_major: bool, threads: int, kind: str):
        self.rows, self.tile_k, self.n_major, self.threads, self.kind = rows, tile_k, n_major, threads, kind
        self.row_pieces = pieces_per_row(tile_k)
        if n_major:
            self.quads = rows // N_MAJOR_ROWS  # 4-row groups along the tile
            self.active = self.quads * self.row_pieces  # threads with work
            if self.active > threads or rows % N_MAJOR_ROWS:
                raise ValueError(f"an N-major {rows}-row tile needs {self.active} threads, has {threads}")
            self.per_thread = N_MAJOR_ROWS
        else:
            if (rows * self.row_pieces) % threads or threads % self.row_pieces:
                raise ValueError(f"{threads} threads do not split a {rows}-row tile's pieces evenly")
            self.active = threads
            self.per_thread = rows * self.row_pieces // threads
        self.row_step = threads // self.row_pieces  # K-major: rows between a thread's pieces
        if self.per_thread > 4:
            raise ValueError(f"{self.per_thread} pieces a thread: their scale bytes must fit one word")

    @cute.jit
    def coordinates(self, thread: cutlass.Int32):
        """(first row, piece) of this thread within the tile."""
        if cutlass.const_expr(self.n_major):
            return (thread % self.quads) * N_MAJOR_ROWS, thread // self.quads
        return thread // self.row_pieces, thread % self.row_pieces

    @cute.jit
    def row_of(self, first: cutlass.Int32, j: int):
        """The tile row of this thread's j-th piece."""
        if cutlass.const_expr(self.n_major):
            return first + j
        return first + self.row_step * j

    @cute.jit
    def scales(
        self,
        thread: cutlass.Int32,
        sf_address: cutlass.Int64,
        first_row: cutlass.Int32,
        k_tile: cutlass.Int32,
        atoms_k: cutlass.Int32,
        rows: cutlass.Int32,
        blocks: cutlass.Int32,
    ) -> cutlass.Int32:
        """The E8M0 bytes of this thread's pieces of k-tile ``k_tile`` (the tile's rows start
        at operand row ``first_row``), piece j's in byte j of one word (few registers live
        across the stage's wait)."""
        first, piece = self.coordinates(thread)
        block = k_tile * (self.tile_k // SF_VEC) + piece // (SF_VEC // PIECE)
        packed = cutlass.Int32(0)
        if thread < self.active:
            for j in cutlass.range_constexpr(self.per_thread):
                byte = scale_byte_of(sf_address, first_row + self.row_of(first, j), block, atoms_k, rows, blocks)
                packed = packed | (byte << (8 * j))
        return packed

    @cute.jit
    def decode(self, thread: cutlass.Int32, fp8_words: cute.Tensor, stage, bf16_chunks: cute.Tensor, buffer,
               scales: cutlass.Int32):
        """FP8 stage ``stage`` of ``fp8_words`` -> BF16 buffer ``buffer`` of ``bf16_chunks``.

        ``fp8_words``: the FP8 stages as 32-bit words, K-major ((2, pieces)) or N-major (flat);
        ``bf16_chunks``: the BF16 buffers as (4, chunks) words; ``scales``: ``scales``' word."""
        if thread < self.active:
            first, piece = self.coordinates(thread)
            words = cute.make_rmem_tensor((PIECE // 4, self.per_thread), cutlass.Int32)
            if cutlass.const_expr(self.n_major):
                self.gather_n_major(fp8_words, stage, first, piece, words)
            else:
                for j in cutlass.range_constexpr(self.per_thread):
                    row = self.row_of(first, j)
                    cute.autovec_copy(fp8_words[None, (stage * self.rows + row) * self.row_pieces + piece],
                                      words[None, j])
            for j in cutlass.range_constexpr(self.per_thread):
                row = self.row_of(first, j)
                out = cute.make_rmem_tensor(CHUNK_WORDS, cutlass.Int32)
                widen_words(words[None, j], e8m0_decode((scales >> (8 * j)) & 0xFF), out, self.kind)
                chunk = (buffer * self.rows + row) * self.row_pieces + (piece ^ (row % SWIZZLE_ROWS))
                cute.autovec_copy(out, bf16_chunks[None, chunk])

    @cute.jit
    def gather_n_major(self, fp8_words: cute.Tensor, stage, first: cutlass.Int32, piece: cutlass.Int32,
                       words: cute.Tensor):
        """The N-major stage's 8 words (K = 8 piece + kk, rows first..first+3) -> ``words``
        (2, 4): rows' 8 FP8 bytes as 2 K-major words each."""
        column = cute.make_rmem_tensor(PIECE, cutlass.Int32)
        quad = first // N_MAJOR_ROWS
        for kk in cutlass.range_constexpr(PIECE):
            column[kk] = fp8_words[(stage * self.tile_k + piece * PIECE + kk) * self.quads + quad]
        for i in cutlass.range_constexpr(N_MAJOR_ROWS):
            for half in cutlass.range_constexpr(PIECE // 4):
                word = cutlass.Int32(0)
                for b in cutlass.range_constexpr(4):
                    word = word | (((column[4 * half + b] >> (8 * i)) & 0xFF) << (8 * b))
                words[half, i] = word
