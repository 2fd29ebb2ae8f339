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

from typing import NamedTuple

import cutlass
import cutlass.cute as cute

from .mxfp8 import SF_VEC, byte_value, e8m0_decode, gmem_vector, widen_words

PIECE = 8  # elements of one piece
CHUNK_WORDS = 4  # 32-bit words of one 16-byte BF16 chunk
SWIZZLE_ROWS = 8  # the 128-byte swizzle repeats every 8 rows
N_MAJOR_ROWS = 4  # rows per N-major thread: one 32-bit word of FP8 bytes per K


E8M0_ONE = 127  # the E8M0 byte of 1.0
ATOM_ROWS, ATOM_BYTES, GROUP_ROWS, GROUP_BYTES = 128, 512, 32, 4  # the SF atom (blocks/mxfp8.sf_offset)
ROW_BYTES = 16  # SF bytes of one row % 32 within an atom


@cute.jit
def sf_row_base(sf_address: cutlass.Int64, row: cutlass.Int32, atoms_k: cutlass.Int32) -> cutlass.Int64:
    """Address of the SF byte of (``row``, block 0): sf_offset's row terms, which stay
    fixed over a tile's k-tiles; ``row`` >= 0."""
    r = cutlass.Uint32(row)
    offset = (r >> 7) * cutlass.Uint32(atoms_k) * ATOM_BYTES + (r & 31) * ROW_BYTES + ((r >> 5) & 3) * GROUP_BYTES
    return sf_address + cutlass.Int64(offset)


@cute.jit
def block_offset(k_tile: cutlass.Int32, piece: cutlass.Int32) -> cutlass.Int32:
    """sf_offset's block term of 32-block 2 k_tile + piece // 4 (TILE_K = 64: 2 blocks a
    k-tile): (block // 4) * 512 + block % 4."""
    kt = cutlass.Uint32(k_tile)
    return cutlass.Int32((kt >> 1) * ATOM_BYTES + (kt & 1) * 2 + (cutlass.Uint32(piece) >> 2))


class DecoderTile(NamedTuple):
    """What one thread's decode of a tile keeps over its k-tiles."""

    sf_base: cutlass.Int64  # SF byte of (the thread's first row, block 0)
    rows_left: cutlass.Int32  # operand rows from the thread's first row on
    piece: cutlass.Int32
    src: cutlass.Int32  # the thread's first FP8 word (pair) index within a stage
    dst: cutlass.Int32  # its first BF16 chunk within a buffer (swizzled)
    first: cutlass.Int32  # its first row within the tile


class StageDecoder:
    """Decodes one operand's stages: a ``rows`` x ``tile_k`` tile, K- or N-major, split over
    ``threads`` threads (see the module docstring)."""

    def __init__(self, rows: int, tile_k: int, n_major: bool, threads: int, kind: str):
        self.rows, self.tile_k, self.n_major, self.threads, self.kind = rows, tile_k, n_major, threads, kind
        self.row_pieces = tile_k // PIECE
        if n_major:
            self.quads = rows // N_MAJOR_ROWS  # 4-row groups along the tile
            if self.quads & (self.quads - 1):
                raise ValueError(f"an N-major tile's rows / 4 must be a power of two, got {self.quads}")
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
    def tile(self, thread: cutlass.Int32, sf_address: cutlass.Int64, first_row: cutlass.Int32,
             atoms_k: cutlass.Int32, rows: cutlass.Int32) -> DecoderTile:
        """This thread's part of a tile whose rows start at operand row ``first_row`` (a
        multiple of the tile's rows: the thread's rows share one SF atom row), of an
        operand of ``rows`` rows whose SF allocation is at ``sf_address``."""
        t = cutlass.Uint32(thread)
        if cutlass.const_expr(self.n_major):
            quad = t & (self.quads - 1)
            piece = t >> (self.quads.bit_length() - 1)
            first = quad * N_MAJOR_ROWS
            src = piece * PIECE * self.quads + quad
            dst = first * self.row_pieces
        else:
            piece = t & (self.row_pieces - 1)
            first = t >> (self.row_pieces.bit_length() - 1)
            src = first * self.row_pieces + piece
            dst = first * self.row_pieces + (piece ^ (first & (SWIZZLE_ROWS - 1)))
        row = first_row + cutlass.Int32(first)
        return DecoderTile(sf_row_base(sf_address, row, atoms_k), rows - row, cutlass.Int32(piece),
                           cutlass.Int32(src), cutlass.Int32(dst), cutlass.Int32(first))

    @cute.jit
    def scales(self, tile: DecoderTile, k_tile: cutlass.Int32, blocks: cutlass.Int32,
               check_rows: cutlass.Constexpr) -> cutlass.Int32:
        """The E8M0 bytes of this thread's pieces of k-tile ``k_tile``, piece j's in byte j of
        one word (few registers live across the stage's wait); a row past the operand's or
        a 32-block past K reads as 1. The thread's rows step by 32 (K-major: the next SF
        group, 4 bytes on) or by 1 (N-major: the next row, 16 bytes on)."""
        step = ROW_BYTES if cutlass.const_expr(self.n_major) else GROUP_BYTES
        row_step = 1 if cutlass.const_expr(self.n_major) else self.row_step
        address = tile.sf_base + cutlass.Int64(block_offset(k_tile, tile.piece))
        packed = cutlass.Int32(E8M0_ONE * 0x01010101)
        if k_tile * (self.tile_k // SF_VEC) + (tile.piece >> 2) < blocks:
            packed = cutlass.Int32(0)
            for j in cutlass.range_constexpr(self.per_thread):
                byte = cutlass.Int32(E8M0_ONE)
                if cutlass.const_expr(check_rows):
                    if tile.rows_left > row_step * j:
                        byte = byte_value(gmem_vector(address + step * j, cutlass.Uint8, 1, 1)[0])
                else:
                    byte = byte_value(gmem_vector(address + step * j, cutlass.Uint8, 1, 1)[0])
                packed = packed | (byte << (8 * j))
        return packed

    @cute.jit
    def decode(self, thread: cutlass.Int32, tile: DecoderTile, fp8_words: cute.Tensor, stage,
               bf16_chunks: cute.Tensor, buffer, scales: cutlass.Int32):
        """FP8 stage ``stage`` of ``fp8_words`` -> BF16 buffer ``buffer`` of ``bf16_chunks``.

        ``fp8_words``: the FP8 stages as 32-bit words, K-major ((2, pieces)) or N-major (flat);
        ``bf16_chunks``: the BF16 buffers as (4, chunks) words; ``scales``: ``scales``' word."""
        if cutlass.const_expr(self.active == self.threads):
            self.decode_pieces(tile, fp8_words, stage, bf16_chunks, buffer, scales)
        elif thread < self.active:
            self.decode_pieces(tile, fp8_words, stage, bf16_chunks, buffer, scales)

    @cute.jit
    def decode_pieces(self, tile: DecoderTile, fp8_words: cute.Tensor, stage, bf16_chunks: cute.Tensor, buffer,
                      scales: cutlass.Int32):
        """``decode``'s work, for a thread that has pieces."""
        words = cute.make_rmem_tensor((PIECE // 4, self.per_thread), cutlass.Int32)
        if cutlass.const_expr(self.n_major):
            self.gather_n_major(fp8_words, stage * (self.tile_k * self.quads) + tile.src, words)
        else:
            src = stage * (self.rows * self.row_pieces) + tile.src
            for j in cutlass.range_constexpr(self.per_thread):
                cute.autovec_copy(fp8_words[None, src + self.row_step * self.row_pieces * j], words[None, j])
        base = buffer * (self.rows * self.row_pieces) + tile.dst
        for j in cutlass.range_constexpr(self.per_thread):
            out = cute.make_rmem_tensor(CHUNK_WORDS, cutlass.Int32)
            widen_words(words[None, j], e8m0_decode((scales >> (8 * j)) & 0xFF), out, self.kind)
            if cutlass.const_expr(self.n_major):
                # row first + j: its chunk's swizzle (first % 8 is 0 or 4, so + j stays below 8)
                swizzle = (tile.first & (SWIZZLE_ROWS - 1)) + j
                chunk = base + j * self.row_pieces + (tile.piece ^ swizzle)
            else:
                chunk = base + self.row_step * self.row_pieces * j
            cute.autovec_copy(out, bf16_chunks[None, chunk])

    @cute.jit
    def gather_n_major(self, fp8_words: cute.Tensor, src: cutlass.Int32, words: cute.Tensor):
        """The N-major stage's 8 words at ``src`` + kk * quads (K = 8 piece + kk, the thread's
        4 rows) -> ``words`` (2, 4): each row's 8 FP8 bytes as 2 K-major words."""
        column = cute.make_rmem_tensor(PIECE, cutlass.Int32)
        for kk in cutlass.range_constexpr(PIECE):
            column[kk] = fp8_words[src + kk * self.quads]
        for i in cutlass.range_constexpr(N_MAJOR_ROWS):
            for half in cutlass.range_constexpr(PIECE // 4):
                word = cutlass.Int32(0)
                for b in cutlass.range_constexpr(4):
                    word = word | (((column[4 * half + b] >> (8 * i)) & 0xFF) << (8 * b))
                words[half, i] = word
