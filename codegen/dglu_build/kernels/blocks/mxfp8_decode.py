"""Decode one pipeline stage of an FP8 operand tile in shared memory into the BF16 tile a
WGMMA reads, with the operand's E8M0 scales: bf16(value * 2^(scale - 127)), the same bits
as the exact decode (blocks/mxfp8.py's ``widen_words``: fp32 product, one
rounding to bf16).

The FP8 stage is TMA's unswizzled box: ``rows`` x TILE_K bytes, K contiguous (K-major) or
``rows`` contiguous (N-major). The BF16 tile is K-major with the 128-byte swizzle
(sm90_utils.make_smem_layout_a/b of a TILE_K = 64 tile: row r's 16-byte chunk c at chunk
r * 8 + (c ^ r % 8)). A "piece" is 8 K-consecutive elements of one row: 8 FP8 bytes in,
one 16-byte BF16 chunk out, all under one scale (32-blocks hold 4 pieces).

The conversion (``scaled_pair``), per pair of FP8 bytes: one PRMT puts each byte with its
sign replicated above it into a 16-bit lane, a shift and a mask leave sign | exponent |
mantissa where bf16 keeps them -- the bf16 of value * 2^-120 (e4m3) or 2^-112 (e5m2),
exactly, subnormals included, since both formats' subnormals line up with bf16's -- and
one ``mul.rn.bf16x2`` by 2^(scale - 7) (e4m3) or 2^(scale - 15) (e5m2) rounds the exact
product once, as the fp32 product's conversion does. That needs the multiplier to be a
normal bf16 (scale <= 134, e4m3; <= 142, e5m2) and no inf/NaN byte (the shift would make
them finite); a thread whose k-tile breaks either decodes it with ``widen_words`` instead.

Threads split a tile's work evenly. K-major: a thread decodes one row's 32-block (two
16-byte loads, one scale, four chunks out) per pass; thread t of a warp's 16 rows takes
row 8 (t // 16) + t % 8 and block ((row // 2) ^ (t // 8)) % 2, and loads its two halves
in the order c0 = (row // 2 ^ row // 4) % 2: each group of 8 threads then reads and writes
8 different 16-byte bank groups (no conflicts). N-major: thread t < rows * 2 decodes the
4 rows 4 (t % (rows / 4)) + i at piece t // (rows / 4): 8 words of 4 rows' bytes, one per
K, whose bytes the PRMTs pick per row. Scale bytes are read from global memory (L1/L2),
issued before the stage's wait; a scale of a 32-block past K decodes as 1 (TMA filled
its data with zeros, and the allocation's padding byte may be anything), as does one of
a row past the operand's rows.
"""

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .mxfp8 import SF_VEC, byte_value, e8m0_decode, gmem_vector, widen_words

PIECE = 8  # elements of one piece
CHUNK_WORDS = 4  # 32-bit words of one 16-byte chunk (BF16 out, or FP8 in)
SWIZZLE_ROWS = 8  # the 128-byte swizzle repeats every 8 rows
N_MAJOR_ROWS = 4  # rows per N-major thread: one 32-bit word of FP8 bytes per K
BLOCK_CHUNKS = SF_VEC // 16  # 16-byte FP8 chunks of one 32-block

E8M0_ONE = 127  # the E8M0 byte of 1.0
ATOM_ROWS, ATOM_BYTES, GROUP_ROWS, GROUP_BYTES = 128, 512, 32, 4  # the SF atom (blocks/mxfp8.sf_offset)
ROW_BYTES = 16  # SF bytes of one row % 32 within an atom

# FP8 kind -> (left shift of a byte with its replicated sign, the mask that keeps
# sign | exponent | mantissa where bf16 has them, the bf16 exponent of the multiplier
# minus the scale byte, the largest scale byte whose multiplier is a normal bf16, the
# per-byte addend whose bit 7 marks an inf or NaN byte once bit 7 is masked off)
FAST_FORMATS = {
    "e4m3": (4, 0x87F087F0, 120, 134, 0x01010101),
    "e5m2": (5, 0x8FE08FE0, 112, 142, 0x04040404),
}
BF16_EXPONENT_SHIFT = 7
LANES = 0x00010001  # one value in both bf16 lanes of a word


def pair_selector(first: int, second: int) -> int:
    """PRMT selector: byte ``first`` of the 8 source bytes, its sign replicated, byte
    ``second``, its sign replicated (one 16-bit lane each)."""
    return first | (8 | first) << 4 | second << 8 | (8 | second) << 12


@dsl_user_op
def scaled_pair(a, b, selector: int, multiplier, kind: str, *, loc=None, ip=None) -> cutlass.Int32:
    """Bytes of (``a``, ``b``) picked by ``selector`` (pair_selector) -> bf16x2 of their FP8
    values times ``multiplier`` (a bf16x2 word of the same power of two twice)."""
    shift, mask = FAST_FORMATS[kind][:2]
    operands = [cutlass.Int32(x).ir_value(loc=loc, ip=ip) for x in (a, b, multiplier)]
    return cutlass.Int32(
        llvm.inline_asm(
            T.i32(),
            operands,
            "{\n"
            ".reg .b32 t;\n"
            f"prmt.b32 t, $1, $2, {selector:#x};\n"
            f"shl.b32 t, t, {shift};\n"
            f"and.b32 t, t, {mask:#x};\n"
            "mul.rn.bf16x2 $0, t, $3;\n"
            "}",
            "=r,r,r,r",
            loc=loc,
            ip=ip,
        )
    )


@cute.jit
def multiplier(scale: cutlass.Int32, kind: cutlass.Constexpr) -> cutlass.Int32:
    """The bf16x2 multiplier of ``scaled_pair`` for an E8M0 byte (valid up to its limit)."""
    offset = FAST_FORMATS[kind][2]
    return (scale + offset) * (LANES << BF16_EXPONENT_SHIFT)


@cute.jit
def non_finite_bytes(words: cute.Tensor, kind: cutlass.Constexpr) -> cutlass.Int32:
    """Nonzero iff a byte of ``words`` is an inf or NaN code of ``kind``."""
    addend = FAST_FORMATS[kind][4]
    flags = cutlass.Int32(0)
    for w in cutlass.range_constexpr(cute.size(words)):
        flags = flags | ((words[w] & 0x7F7F7F7F) + addend)
    return flags & cutlass.Int32(-0x7F7F7F80)  # 0x80808080


@cute.jit
def sf_row_base(sf_address: cutlass.Int64, row: cutlass.Int32, atoms_k: cutlass.Int32) -> cutlass.Int64:
    """Address of the SF byte of (``row``, block 0): sf_offset's row terms, which stay
    fixed over a tile's k-tiles; ``row`` >= 0."""
    r = cutlass.Uint32(row)
    offset = (r >> 7) * cutlass.Uint32(atoms_k) * ATOM_BYTES + (r & 31) * ROW_BYTES + ((r >> 5) & 3) * GROUP_BYTES
    return sf_address + cutlass.Int64(offset)


@cute.jit
def block_offset(k_tile: cutlass.Int32) -> cutlass.Int32:
    """sf_offset's block term of 32-block 2 k_tile + b less b's (b < 2; TILE_K = 64: 2
    blocks a k-tile): (block // 4) * 512 + block % 4 - b."""
    kt = cutlass.Uint32(k_tile)
    return cutlass.Int32(((kt >> 1) << 9) | ((kt & 1) << 1))


class DecoderTile(NamedTuple):
    """What one thread's decode of a tile keeps over its k-tiles."""

    sf_base: cutlass.Int64  # SF byte of (the thread's first row, its 32-block of k-tile 0)
    sf_step: cutlass.Int64  # SF bytes between the thread's rows (K-major: passes, 128 rows)
    rows_left: cutlass.Int32  # operand rows from the thread's first row on
    blocks_left: cutlass.Int32  # K's 32-blocks from its block of k-tile 0 on (0: first row past the operand's)
    block: cutlass.Int32  # K-major: the 32-block of each k-tile; N-major: the piece
    src: cutlass.Int32  # K-major: the first 16-byte chunk within a stage; N-major: the first word
    dst: cutlass.Int32  # its first BF16 chunk within a buffer (swizzled; K-major: store k at dst ^ k)
    first: cutlass.Int32  # its first row within the tile


class StageDecoder:
    """Decodes one operand's stages: a ``rows`` x ``tile_k`` tile, K- or N-major, split over
    ``threads`` threads (see the module docstring)."""

    def __init__(self, rows: int, tile_k: int, n_major: bool, threads: int, kind: str):
        self.rows, self.tile_k, self.n_major, self.threads, self.kind = rows, tile_k, n_major, threads, kind
        self.row_pieces = tile_k // PIECE
        if tile_k != 2 * SF_VEC:
            raise ValueError(f"the decode takes k-tiles of {2 * SF_VEC}, got {tile_k}")
        if n_major:
            self.quads = rows // N_MAJOR_ROWS  # 4-row groups along the tile
            if self.quads & (self.quads - 1):
                raise ValueError(f"an N-major tile's rows / 4 must be a power of two, got {self.quads}")
            self.active = self.quads * self.row_pieces  # threads with work
            if self.active > threads or rows % N_MAJOR_ROWS:
                raise ValueError(f"an N-major {rows}-row tile needs {self.active} threads, has {threads}")
            self.per_thread = N_MAJOR_ROWS
        else:
            items = rows * 2  # (row, 32-block) items of a k-tile
            self.active = min(items, threads)
            if items % self.active or self.active % 128:
                raise ValueError(f"{threads} threads do not split a {rows}-row tile's 32-blocks evenly")
            self.per_thread = items // self.active  # passes, 128 rows apart
        if self.per_thread > 4:
            raise ValueError(f"{self.per_thread} scales a thread: their bytes must fit one word")

    @cute.jit
    def tile(self, thread: cutlass.Int32, sf_address: cutlass.Int64, first_row: cutlass.Int32,
             atoms_k: cutlass.Int32, rows: cutlass.Int32, blocks: cutlass.Int32,
             check_rows: cutlass.Constexpr) -> DecoderTile:
        """This thread's part of a tile whose rows start at operand row ``first_row`` (a
        multiple of the tile's rows: the thread's rows share one SF atom row), of an
        operand of ``rows`` rows and ``blocks`` 32-blocks of K whose SF allocation is at
        ``sf_address``; ``check_rows``: the tile may pass the operand's last row."""
        t = cutlass.Uint32(thread)
        if cutlass.const_expr(self.n_major):
            quad = t & (self.quads - 1)
            block = t >> (self.quads.bit_length() - 1)
            first = quad * N_MAJOR_ROWS
            src = block * PIECE * self.quads + quad
            dst = first * self.row_pieces
            step = cutlass.Int64(ROW_BYTES)
        else:
            first = (t >> 4) * SWIZZLE_ROWS + (t & 7)
            block = ((first >> 1) ^ (t >> 3)) & 1
            c0 = ((first >> 1) ^ (first >> 2)) & 1
            src = first * (self.tile_k // 16) + block * BLOCK_CHUNKS + c0
            dst = first * self.row_pieces + ((block * 4) ^ (c0 * 2) ^ (first & (SWIZZLE_ROWS - 1)))
            step = cutlass.Int64(atoms_k) * ATOM_BYTES
        row = first_row + cutlass.Int32(first)
        # N-major: the piece's 32-block
        k_block = block >> 2 if cutlass.const_expr(self.n_major) else block
        blocks_left = blocks - cutlass.Int32(k_block)
        if cutlass.const_expr(check_rows):
            if row >= rows:
                blocks_left = cutlass.Int32(0)
        sf_base = sf_row_base(sf_address, row, atoms_k) + cutlass.Int64(k_block)
        return DecoderTile(sf_base, step, rows - row, blocks_left, cutlass.Int32(block), cutlass.Int32(src),
                           cutlass.Int32(dst), cutlass.Int32(first))

    @cute.jit
    def scales(self, tile: DecoderTile, k_tile: cutlass.Int32, check_rows: cutlass.Constexpr) -> cutlass.Int32:
        """The E8M0 bytes of this thread's rows of k-tile ``k_tile``, row j's in byte j of
        one word (few registers live across the stage's wait); a row past the operand's or
        a 32-block past K reads as 1. The thread's rows step by 128 (K-major: the next SF
        atom row) or by 1 (N-major: the next row, 16 bytes on)."""
        row_step = 1 if cutlass.const_expr(self.n_major) else ATOM_ROWS
        address = tile.sf_base + cutlass.Int64(block_offset(k_tile))
        packed = cutlass.Int32(E8M0_ONE * 0x01010101)
        # the first row's check is in blocks_left
        if k_tile * (self.tile_k // SF_VEC) < tile.blocks_left:
            packed = cutlass.Int32(0)
            for j in cutlass.range_constexpr(self.per_thread):
                byte = cutlass.Int32(E8M0_ONE)
                if cutlass.const_expr(check_rows and j > 0):
                    if tile.rows_left > row_step * j:
                        byte = byte_value(gmem_vector(address + tile.sf_step * j, cutlass.Uint8, 1, 1)[0])
                else:
                    byte = byte_value(gmem_vector(address + tile.sf_step * j, cutlass.Uint8, 1, 1)[0])
                packed = packed | (byte << (8 * j))
        return packed

    @cute.jit
    def unexact(self, scales: cutlass.Int32, words: cute.Tensor) -> cutlass.Int32:
        """Zero iff ``scaled_pair`` decodes these words under these scales exactly."""
        limit = FAST_FORMATS[self.kind][3]
        flags = non_finite_bytes(words, self.kind)
        for j in cutlass.range_constexpr(self.per_thread):
            if ((scales >> (8 * j)) & 0xFF) > limit:
                flags = cutlass.Int32(1)
        return flags

    @cute.jit
    def decode(self, thread: cutlass.Int32, tile: DecoderTile, fp8: cute.Tensor, stage,
               bf16_chunks: cute.Tensor, buffer, scales: cutlass.Int32):
        """FP8 stage ``stage`` of ``fp8`` -> BF16 buffer ``buffer`` of ``bf16_chunks``.

        ``fp8``: the FP8 stages as 32-bit words, K-major (4, chunks) or N-major (flat);
        ``bf16_chunks``: the BF16 buffers as (4, chunks) words; ``scales``: ``scales``' word."""
        if cutlass.const_expr(self.active == self.threads):
            self.decode_rows(tile, fp8, stage, bf16_chunks, buffer, scales)
        elif thread < self.active:
            self.decode_rows(tile, fp8, stage, bf16_chunks, buffer, scales)

    @cute.jit
    def decode_rows(self, tile: DecoderTile, fp8: cute.Tensor, stage, bf16_chunks: cute.Tensor, buffer,
                    scales: cutlass.Int32):
        """``decode``'s work, for a thread that has some."""
        if cutlass.const_expr(self.n_major):
            self.decode_n_major(tile, fp8, stage, bf16_chunks, buffer, scales)
        else:
            self.decode_k_major(tile, fp8, stage, bf16_chunks, buffer, scales)

    @cute.jit
    def decode_k_major(self, tile: DecoderTile, fp8_chunks: cute.Tensor, stage, bf16_chunks: cute.Tensor,
                       buffer, scales: cutlass.Int32):
        """Each pass: one row's 32-block, loaded as chunks c0 then 1 - c0 (so pieces 2 c0,
        2 c0 + 1, then the others: register piece p is piece p ^ 2 c0, stored at dst ^ p)."""
        chunks_per_row = self.tile_k // 16
        words = cute.make_rmem_tensor((CHUNK_WORDS, BLOCK_CHUNKS * self.per_thread), cutlass.Int32)
        src = stage * (self.rows * chunks_per_row) + tile.src
        for j in cutlass.range_constexpr(self.per_thread):
            at = src + j * ATOM_ROWS * chunks_per_row
            cute.autovec_copy(fp8_chunks[None, at], words[None, 2 * j])
            cute.autovec_copy(fp8_chunks[None, at ^ 1], words[None, 2 * j + 1])
        flat = cute.make_tensor(words.iterator, cute.make_layout(cute.size(words)))
        base = buffer * (self.rows * self.row_pieces) + tile.dst
        out = cute.make_rmem_tensor((CHUNK_WORDS, 4 * self.per_thread), cutlass.Int32)
        if self.unexact(scales, flat) == 0:
            for j in cutlass.range_constexpr(self.per_thread):
                factor = multiplier((scales >> (8 * j)) & 0xFF, self.kind)
                for p in cutlass.range_constexpr(4):
                    for w in cutlass.range_constexpr(2):
                        word = words[2 * (p % 2) + w, 2 * j + p // 2]
                        out[2 * w, 4 * j + p] = scaled_pair(word, word, pair_selector(0, 1), factor, self.kind)
                        out[2 * w + 1, 4 * j + p] = scaled_pair(word, word, pair_selector(2, 3), factor, self.kind)
        else:
            for j in cutlass.range_constexpr(self.per_thread):
                factor = e8m0_decode((scales >> (8 * j)) & 0xFF)
                for p in cutlass.range_constexpr(4):
                    piece = cute.make_rmem_tensor(2, cutlass.Int32)
                    for w in cutlass.range_constexpr(2):
                        piece[w] = words[2 * (p % 2) + w, 2 * j + p // 2]
                    widened = cute.make_rmem_tensor(CHUNK_WORDS, cutlass.Int32)
                    widen_words(piece, factor, widened, self.kind)
                    cute.autovec_copy(widened, out[None, 4 * j + p])
        for j in cutlass.range_constexpr(self.per_thread):
            for p in cutlass.range_constexpr(4):
                cute.autovec_copy(out[None, 4 * j + p], bf16_chunks[None, (base + j * ATOM_ROWS * self.row_pieces) ^ p])

    @cute.jit
    def decode_n_major(self, tile: DecoderTile, fp8_words: cute.Tensor, stage, bf16_chunks: cute.Tensor, buffer,
                       scales: cutlass.Int32):
        """The thread's 8 column words (K = 8 piece + kk, bytes of its 4 rows) -> one chunk
        per row, the PRMTs picking each row's bytes."""
        column = cute.make_rmem_tensor(PIECE, cutlass.Int32)
        src = stage * (self.tile_k * self.quads) + tile.src
        for kk in cutlass.range_constexpr(PIECE):
            column[kk] = fp8_words[src + kk * self.quads]
        base = buffer * (self.rows * self.row_pieces) + tile.dst
        out = cute.make_rmem_tensor((CHUNK_WORDS, N_MAJOR_ROWS), cutlass.Int32)
        if self.unexact(scales, column) == 0:
            for i in cutlass.range_constexpr(N_MAJOR_ROWS):
                factor = multiplier((scales >> (8 * i)) & 0xFF, self.kind)
                for p in cutlass.range_constexpr(CHUNK_WORDS):
                    out[p, i] = scaled_pair(column[2 * p], column[2 * p + 1], pair_selector(i, 4 + i), factor,
                                            self.kind)
        else:
            for i in cutlass.range_constexpr(N_MAJOR_ROWS):
                row = cute.make_rmem_tensor(PIECE // 4, cutlass.Int32)
                for half in cutlass.range_constexpr(PIECE // 4):
                    word = cutlass.Int32(0)
                    for b in cutlass.range_constexpr(4):
                        word = word | (((column[4 * half + b] >> (8 * i)) & 0xFF) << (8 * b))
                    row[half] = word
                widened = cute.make_rmem_tensor(CHUNK_WORDS, cutlass.Int32)
                widen_words(row, e8m0_decode((scales >> (8 * i)) & 0xFF), widened, self.kind)
                cute.autovec_copy(widened, out[None, i])
        for i in cutlass.range_constexpr(N_MAJOR_ROWS):
            # row first + i: its chunk's swizzle (first % 8 is 0 or 4, so + i stays below 8)
            swizzle = (tile.first & (SWIZZLE_ROWS - 1)) + i
            cute.autovec_copy(out[None, i], bf16_chunks[None, base + i * self.row_pieces + (tile.block ^ swizzle)])
