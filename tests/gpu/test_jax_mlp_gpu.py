"""dglu.jax.mlp on the GPU: jax.grad of the expert MLP whose backward is dglu's fused dH and
dprob (bf16 operands) against jax.grad of the same MLP in plain JAX (float32, highest matmul
precision), under jax.jit, with uneven experts, one of them empty, and rows of no expert."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
jnp = jax.numpy

from dglu.jax import mlp  # noqa: E402

pytestmark = pytest.mark.gpu
N, K = 64, 128
GROUP_ROWS = (256, 0, 512)  # multiples of the op's m_aligned (256); expert 1 empty
EXTRA_ROWS = 256
M, L = sum(GROUP_ROWS) + EXTRA_ROWS, len(GROUP_ROWS)
RTOL = 2e-2  # norm-wise: the op rounds dY, W2, H and dH to bf16
GRAD_NAMES = ("x", "w1", "w2", "prob")


def _inputs(seed: int) -> tuple:
    keys = jax.random.split(jax.random.key(seed), 5)
    x = jax.random.normal(keys[0], (M, K), jnp.float32)
    w1 = jax.random.normal(keys[1], (L, 2 * N, K), jnp.float32) / np.sqrt(K)
    w2 = jax.random.normal(keys[2], (L, N, K), jnp.float32) / np.sqrt(N)
    prob = jax.random.uniform(keys[3], (M,), jnp.float32, -1.0, 1.0).at[::7].set(0.0)
    dy = jax.random.normal(keys[4], (M, K), jnp.float32)
    offsets = jnp.asarray(np.cumsum(GROUP_ROWS), jnp.int32)
    return (x, w1, w2, prob, offsets), dy


def _grads(function, args: tuple, dy) -> tuple:
    def loss(*a):
        return jnp.sum(function(*a) * dy)

    with jax.default_matmul_precision("highest"):
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*args)


def test_grads_through_dglu_match_jax_grad_of_the_plain_mlp(seed):
    args, dy = _inputs(seed)
    got = _grads(mlp.moe_mlp, args, dy)
    want = _grads(mlp.expert_mlp, args, dy)
    for name, g, w in zip(GRAD_NAMES, got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert np.isfinite(g).all(), f"d{name}: not finite"
        error = np.linalg.norm(g - w) / np.linalg.norm(w)
        assert error <= RTOL, f"d{name}: relative error {error:.2e} > {RTOL:.0e} (seed {seed})"
    dprob = np.asarray(got[3])
    assert not dprob[sum(GROUP_ROWS):].any()  # rows of no expert get no gradient
