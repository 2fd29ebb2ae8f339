"""dGLU activation math, as a table from the activation's name to its DSL function.

Each function takes one gate/input pair of X (fp32) and the activation's compile-time
constants (``dglu.contract.keys.ACT_PARAM_DEFAULTS`` names them) and returns (d_gate,
d_input, dprob) per unit of the incoming gradient, before prob. X is C scaled by the
expert's beta (``scales_c_by_beta`` says when): the kernel multiplies before calling.
"""

import cutlass
import cutlass.cute as cute


@cute.jit
def sigmoid(z: cutlass.Float32):
    return cute.arch.rcp_approx(1.0 + cute.math.exp(-z, fastmath=True))


@cute.jit
def dswiglu(g: cutlass.Float32, u: cutlass.Float32, p: dict):
    """SwiGLU, act = G sigmoid(G) * U."""
    s = sigmoid(g)
    act = g * s
    return u * s * (1.0 + g * (1.0 - s)), act, act * u


@cute.jit
def dgeglu(gate: cutlass.Float32, x: cutlass.Float32, p: dict):
    """GeGLU with clamps, act = Gc sigmoid(a Gc) * (Uc + offset)."""
    a = p["geglu_alpha"]
    hi = p["glu_clamp_max"]
    lo = p["glu_clamp_min"]
    offset = p["linear_offset"]
    gc = cute.arch.fmin(gate, cutlass.Float32(hi))
    xc = cute.arch.fmax(cute.arch.fmin(x, cutlass.Float32(hi)), cutlass.Float32(lo))
    s = sigmoid(a * gc)
    gate_mask = cutlass.Float32(cutlass.select_(gate <= hi, 1.0, 0.0))
    x_mask = cutlass.Float32(cutlass.select_((x >= lo) & (x <= hi), 1.0, 0.0))
    act = gc * s
    d_gate = (xc + offset) * s * (1.0 + a * gc * (1.0 - s)) * gate_mask
    return d_gate, act * x_mask, act * (xc + offset)


@cute.jit
def dsituglu(gate: cutlass.Float32, x: cutlass.Float32, p: dict):
    """dSiTU-GLU: T_g = b1 tanh(G/b1) sigmoid(G), T_u = b2 tanh(U/b2)."""
    b1 = p["situ_beta1"]
    b2 = p["situ_beta2"]
    s = sigmoid(gate)
    tg = cute.math.tanh(gate * (1.0 / b1))
    tu = cute.math.tanh(x * (1.0 / b2))
    t_gate = b1 * tg * s
    t_input = b2 * tu
    dt_gate = (1.0 - tg * tg) * s + b1 * tg * s * (1.0 - s)
    dt_input = 1.0 - tu * tu
    return t_input * dt_gate, t_gate * dt_input, t_gate * t_input


ACTIVATIONS = {"dswiglu": dswiglu, "dgeglu": dgeglu, "dsituglu": dsituglu}


def scales_c_by_beta(act_func: str, block_scaled_contract: bool) -> bool:
    """Whether X = beta_g * C_g (one fp32 product per element) or X = C as stored.

    The BF16 contract scales C by beta for every activation. The block-scaled contract
    does too, but for dGeGLU, which consumes the saved C directly and ignores beta."""
    return not (block_scaled_contract and act_func == "dgeglu")
