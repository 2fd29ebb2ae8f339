"""Building-block kernels of the MXFP8 family (blockscaled_contract.md), one thread per item
(QuantizeD: one block per tile):

- ``DequantizeA`` / ``DequantizeB``: an FP8 operand times its E8M0 block scales -> a bf16
  K-major workspace (exact while the product fits bf16's 8-bit exponent), 16 elements per
  item; from K-major FP8 as 2 pieces of 8 (``thread_pieces``), so that every load and store
  instruction of a warp covers one contiguous span;
- ``WidenC``: an FP8 C -> bf16 (exact, no scale);
- ``QuantizeD``: the fp32 D, read once through shared memory a 32-row tile at a time, -> FP8
  D_row and D_col and their E8M0 SFD bytes, bit for bit the contract's quantizer
  (tests/gpu/blockscaled_reference.py).

FP8 data moves as 32-bit words of 4 values and is converted by inline PTX (``cvt.rn.f16x2``
to decode, ``cvt.rn.satfinite.e4m3x2/e5m2x2.f32`` to encode, ``cvt.rn.bf16x2.f32``), so the
rounding is exactly the named instruction's. Kernels take raw pointers and build typed views
with explicit alignment; byte offsets into matrices are 64-bit.

Constraints: ``threads`` a multiple of 32 (QuantizeD: at most 288, its tile of 32 x (5
threads + 16) bytes in static shared memory); matrix pointers (A, B and each expert's B, C,
the bf16 outputs, D, D_row, D_col) 16-byte aligned; K a multiple of 16 (a row's last
32-block may be half full); 2N a multiple of 64; L <= 1024; expert boundaries multiples of
128 (the contract's 256 is more); per expert, N * K < 2^31; M * K and L * N * K < 2^35
(int32 dequantizer thread indices, unsigned piece indices).
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .conversions import bits_of_f32, f32_from_bits, f32x2_to_bf16x2
from .expert_search import expert_of_row

SF_VEC = 32  # elements per E8M0 scale
HALF_BLOCK = 16  # K rows are padded to 16 elements, so a 32-block may be half full
PIECE = 8  # FP8 elements of one K-major dequantizer load: 8 bytes in, 16 bytes of bf16 out
PIECES_PER_THREAD = 2  # a K-major dequantizer thread's pieces (HALF_BLOCK elements in all)
ATOM_ROWS = 128  # rows of one 512-byte SF atom
ATOM_BLOCKS = 4  # 32-blocks of one SF atom
ATOM_BYTES = 512
E8M0_NAN = 0xFF
E8M0_MAX_FINITE = 0xFE
E8M0_MIN_BITS = 0x00400000  # fp32 bits of 2^-127 (byte 0)
F32_NAN_BITS = 0x7FC00000
F32_ABS_MASK = 0x7FFFFFFF
FLT_MAX = 3.4028234663852886e38
WARP_SIZE = 32
STATIC_SMEM_BYTES = 48 * 1024  # a kernel's static shared memory limit

# FP8 dtype -> (PTX type name, f32(1/max) used by the quantizer's scale)
FP8_FORMATS = {
    cutlass.Float8E4M3FN: ("e4m3", 1 / 448),
    cutlass.Float8E5M2: ("e5m2", 1 / 128),
}


def fp8_format(dtype: type, argument: str) -> tuple[str, float]:
    """(PTX name, quantizer rcp) of an FP8 dtype; a clear error naming ``argument`` otherwise."""
    if dtype not in FP8_FORMATS:
        raise ValueError(f"{argument}: got {dtype}, need one of {[t.__name__ for t in FP8_FORMATS]}")
    return FP8_FORMATS[dtype]


def check_threads(threads: int) -> int:
    """Threads per block: whole warps (the column quantizer searches experts warp-wide)."""
    if threads <= 0 or threads % WARP_SIZE:
        raise ValueError(f"threads: got {threads}, need a positive multiple of {WARP_SIZE}")
    return threads


# --- inline PTX ----------------------------------------------------------


@dsl_user_op
def fp8x4_to_f32x4(word: cutlass.Int32, kind: str, *, loc=None, ip=None) -> list:
    """The 4 FP8 values of ``word`` (lowest byte first) as fp32, exact (FP8 -> f16 -> f32)."""
    result = llvm.inline_asm(
        llvm.StructType.get_literal([T.f32()] * 4),
        [cutlass.Int32(word).ir_value(loc=loc, ip=ip)],
        "{\n"
        ".reg .b16 lo, hi;\n"
        ".reg .b32 h01, h23;\n"
        ".reg .f16 v0, v1, v2, v3;\n"
        "mov.b32 {lo, hi}, $4;\n"
        f"cvt.rn.f16x2.{kind}x2 h01, lo;\n"
        f"cvt.rn.f16x2.{kind}x2 h23, hi;\n"
        "mov.b32 {v0, v1}, h01;\n"
        "mov.b32 {v2, v3}, h23;\n"
        "cvt.f32.f16 $0, v0;\n"
        "cvt.f32.f16 $1, v1;\n"
        "cvt.f32.f16 $2, v2;\n"
        "cvt.f32.f16 $3, v3;\n"
        "}",
        "=f,=f,=f,=f,r",
        loc=loc,
        ip=ip,
    )
    return [cutlass.Float32(llvm.extractvalue(T.f32(), result, [i], loc=loc, ip=ip)) for i in range(4)]


@dsl_user_op
def f32x4_to_fp8x4(x0, x1, x2, x3, kind: str, *, loc=None, ip=None) -> cutlass.Int32:
    """4 fp32 -> one word of 4 FP8 (x0 in the lowest byte), cvt.rn.satfinite: round to
    nearest even, out-of-range and inf to +-max, NaN kept."""
    operands = [cutlass.Float32(x).ir_value(loc=loc, ip=ip) for x in (x0, x1, x2, x3)]
    return cutlass.Int32(
        llvm.inline_asm(
            T.i32(),
            operands,
            "{\n"
            ".reg .b16 lo, hi;\n"
            f"cvt.rn.satfinite.{kind}x2.f32 lo, $2, $1;\n"
            f"cvt.rn.satfinite.{kind}x2.f32 hi, $4, $3;\n"
            "mov.b32 $0, {lo, hi};\n"
            "}",
            "=r,f,f,f,f",
            loc=loc,
            ip=ip,
        )
    )


# --- views ------------------------------------------------------------------------------


@cute.jit
def gmem_vector(address: cutlass.Int64, dtype: cutlass.Constexpr, count: cutlass.Constexpr, align: cutlass.Constexpr):
    """``count`` contiguous ``dtype`` elements at global ``address`` (``align``-byte aligned)."""
    pointer = cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)
    return cute.make_tensor(pointer, cute.make_layout(count))


@cute.jit
def gmem_column(address: cutlass.Int64, dtype: cutlass.Constexpr, stride: cutlass.Int32, align: cutlass.Constexpr):
    """32 ``dtype`` elements ``stride`` elements apart from global ``address`` (a block column)."""
    pointer = cute.make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=align)
    return cute.make_tensor(pointer, cute.make_layout(SF_VEC, stride=stride))


@cute.jit
def gmem_array(pointer: cute.Pointer, dtype: cutlass.Constexpr, count: cutlass.Int32, align: cutlass.Constexpr):
    """``pointer`` as a 1-D array of ``count`` ``dtype`` elements."""
    return cute.make_tensor(
        cute.make_ptr(dtype, pointer.toint(), cute.AddressSpace.gmem, assumed_align=align), cute.make_layout(count)
    )


@cute.jit
def matrix_index(row: cutlass.Int32, row_length: cutlass.Int32, column: cutlass.Int32) -> cutlass.Int64:
    """The 64-bit element index row * row_length + column of a row-major matrix."""
    return cutlass.Int64(row) * cutlass.Int64(row_length) + cutlass.Int64(column)


@cute.jit
def byte_value(byte: cutlass.Uint8) -> cutlass.Int32:
    """A loaded byte as 0..255 (the DSL's Uint8 -> Int32 conversion sign-extends)."""
    return byte.to(cutlass.Int32) & 0xFF


@cute.jit
def store_byte(address: cutlass.Int64, byte: cutlass.Int32):
    """Store the low byte of ``byte`` at global ``address``."""
    gmem_vector(address, cutlass.Uint8, 1, 1)[0] = byte.to(cutlass.Uint8)


@cute.jit
def item_index(threads: cutlass.Constexpr):
    """The global index of this thread's item."""
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    return bidx * threads + tidx


# --- scale-factor layout ------------------------------------------------------------------


@cute.jit
def k_atoms(kc: cutlass.Int32):
    """RK: SF atoms along the contraction for a length of ``kc`` (4 32-blocks per atom)."""
    return ((kc + SF_VEC - 1) // SF_VEC + ATOM_BLOCKS - 1) // ATOM_BLOCKS


@cute.jit
def row_atoms(rows: cutlass.Int32):
    """RR: SF atoms along the rows (128 rows per atom)."""
    return (rows + ATOM_ROWS - 1) // ATOM_ROWS


@cute.jit
def sf_offset(row: cutlass.Int32, block: cutlass.Int32, atoms_k: cutlass.Int32):
    """Byte of the scale of (row, 32-block) in one batch of an SF allocation whose rows span
    ``atoms_k`` atoms: ((row//128)*RK + block//4)*512 + (row%32)*16 + ((row//32)%4)*4 + block%4."""
    atom = (row // ATOM_ROWS) * atoms_k + block // ATOM_BLOCKS
    return atom * ATOM_BYTES + (row % 32) * 16 + ((row // 32) % 4) * 4 + block % ATOM_BLOCKS


# --- E8M0 --------------------------------------------------------------------------------


@cute.jit
def e8m0_decode(byte: cutlass.Int32) -> cutlass.Float32:
    """E8M0 byte -> 2^(byte - 127) in fp32: byte 0 is the subnormal 2^-127, 255 is NaN."""
    bits = byte << 23
    if byte == 0:
        bits = cutlass.Int32(E8M0_MIN_BITS)
    if byte == E8M0_NAN:
        bits = cutlass.Int32(F32_NAN_BITS)
    return f32_from_bits(bits)


@cute.jit
def e8m0_round_up(x: cutlass.Float32) -> cutlass.Int32:
    """fp32 x >= 0 -> the E8M0 byte of the smallest 2^e >= x, on fp32 bits: NaN -> 0xFF,
    inf -> 0xFE, 0 -> 0, never rounding into NaN."""
    bits = bits_of_f32(x)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    byte = exponent
    if exponent == 0xFF:
        byte = cutlass.Int32(E8M0_MAX_FINITE)
        if mantissa != 0:
            byte = cutlass.Int32(E8M0_NAN)
    elif mantissa > 0 and exponent != E8M0_MAX_FINITE:
        # a subnormal at most 2^-127 rounds up to byte 0 (2^-127) itself
        if exponent != 0 or mantissa > E8M0_MIN_BITS:
            byte = exponent + 1
    return byte


@cute.jit
def load_scale(sf_address: cutlass.Int64, offset: cutlass.Int32) -> cutlass.Float32:
    """The decoded E8M0 scale at byte ``offset`` of the SF allocation at ``sf_address``."""
    return e8m0_decode(byte_value(gmem_vector(sf_address + cutlass.Int64(offset), cutlass.Uint8, 1, 1)[0]))


# --- the D quantizer ---------------------------------------------------------------------


@cute.jit
def block_amax(values: cute.Tensor) -> cutlass.Float32:
    """max |v| over a register block, NaN if any v is NaN (as torch's amax)."""
    amax = cutlass.Float32(0.0)
    for j in cutlass.range_constexpr(cute.size(values)):
        magnitude = f32_from_bits(bits_of_f32(values[j]) & F32_ABS_MASK)
        amax = cute.arch.fmax(amax, magnitude, nan=True)
    return amax


@cute.jit
def scale_byte(
    amax: cutlass.Float32, norm_const: cutlass.Float32, rcp: cutlass.Constexpr, row_order: cutlass.Constexpr
) -> cutlass.Int32:
    """The SFD byte: round-up of f32(f32(amax * rcp) * nc) (rows) or f32(amax * f32(rcp * nc))
    (columns)."""
    if cutlass.const_expr(row_order):
        x = (amax * cutlass.Float32(rcp)) * norm_const
    else:
        x = amax * (cutlass.Float32(rcp) * norm_const)
    return e8m0_round_up(x)


@cute.jit
def quantize_scale(byte: cutlass.Int32, norm_const: cutlass.Float32) -> cutlass.Float32:
    """s = min(f32(nc * 2^(127 - byte)), FLT_MAX), NaN for byte 0xFF. 2^(127 - byte) is
    the E8M0 value of byte 254 - byte, exact down to the subnormal 2^-127."""
    s = cute.arch.fmin(norm_const * e8m0_decode(E8M0_MAX_FINITE - byte), cutlass.Float32(FLT_MAX))
    if byte == E8M0_NAN:
        s = f32_from_bits(cutlass.Int32(F32_NAN_BITS))
    return s


@cute.jit
def quantize_block(
    values: cute.Tensor,
    words: cute.Tensor,
    norm_const: cutlass.Float32,
    kind: cutlass.Constexpr,
    rcp: cutlass.Constexpr,
    row_order: cutlass.Constexpr,
) -> cutlass.Int32:
    """Quantize 32 fp32 register values into 8 words of FP8 (``words``); returns the SFD byte."""
    byte = scale_byte(block_amax(values), norm_const, rcp, row_order)
    s = quantize_scale(byte, norm_const)
    for w in cutlass.range_constexpr(SF_VEC // 4):
        words[w] = f32x4_to_fp8x4(
            values[4 * w] * s, values[4 * w + 1] * s, values[4 * w + 2] * s, values[4 * w + 3] * s, kind
        )
    return byte


# --- FP8 -> bf16 ----------------------------------------------------------------------


@cute.jit
def widen_words(fp8_words: cute.Tensor, scale: cutlass.Float32, bf16_words: cute.Tensor, kind: cutlass.Constexpr):
    """FP8 words (4 values each) times ``scale`` -> bf16x2 words (twice as many)."""
    for w in cutlass.range_constexpr(cute.size(fp8_words)):
        v = fp8x4_to_f32x4(fp8_words[w], kind)
        bf16_words[2 * w] = f32x2_to_bf16x2(v[0] * scale, v[1] * scale)
        bf16_words[2 * w + 1] = f32x2_to_bf16x2(v[2] * scale, v[3] * scale)


@cute.jit
def store_widened(fp8_words: cute.Tensor, scale: cutlass.Float32, dst_address: cutlass.Int64, kind: cutlass.Constexpr):
    """Widen one half block (4 FP8 words) and store its 16 bf16 (32 bytes) at ``dst_address``."""
    bf16_words = cute.make_rmem_tensor(2 * HALF_BLOCK // 4, cutlass.Int32)
    widen_words(fp8_words, scale, bf16_words, kind)
    cute.autovec_copy(bf16_words, gmem_vector(dst_address, cutlass.Int32, 2 * HALF_BLOCK // 4, 16))


@cute.jit
def widen_contiguous(
    src_address: cutlass.Int64,
    dst_address: cutlass.Int64,
    length: cutlass.Int32,
    scale: cutlass.Float32,
    kind: cutlass.Constexpr,
):
    """The first min(length, 32) (a multiple of 16) contiguous FP8 values at ``src_address``
    times ``scale`` -> bf16 at ``dst_address``; 16-byte loads and stores."""
    for half in cutlass.range_constexpr(SF_VEC // HALF_BLOCK):
        if half * HALF_BLOCK < length:
            fp8_words = cute.make_rmem_tensor(HALF_BLOCK // 4, cutlass.Int32)
            src = gmem_vector(src_address + half * HALF_BLOCK, cutlass.Int32, HALF_BLOCK // 4, 16)
            cute.autovec_copy(src, fp8_words)
            store_widened(fp8_words, scale, dst_address + half * HALF_BLOCK * 2, kind)


@cute.jit
def widen_strided_half_block(
    src: cute.Tensor, first: cutlass.Int32, scale: cutlass.Float32, dst_address: cutlass.Int64, kind: cutlass.Constexpr
):
    """src[first + j] (uint8 FP8 bytes, any stride) for j < 16 times ``scale`` -> 16
    contiguous bf16 at ``dst_address``."""
    fp8_words = cute.make_rmem_tensor(HALF_BLOCK // 4, cutlass.Int32)
    for w in cutlass.range_constexpr(HALF_BLOCK // 4):
        word = cutlass.Int32(0)
        for byte in cutlass.range_constexpr(4):
            word = word | (byte_value(src[first + 4 * w + byte]) << (8 * byte))
        fp8_words[w] = word
    store_widened(fp8_words, scale, dst_address, kind)


# --- kernels -----------------------------------------------------------------------------


@cute.jit
def thread_pieces(threads: cutlass.Constexpr) -> list:
    """This thread's pieces (PIECE consecutive elements each) of a K-major dequantizer: lanes
    l and l + 32 of its warp's 64 consecutive pieces, so that each load instruction of a warp
    reads 256 contiguous bytes and each store writes 512."""
    # unsigned from here on: // and % compile without signed floor-division fix-ups
    i = cutlass.Uint32(item_index(threads))
    lane = i % WARP_SIZE
    first = (i - lane) * PIECES_PER_THREAD + lane
    return [first + WARP_SIZE * j for j in range(PIECES_PER_THREAD)]


@cute.jit
def dequantize_pieces(
    src_address: cutlass.Int64,
    sf_address: cutlass.Int64,
    dst_address: cutlass.Int64,
    pieces: list,
    rows: cutlass.Int32,
    k: cutlass.Int32,
    kind: cutlass.Constexpr,
):
    """``pieces`` (indices < rows * K/8) of a row-major (rows, K) FP8 matrix at ``src_address``
    times their scales (the SF allocation at ``sf_address``) -> bf16 (rows, K) at
    ``dst_address``. Piece p is elements [8p, 8p + 8): one 8-byte load, one 16-byte store; every
    load (and scale) is issued before the first store."""
    row_pieces = cutlass.Uint32(k) // PIECE
    count = cutlass.Uint32(rows) * row_pieces
    atoms_k = cutlass.Uint32(k_atoms(k))
    fp8_words = cute.make_rmem_tensor((PIECE // 4, PIECES_PER_THREAD), cutlass.Int32)
    scales = cute.make_rmem_tensor(PIECES_PER_THREAD, cutlass.Float32)
    for j in cutlass.range_constexpr(PIECES_PER_THREAD):
        if pieces[j] < count:
            row = pieces[j] // row_pieces
            block = (pieces[j] - row * row_pieces) // (SF_VEC // PIECE)
            scales[j] = load_scale(sf_address, sf_offset(row, block, atoms_k))
            src = gmem_vector(src_address + matrix_index(pieces[j], PIECE, 0), cutlass.Int32, PIECE // 4, PIECE)
            cute.autovec_copy(src, fp8_words[None, j])
    for j in cutlass.range_constexpr(PIECES_PER_THREAD):
        if pieces[j] < count:
            bf16_words = cute.make_rmem_tensor(PIECE // 2, cutlass.Int32)
            widen_words(fp8_words[None, j], scales[j], bf16_words, kind)
            dst = gmem_vector(dst_address + matrix_index(pieces[j], 2 * PIECE, 0), cutlass.Int32, PIECE // 2, 16)
            cute.autovec_copy(bf16_words, dst)


@cute.jit
def write_effective_offsets(
    offsets_ptr: cute.Pointer,
    offsets_ws_ptr: cute.Pointer,
    m: cutlass.Int32,
    l: cutlass.Int32,
    single_group: cutlass.Int32,
    tidx: cutlass.Int32,
    threads: cutlass.Constexpr,
):
    """One block's threads (``tidx`` of ``threads``): offsets_ws = padded_offsets, or [m] when
    single_group != 0 (then padded_offsets is never read)."""
    offsets_ws = gmem_array(offsets_ws_ptr, cutlass.Int32, l, 4)
    if single_group != 0:
        if tidx == 0:
            offsets_ws[0] = m
    else:
        offsets = gmem_array(offsets_ptr, cutlass.Int32, l, 4)
        for t in cutlass.range(tidx, l, threads):
            offsets_ws[t] = offsets[t]


class EffectiveOffsets:
    """The effective expert offsets every later kernel reads (DequantizeA writes them where
    it runs): one block."""

    def __init__(self, threads: int):
        self.threads = check_threads(threads)

    @cute.kernel
    def kernel(
        self,
        offsets_ptr: cute.Pointer,
        offsets_ws_ptr: cute.Pointer,
        m: cutlass.Int32,
        l: cutlass.Int32,
        single_group: cutlass.Int32,
    ):
        """offsets_ws = padded_offsets, or [m] when single_group != 0."""
        tidx, _, _ = cute.arch.thread_idx()
        write_effective_offsets(offsets_ptr, offsets_ws_ptr, m, l, single_group, tidx, self.threads)


class DequantizeA:
    """A (M, K) FP8 K-major with SFA -> bf16 (M, K) K-major; block 0 also writes offsets_ws.
    M * K/16 items (threads), each dequantizing 2 pieces of 8 elements (``thread_pieces``:
    piece p is A's elements [8p, 8p + 8), A read as one array); a 32-block's 4 pieces each
    read its SF byte."""

    def __init__(self, fp8_dtype: type, threads: int):
        self.kind, _ = fp8_format(fp8_dtype, "fp8_dtype")
        self.threads = check_threads(threads)

    @cute.kernel
    def kernel(
        self,
        a_ptr: cute.Pointer,
        sfa_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        offsets_ws_ptr: cute.Pointer,
        m: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
        single_group: cutlass.Int32,
    ):
        """out[r, j] = bf16(a[r, j] * 2^(SFA(r, j//32) - 127)); offsets_ws = padded_offsets,
        or [m] when single_group != 0 (then offsets is never read)."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        if bidx == 0:
            write_effective_offsets(offsets_ptr, offsets_ws_ptr, m, l, single_group, tidx, self.threads)
        pieces = thread_pieces(self.threads)
        dequantize_pieces(a_ptr.toint(), sfa_ptr.toint(), out_ptr.toint(), pieces, m, k, self.kind)


@cute.jit
def expert_bases(
    b_ptr: cute.Pointer,
    sfb_ptr: cute.Pointer,
    expert: cutlass.Int32,
    n: cutlass.Int32,
    k: cutlass.Int32,
    l: cutlass.Int32,
    discrete: cutlass.Constexpr,
):
    """The addresses of expert ``expert``'s (N, K) FP8 matrix and of its SFB: within the
    dense (N, K, L) B and SFB, or read from the (L,) int64 tables of a discrete B."""
    if cutlass.const_expr(discrete):
        b_base = gmem_array(b_ptr, cutlass.Int64, l, 8)[expert]
        sf_base = gmem_array(sfb_ptr, cutlass.Int64, l, 8)[expert]
    else:
        b_base = b_ptr.toint() + cutlass.Int64(expert) * cutlass.Int64(n) * cutlass.Int64(k)
        expert_sf_bytes = row_atoms(n) * k_atoms(k) * ATOM_BYTES
        sf_base = sfb_ptr.toint() + cutlass.Int64(expert) * cutlass.Int64(expert_sf_bytes)
    return b_base, sf_base


class DequantizeB:
    """B (N, K, L) FP8 (K- or N-major; dense, or discrete per-expert matrices) with SFB ->
    bf16 (L, N, K) K-major; L * N * K/16 items (threads).

    K-major: item i dequantizes 2 pieces of 8 elements (``thread_pieces``: piece p is the
    output's elements [8p, 8p + 8), each expert's B read as one array; a warp's 64 pieces lie
    in one expert as N * K/8 is a multiple of 64). N-major: item i = (g * (K/16) + half) * N
    + r dequantizes elements [16 half, 16 half + 16) of row r (consecutive threads read
    consecutive rows of one half block: every byte load of a warp is one 32-byte segment).
    Each item reads the SF byte of each 32-block it touches.
    """

    def __init__(self, fp8_dtype: type, n_major: bool, discrete: bool, threads: int):
        self.kind, _ = fp8_format(fp8_dtype, "fp8_dtype")
        self.n_major = n_major
        self.discrete = discrete
        self.threads = check_threads(threads)

    @cute.kernel
    def kernel(
        self,
        b_ptr: cute.Pointer,
        sfb_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """out[g, r, j] = bf16(b_g[r, j] * 2^(SFB_g(r, j//32) - 127)). Dense: b_ptr is the
        (N, K, L) tensor, sfb_ptr the (.., L) SFB; discrete: both point to (L,) int64 arrays
        of per-expert addresses (each expert's SFB with L = 1)."""
        if cutlass.const_expr(self.n_major):
            self.n_major_half_block(b_ptr, sfb_ptr, out_ptr, n, k, l)
        else:
            pieces = thread_pieces(self.threads)
            expert_pieces = cutlass.Uint32(n) * (cutlass.Uint32(k) // PIECE)
            expert = pieces[0] // expert_pieces
            if expert < cutlass.Uint32(l):
                b_base, sf_base = expert_bases(b_ptr, sfb_ptr, expert, n, k, l, self.discrete)
                first = expert * expert_pieces
                dst = out_ptr.toint() + matrix_index(first, 2 * PIECE, 0)
                local = [piece - first for piece in pieces]
                dequantize_pieces(b_base, sf_base, dst, local, n, k, self.kind)

    @cute.jit
    def n_major_half_block(
        self,
        b_ptr: cute.Pointer,
        sfb_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """This thread's N-major item (see the class docstring)."""
        rows = cutlass.Uint32(n)  # unsigned, as thread_pieces'
        row_halves = cutlass.Uint32(k) // HALF_BLOCK
        i = cutlass.Uint32(item_index(self.threads))
        if i < cutlass.Uint32(l) * rows * row_halves:
            row = i % rows
            expert = i // rows // row_halves
            half = i // rows - expert * row_halves
            b_base, sf_base = expert_bases(b_ptr, sfb_ptr, expert, n, k, l, self.discrete)
            scale = load_scale(sf_base, sf_offset(row, half // (SF_VEC // HALF_BLOCK), k_atoms(k)))
            b_g = cute.make_tensor(
                cute.make_ptr(cutlass.Uint8, b_base, cute.AddressSpace.gmem, assumed_align=1),
                cute.make_layout((n, k), stride=(1, n)),
            )
            dst = out_ptr.toint() + matrix_index(expert * n + row, k, half * HALF_BLOCK) * 2
            widen_strided_half_block(b_g[row, None], half * HALF_BLOCK, scale, dst, self.kind)


class WidenC:
    """FP8 C -> bf16, exact. Item i: elements [32 i, 32 i + 32)."""

    def __init__(self, fp8_dtype: type, threads: int):
        self.kind, _ = fp8_format(fp8_dtype, "fp8_dtype")
        self.threads = check_threads(threads)

    @cute.kernel
    def kernel(self, c_ptr: cute.Pointer, out_ptr: cute.Pointer, count: cutlass.Int32):
        """out[j] = bf16(c[j]) for the 32 elements of each of ``count`` chunks."""
        i = item_index(self.threads)
        if i < count:
            element = matrix_index(i, SF_VEC, 0)
            src = c_ptr.toint() + element
            widen_contiguous(src, out_ptr.toint() + element * 2, cutlass.Int32(SF_VEC), cutlass.Float32(1.0), self.kind)


@cute.jit
def owned_rows(offsets_ptr: cute.Pointer, m: cutlass.Int32, l: cutlass.Int32):
    """Rows some expert owns: below min(padded_offsets[l-1], m)."""
    return cutlass.min(gmem_array(offsets_ptr, cutlass.Int32, l, 4)[l - 1], m)


class QuantizeD:
    """fp32 D (M, 2N) -> FP8 D_row + SFD_row (1x32 blocks along each row) and FP8 D_col (M, 2N,
    row-major as D_row) + SFD_col (32x1 blocks along M), reading D once.

    Block b owns the tile of rows [32 r, 32 r + 32) x columns [W c, W c + W), W = threads,
    b = r * ceil(2N/W) + c. The tile is loaded coalesced (16 bytes a thread, a warp 512
    contiguous bytes of one row) into shared memory, zero past the owned rows; then warp w
    quantizes the 32-block w of the tile's rows (lane = row) and thread t column t, whose
    FP8 bytes go through shared memory so that D_col is stored 16 bytes a thread too.
    """

    def __init__(self, fp8_out_dtype: type, threads: int):
        self.kind, self.rcp = fp8_format(fp8_out_dtype, "fp8_out_dtype")
        self.threads = check_threads(threads)
        self.width = threads  # tile columns: one per thread in the column phase
        # floats per tile row: 16 bytes of padding put the 16-byte reads of 8 consecutive rows
        # (a quarter warp in the row phase) in distinct banks
        self.pitch = threads + 4
        smem_bytes = SF_VEC * (self.pitch * 4 + self.width)  # the fp32 tile and its FP8 codes
        if smem_bytes > STATIC_SMEM_BYTES:
            raise ValueError(
                f"threads: got {threads}, whose tile needs {smem_bytes} bytes of shared memory; "
                f"at most {STATIC_SMEM_BYTES} are static"
            )

    @cute.kernel
    def kernel(
        self,
        d_ptr: cute.Pointer,
        d_row_ptr: cute.Pointer,
        d_col_ptr: cute.Pointer,
        sfd_row_ptr: cute.Pointer,
        sfd_col_ptr: cute.Pointer,
        norm_const_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        m: cutlass.Int32,
        n2: cutlass.Int32,
        l: cutlass.Int32,
        discrete_col_sfd: cutlass.Int32,
    ):
        """Rows at or past min(padded_offsets[l-1], m) are neither read nor written; a
        32-row block whose first row is owned gets its SFD_col bytes, dense (rows = 2N,
        Kc = M) or, when discrete_col_sfd != 0, in the owning expert's own block."""
        bidx, _, _ = cute.arch.block_idx()
        column_tiles = (n2 + self.width - 1) // self.width
        row_block = bidx // column_tiles
        first = row_block * SF_VEC
        first_column = (bidx - row_block * column_tiles) * self.width
        owned = owned_rows(offsets_ptr, m, l)
        if first < owned:  # block-uniform, so the barriers below see every thread
            tile = cute.make_tensor(
                cute.arch.alloc_smem(cutlass.Float32, SF_VEC * self.pitch, 16),
                cute.make_layout(((4, self.width // 4), SF_VEC), stride=((1, 4), self.pitch)),
            )
            codes = cute.arch.alloc_smem(cutlass.Int32, SF_VEC * self.width // 4, 16)
            self.load_tile(d_ptr, tile, first, first_column, owned, n2)
            cute.arch.barrier()
            norm_const = gmem_array(norm_const_ptr, cutlass.Float32, 1, 4)[0]
            self.quantize_rows(tile, d_row_ptr, sfd_row_ptr, norm_const, first, first_column, owned, n2)
            self.quantize_columns(
                tile, codes, sfd_col_ptr, offsets_ptr, norm_const, row_block, first_column, m, n2, l, discrete_col_sfd
            )
            cute.arch.barrier()
            self.store_codes(codes, d_col_ptr, first, first_column, owned, n2)

    @cute.jit
    def load_tile(
        self,
        d_ptr: cute.Pointer,
        tile: cute.Tensor,
        first: cutlass.Int32,
        first_column: cutlass.Int32,
        owned: cutlass.Int32,
        n2: cutlass.Int32,
    ):
        """D's tile -> ``tile``: 16-byte chunk c = i * threads + t of the row-major tile, all
        loads issued before the shared stores; rows past the owned ones are zero (unread)."""
        tidx, _, _ = cute.arch.thread_idx()
        chunks_per_row = self.width // 4
        rounds = SF_VEC * chunks_per_row // self.threads
        chunks = cute.make_rmem_tensor((4, rounds), cutlass.Float32)
        for i in cutlass.range_constexpr(rounds):
            chunk = i * self.threads + tidx
            row = chunk // chunks_per_row
            column = first_column + (chunk - row * chunks_per_row) * 4
            for j in cutlass.range_constexpr(4):
                chunks[j, i] = cutlass.Float32(0.0)
            if first + row < owned and column < n2:
                src = gmem_vector(d_ptr.toint() + matrix_index(first + row, n2, column) * 4, cutlass.Float32, 4, 16)
                cute.autovec_copy(src, chunks[None, i])
        for i in cutlass.range_constexpr(rounds):
            chunk = i * self.threads + tidx
            row = chunk // chunks_per_row
            cute.autovec_copy(chunks[None, i], tile[(None, chunk - row * chunks_per_row), row])

    @cute.jit
    def quantize_rows(
        self,
        tile: cute.Tensor,
        d_row_ptr: cute.Pointer,
        sfd_row_ptr: cute.Pointer,
        norm_const: cutlass.Float32,
        first: cutlass.Int32,
        first_column: cutlass.Int32,
        owned: cutlass.Int32,
        n2: cutlass.Int32,
    ):
        """Warp w: the 32-block w of the tile's rows, lane = row (the lanes' 16-byte reads
        of 8 consecutive rows fall in distinct banks); 32 bytes of D_row a thread."""
        warp = cute.arch.warp_idx()
        lane = cute.arch.lane_idx()
        row = first + lane
        column = first_column + warp * SF_VEC
        if row < owned and column < n2:
            values = cute.make_rmem_tensor((4, SF_VEC // 4), cutlass.Float32)  # values[j]: column j
            for q in cutlass.range_constexpr(SF_VEC // 4):
                cute.autovec_copy(tile[(None, warp * (SF_VEC // 4) + q), lane], values[None, q])
            words = cute.make_rmem_tensor(SF_VEC // 4, cutlass.Int32)
            byte = quantize_block(values, words, norm_const, self.kind, self.rcp, True)
            element = matrix_index(row, n2, column)
            cute.autovec_copy(words, gmem_vector(d_row_ptr.toint() + element, cutlass.Int32, SF_VEC // 4, 16))
            offset = sf_offset(row, column // SF_VEC, k_atoms(n2))
            store_byte(sfd_row_ptr.toint() + cutlass.Int64(offset), byte)

    @cute.jit
    def quantize_columns(
        self,
        tile: cute.Tensor,
        codes: cute.Pointer,
        sfd_col_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        norm_const: cutlass.Float32,
        row_block: cutlass.Int32,
        first_column: cutlass.Int32,
        m: cutlass.Int32,
        n2: cutlass.Int32,
        l: cutlass.Int32,
        discrete_col_sfd: cutlass.Int32,
    ):
        """Thread t: the 32x1 block of column t (rows past the owned ones read as zero); its
        FP8 bytes -> the shared ``codes`` (a row-major 32 x W byte tile), its SFD_col byte ->
        global."""
        tidx, _, _ = cute.arch.thread_idx()
        column = first_column + tidx
        # warp-uniform (2N and the tile's first column are multiples of 32), as the
        # warp-wide expert search needs
        if column < n2:
            values = cute.make_rmem_tensor(SF_VEC, cutlass.Float32)
            for j in cutlass.range_constexpr(SF_VEC):
                values[j] = tile[(tidx % 4, tidx // 4), j]
            words = cute.make_rmem_tensor(SF_VEC // 4, cutlass.Int32)
            byte = quantize_block(values, words, norm_const, self.kind, self.rcp, False)
            code_layout = cute.make_layout((self.width, SF_VEC), stride=(1, self.width))
            code_bytes = cute.make_tensor(cute.recast_ptr(codes, dtype=cutlass.Uint8), code_layout)
            for j in cutlass.range_constexpr(SF_VEC):
                code_bytes[tidx, j] = ((words[j // 4] >> (8 * (j % 4))) & 0xFF).to(cutlass.Uint8)
            offset = col_sf_offset(offsets_ptr, column, row_block, m, n2, l, discrete_col_sfd)
            store_byte(sfd_col_ptr.toint() + cutlass.Int64(offset), byte)

    @cute.jit
    def store_codes(
        self,
        codes: cute.Pointer,
        d_col_ptr: cute.Pointer,
        first: cutlass.Int32,
        first_column: cutlass.Int32,
        owned: cutlass.Int32,
        n2: cutlass.Int32,
    ):
        """``codes`` -> D_col, 16-byte chunk c = i * threads + t of the row-major tile; rows
        past the owned ones are not written."""
        tidx, _, _ = cute.arch.thread_idx()
        chunks_per_row = self.width // 16
        words = cute.make_tensor(
            codes, cute.make_layout(((4, chunks_per_row), SF_VEC), stride=((1, 4), self.width // 4))
        )
        for i in cutlass.range_constexpr(SF_VEC * chunks_per_row // self.threads):
            chunk = i * self.threads + tidx
            row = chunk // chunks_per_row
            position = chunk - row * chunks_per_row
            column = first_column + position * 16
            if first + row < owned and column < n2:
                dst = gmem_vector(d_col_ptr.toint() + matrix_index(first + row, n2, column), cutlass.Int32, 4, 16)
                cute.autovec_copy(words[(None, position), row], dst)


@cute.jit
def col_sf_offset(
    offsets_ptr: cute.Pointer,
    column: cutlass.Int32,
    row_block: cutlass.Int32,
    m: cutlass.Int32,
    n2: cutlass.Int32,
    l: cutlass.Int32,
    discrete_col_sfd: cutlass.Int32,
) -> cutlass.Int32:
    """Byte of SFD_col's scale of (column, 32-row block): dense (rows = 2N, Kc = M), or when
    discrete_col_sfd != 0 in the block of the expert owning the block's first row (rows = 2N,
    Kc = the expert's rows, after the atoms of the experts before it). A warp-wide call."""
    offset = sf_offset(column, row_block, k_atoms(m))
    if discrete_col_sfd != 0:
        first = row_block * SF_VEC
        offsets = gmem_array(offsets_ptr, cutlass.Int32, l, 4)
        expert = expert_of_row(offsets, l, first)
        start = cutlass.Int32(0)
        if expert > 0:
            start = offsets[expert - 1]
        rows = offsets[expert] - start
        offset = row_atoms(n2) * (start // ATOM_ROWS) * ATOM_BYTES + sf_offset(
            column, (first - start) // SF_VEC, k_atoms(rows)
        )
    return offset
