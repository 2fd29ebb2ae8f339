"""dglu.jax.mlp on XLA:CPU: the plain-JAX expert MLP's forward and jax.grad against a numpy
float64 computation written from the op contract (the seed's gate/up column formula), and
the custom_vjp wiring, with the pure-JAX ``reference_backward`` in the dglu call's place
(the ``backward_op`` seam), against jax.grad of the plain MLP; and ``moe_mlp``'s dglu call
under jax.grad, run by test_jax_api's CPU recorder."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
jnp = jax.numpy

import test_jax_api  # noqa: E402
from test_jax_api import driver, plans_on_cpu  # noqa: E402, F401  (the stand-in fixtures)

from dglu.jax import mlp  # noqa: E402

N, K = 64, 48  # two 32-column gate/up blocks
GROUP_ROWS = (3, 0, 5)  # uneven, one expert empty
EXTRA_ROWS = 2  # rows past the last expert: owned by none
M, L = sum(GROUP_ROWS) + EXTRA_ROWS, len(GROUP_ROWS)
ENDS = np.cumsum(GROUP_ROWS)


def _inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((M, K)),
        "w1": rng.standard_normal((L, 2 * N, K)) / np.sqrt(K),
        "w2": rng.standard_normal((L, N, K)) / np.sqrt(N),
        "prob": rng.uniform(-1.0, 1.0, M),
        "dy": rng.standard_normal((M, K)),
    }


def _gate_up_columns() -> tuple[np.ndarray, np.ndarray]:
    """The contract's columns of H: gate j at 64*(j//32) + j%32, up j 32 further."""
    j = np.arange(N)
    gate = 64 * (j // 32) + j % 32
    return gate, gate + 32


def _numpy_mlp(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Y and the gradients of sum(Y * dy), in float64, expert by expert."""
    gate_col, up_col = _gate_up_columns()
    out = {name: np.zeros_like(v[ref]) for name, ref in
           [("y", "dy"), ("x", "x"), ("w1", "w1"), ("w2", "w2"), ("prob", "prob")]}  # fmt: skip
    for g, (start, end) in enumerate(zip([0, *ENDS[:-1]], ENDS)):
        x, p, dy = v["x"][start:end], v["prob"][start:end, None], v["dy"][start:end]
        h = x @ v["w1"][g].T
        gate, up = h[:, gate_col], h[:, up_col]
        s = 1.0 / (1.0 + np.exp(-gate))
        act = gate * s * up
        out["y"][start:end] = p * act @ v["w2"][g]
        da = dy @ v["w2"][g].T
        out["prob"][start:end] = np.sum(da * act, axis=1)
        dh = np.zeros_like(h)
        dh[:, gate_col] = p * da * up * s * (1.0 + gate * (1.0 - s))
        dh[:, up_col] = p * da * gate * s
        out["x"][start:end] = dh @ v["w1"][g]
        out["w1"][g] = dh.T @ x
        out["w2"][g] = (p * act).T @ dy
    return out


def _jax_args(v: dict[str, np.ndarray]) -> tuple:
    arrays = [jnp.asarray(v[name], jnp.float32) for name in ("x", "w1", "w2", "prob")]
    return (*arrays, jnp.asarray(ENDS, jnp.int32))


def _grads(function, v: dict[str, np.ndarray]) -> tuple:
    dy = jnp.asarray(v["dy"], jnp.float32)

    def loss(*args):
        return jnp.sum(function(*args) * dy)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*_jax_args(v))


def _assert_close(got, want, name: str, rtol: float) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert error <= rtol, f"{name}: relative error {error:.2e} > {rtol:.0e}"


GRAD_NAMES = ("x", "w1", "w2", "prob")


def test_forward_and_jax_grad_of_the_plain_mlp_match_numpy_float64():
    v = _inputs()
    want = _numpy_mlp(v)
    y = jax.jit(mlp.expert_mlp)(*_jax_args(v))
    _assert_close(y, want["y"], "y", 1e-5)
    assert not np.asarray(y)[-EXTRA_ROWS:].any()  # rows of no expert
    for name, grad in zip(GRAD_NAMES, _grads(mlp.expert_mlp, v)):
        _assert_close(grad, want[name], f"d{name}", 1e-5)


def test_the_custom_vjp_with_the_reference_backward_matches_jax_grad():
    v = _inputs(seed=1)
    args = _jax_args(v)
    with_vjp = mlp.make_mlp(backward_op=mlp.reference_backward)
    y, plain_y = jax.jit(with_vjp)(*args), jax.jit(mlp.expert_mlp)(*args)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(plain_y))
    want = _grads(mlp.expert_mlp, v)
    for name, got, expected in zip(GRAD_NAMES, _grads(with_vjp, v), want):
        _assert_close(got, expected, f"d{name}", 1e-6)


def test_the_backward_op_gets_dy_w2_h_prob_and_the_offsets():
    v = _inputs(seed=2)
    seen = []

    def spy(dy, w2, h, prob, padded_offsets):
        seen.append((dy.shape, w2.shape, h.shape, prob.shape, padded_offsets.shape))
        return mlp.reference_backward(dy, w2, h, prob, padded_offsets)

    _grads(mlp.make_mlp(backward_op=spy), v)
    assert seen == [((M, K), (L, N, K), (M, 2 * N), (M,), (L,))]


def test_jax_grad_of_moe_mlp_calls_dglu_with_dy_w2_and_h(plans_on_cpu):
    """jax.grad of ``moe_mlp`` through the real entry, its custom call run by the CPU
    recorder (which adds 1 to dprob): the call's operands are bf16 dY, W2 and H, and dprob's
    gradient is the call's dprob."""
    m, n, k, l = test_jax_api.M, test_jax_api.N, test_jax_api.K, test_jax_api.L
    rng = np.random.default_rng(3)
    x, w1, w2 = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in
                 [(m, k), (l, 2 * n, k), (l, n, k)])  # fmt: skip
    prob, offsets = jnp.ones((m,), jnp.float32), jnp.asarray([256, 512], jnp.int32)
    loss = jax.jit(jax.grad(lambda *a: jnp.sum(mlp.moe_mlp(*a)), argnums=3))
    dprob = loss(x, w1, w2, prob, offsets)
    np.testing.assert_array_equal(np.asarray(dprob), 1.0)  # zeros + the recorder's 1
    _, call = plans_on_cpu[-1]
    operands = [(b.dims, b.dtype) for b in call.args[:3]]  # A, B, C
    assert operands == [((m, k), "bfloat16"), ((l, n, k), "bfloat16"), ((m, 2 * n), "bfloat16")]
    assert call.attrs["act_func"] == "dswiglu" and call.attrs["dbias"] is False
