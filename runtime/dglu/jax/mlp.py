"""A small MoE expert MLP in plain JAX whose ``jax.custom_vjp`` backward calls dglu for dH
and dprob: a real client of ``grouped_gemm_dglu_jax`` under ``jax.jit`` and ``jax.grad``.

Rows arrive grouped by expert: x (M, K), prob (M,) float32, padded_offsets (L,) int32, the
cumulative END of each expert's rows (expert g owns rows [offsets[g-1], offsets[g]); rows
past offsets[-1] belong to none and get zero outputs and gradients). With W1 (L, 2N, K),
gate and up rows in the seed's 32-column interleave (even 32-blocks gate, odd blocks up),
and W2 (L, N, K) (the op's dense B, row-major):

    H = X W1_g^T                 jax.lax.ragged_dot
    A = prob * silu(gate) * up   gate, up: H's even and odd 32-column blocks
    Y = A W2_g                   jax.lax.ragged_dot

``expert_mlp`` is the forward in plain JAX: ``jax.grad`` of it is the reference. ``make_mlp``
gives the same forward with a custom backward: ``backward_op`` computes dH and dprob from
(dY, W2, H, prob, offsets); then dX = dH W1_g, dW1_g = dH_g^T X_g and dW2_g = A_g^T dY_g
(jax.lax.ragged_dot / ragged_dot_general). ``dglu_backward`` (``moe_mlp``'s) is one fused
dglu call on bf16 copies of dY, W2 and H (act_func="dswiglu", alpha = beta = 1), so its
offsets must be multiples of the variant's m_aligned (256), unchecked under tracing;
``reference_backward`` is the same math in plain JAX (the seam the CPU tests use).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from . import grouped_gemm_dglu_jax

BLOCK = 32  # the gate/up interleave: 32 gate columns, then 32 up columns, and so on
OP_DTYPE = jnp.bfloat16  # dglu's operand dtype here
BackwardOp = Callable[[Any, Any, Any, Any, Any], tuple[Any, Any]]

# Grouped outer products: (M, P) x (M, Q) -> (L, P, Q), summing each expert's rows.
_GROUPED_OUTER = jax.lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(([0], [0]), ([], [])),
    lhs_ragged_dimensions=[0],
    rhs_group_dimensions=[],
)


def group_sizes(padded_offsets: Any) -> Any:
    """(L,) int32 rows per expert from the cumulative ends."""
    ends = padded_offsets.astype(jnp.int32)
    return jnp.diff(ends, prepend=jnp.zeros((1,), jnp.int32))


def gate_up(h: Any) -> tuple[Any, Any]:
    """H (M, 2N) -> its gate and up columns, each (M, N), from the 32-column interleave."""
    m, two_n = h.shape
    blocks = h.reshape(m, two_n // (2 * BLOCK), 2, BLOCK)
    return blocks[:, :, 0, :].reshape(m, -1), blocks[:, :, 1, :].reshape(m, -1)


def swiglu(h: Any) -> Any:
    """silu(gate) * up of H's interleaved columns, (M, N)."""
    gate, up = gate_up(h)
    return jax.nn.silu(gate) * up


def hidden(x: Any, w1: Any, padded_offsets: Any) -> Any:
    """H = X W1_g^T, (M, 2N)."""
    return jax.lax.ragged_dot(x, jnp.swapaxes(w1, 1, 2), group_sizes(padded_offsets))


def _output(h: Any, w2: Any, prob: Any, padded_offsets: Any) -> Any:
    return jax.lax.ragged_dot(prob[:, None] * swiglu(h), w2, group_sizes(padded_offsets))


def expert_mlp(x: Any, w1: Any, w2: Any, prob: Any, padded_offsets: Any) -> Any:
    """Y (M, K) of the expert MLP in plain JAX (differentiable by jax.grad)."""
    return _output(hidden(x, w1, padded_offsets), w2, prob, padded_offsets)


def reference_backward(dy: Any, w2: Any, h: Any, prob: Any, padded_offsets: Any) -> tuple[Any, Any]:
    """dH (M, 2N) and dprob (M,) in plain JAX: dA = dY W2_g^T, then the SwiGLU's vjp."""
    da = jax.lax.ragged_dot(dy, jnp.swapaxes(w2, 1, 2), group_sizes(padded_offsets))
    act, act_vjp = jax.vjp(swiglu, h)
    (dh,) = act_vjp(prob[:, None] * da)
    return dh, jnp.sum(da * act, axis=1)


def dglu_backward(dy: Any, w2: Any, h: Any, prob: Any, padded_offsets: Any) -> tuple[Any, Any]:
    """dH (M, 2N) and dprob (M,) from one dglu call: A = dY, B = W2 (L, N, K), C = H; rows
    past offsets[-1] (which the op leaves unwritten in D) are zeroed."""
    m, l = dy.shape[0], w2.shape[0]
    ones = jnp.ones((l,), jnp.float32)
    offsets = padded_offsets.astype(jnp.int32)
    out = grouped_gemm_dglu_jax(
        dy.astype(OP_DTYPE), h.astype(OP_DTYPE), padded_offsets=offsets,
        alpha_tensor=ones, beta_tensor=ones, prob_tensor=prob.reshape(m, 1, 1),
        b_tensor=w2.astype(OP_DTYPE), act_func="dswiglu",
    )  # fmt: skip
    owned = jnp.arange(m) < offsets[-1]
    dh = jnp.where(owned[:, None], out.d_row_tensor.reshape(m, -1), 0).astype(h.dtype)
    return dh, out.dprob_tensor.reshape(m).astype(prob.dtype)


def make_mlp(backward_op: BackwardOp = dglu_backward) -> Callable[..., Any]:
    """``expert_mlp`` with a custom vjp whose dH and dprob come from ``backward_op``."""

    @jax.custom_vjp
    def mlp(x: Any, w1: Any, w2: Any, prob: Any, padded_offsets: Any) -> Any:
        return expert_mlp(x, w1, w2, prob, padded_offsets)

    def forward(x, w1, w2, prob, padded_offsets):
        h = hidden(x, w1, padded_offsets)
        return _output(h, w2, prob, padded_offsets), (x, w1, w2, prob, padded_offsets, h)

    def backward(saved, dy):
        x, w1, w2, prob, padded_offsets, h = saved
        sizes = group_sizes(padded_offsets)
        dh, dprob = backward_op(dy, w2, h, prob, padded_offsets)
        dx = jax.lax.ragged_dot(dh, w1, sizes)
        dw1 = jax.lax.ragged_dot_general(dh, x, sizes, _GROUPED_OUTER)
        a = prob[:, None] * swiglu(h)
        dw2 = jax.lax.ragged_dot_general(a, dy, sizes, _GROUPED_OUTER)
        return dx, dw1, dw2, dprob, None  # padded_offsets: integers, no cotangent

    mlp.defvjp(forward, backward)
    return mlp


moe_mlp = make_mlp()
"""The expert MLP whose backward is dglu's fused dH and dprob (see the module docstring)."""
