"""fp32 bit casts and bf16 rounding by inline PTX, so the rounding is the named instruction's."""

import cutlass
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


@dsl_user_op
def f32_from_bits(bits: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Float32:
    """The fp32 whose bits are ``bits``."""
    return cutlass.Float32(llvm.bitcast(T.f32(), cutlass.Int32(bits).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def bits_of_f32(x: cutlass.Float32, *, loc=None, ip=None) -> cutlass.Int32:
    """The bits of fp32 ``x``."""
    return cutlass.Int32(llvm.bitcast(T.i32(), cutlass.Float32(x).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def f32x2_to_bf16x2(x0, x1, *, loc=None, ip=None) -> cutlass.Int32:
    """2 fp32 -> one word of 2 bf16 (x0 in the low half), round to nearest even."""
    operands = [cutlass.Float32(x).ir_value(loc=loc, ip=ip) for x in (x0, x1)]
    return cutlass.Int32(
        llvm.inline_asm(T.i32(), operands, "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f", loc=loc, ip=ip)
    )


@dsl_user_op
def rounded_to_bf16(x, *, loc=None, ip=None) -> cutlass.Float32:
    """fp32 ``x`` rounded to the nearest bf16 (ties to even, NaN kept), as fp32: one packed
    conversion of (0, x), whose word is the rounded value's fp32 bits (F2FP, on the ALU
    pipe; the scalar cvt.rn.bf16.f32 becomes F2F, on the conversion unit)."""
    return f32_from_bits(f32x2_to_bf16x2(0.0, x, loc=loc, ip=ip), loc=loc, ip=ip)
