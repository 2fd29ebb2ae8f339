"""Building blocks of the MXFP8 family (blockscaled_contract.md): the E8M0 scale-factor
layout, FP8 conversions, the D quantizer's block operation (``quantize_block``, bit for bit
the contract's quantizer, tests/gpu/blockscaled_reference.py) and one small kernel,
``EffectiveOffsets``: the expert offsets the fused kernel reads (padded_offsets, or [M] for
a single group).

FP8 data moves as 32-bit words of 4 values and is converted by inline PTX (``cvt.rn.f16x2``
to decode, ``cvt.rn.satfinite.e4m3x2/e5m2x2.f32`` to encode, ``cvt.rn.bf16x2.f32``), so the
rounding is exactly the named instruction's. Kernels take raw pointers and build typed views
with explicit alignment; byte offsets into matrices are 64-bit.

Constraints: ``threads`` a multiple of 32; 2N a multiple of 64; L <= 1024; expert
boundaries multiples of 128 (the contract's 256 is more).
"""

import cutlass
import cutlass.cute as cute
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

from .conversions import bits_of_f32, f32_from_bits, f32x2_to_bf16x2
from .expert_search import expert_of_row

SF_VEC = 32  # elements per E8M0 scale
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

# FP8 dtype -> (PTX type name, f32(1/max) used by the quantizer's scale)
FP8_FORMATS = {
    cutlass.Float8E4M3FN: ("e4m3", 1 / 448),
    cutlass.Float8E5M2: ("e5m2", 1 / 128),
}


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


# --- kernels -----------------------------------------------------------------------------


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
    """The effective expert offsets every later kernel reads: one block."""

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
