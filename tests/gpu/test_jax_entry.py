"""dglu.jax on the GPU: results through jax.jit against the float64 reference, command-buffer
capture with replays on new buffers, and a jax.export round trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
jnp = jax.numpy

import dglu.jax as dglu_jax  # noqa: E402
from dglu.options import ACT_PARAM_DEFAULTS as ACTIVATIONS  # noqa: E402
from checks import check_d, check_dbias, check_dprob  # noqa: E402
from inputs import Shape, initial_dprob, make_inputs  # noqa: E402
from reference import dglu_backward  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPE = Shape(n=64, k=128, expert_rows=(256, 0, 512), extra_rows=256)


def to_jax(t: torch.Tensor):
    """A torch tensor's values as a JAX array on the default device (bf16 bit-exact)."""
    host = t.detach().cpu().contiguous()
    if host.dtype == torch.bfloat16:
        return jnp.asarray(host.view(torch.int16).numpy().view(jnp.bfloat16))
    return jnp.asarray(host.numpy())


def to_torch(x) -> torch.Tensor:
    host = np.asarray(x)
    if host.dtype == jnp.bfloat16:
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16).cuda()
    return torch.from_numpy(host.copy()).cuda()


def weights(x, mode: str) -> dict:
    """The entry's weight arguments: dense (L, N, K), or b_ptrs as uint32 pairs."""
    if mode == "dense":
        return {"b_tensor": to_jax(x.b.permute(2, 0, 1))}
    pairs = x.experts.b_ptrs.cpu().numpy().view(np.uint32).reshape(-1, 2)
    return {"b_ptrs": jnp.asarray(pairs), "n": SHAPE.n, "b_dtype": jnp.bfloat16}


CASES = [
    (mode, act, dbias)
    for mode in ("dense", "discrete_k", "discrete_n")
    for act in ACTIVATIONS
    if mode == "dense" or act != "dsituglu"
    for dbias in (False, True)
]


@pytest.mark.parametrize(("mode", "act_func", "dbias"), CASES)
def test_jitted_results_match_the_reference(mode, act_func, dbias):
    b_major = None if mode == "dense" else mode[-1]
    x = make_inputs(SHAPE, act_func, ACTIVATIONS[act_func], seed=7, discrete_b_major=b_major)
    dprob_before = initial_dprob(SHAPE.m, seed=7)
    extra = {"b_major": b_major} if b_major else {}

    @jax.jit
    def run(a, c, offsets, alpha, beta, prob, dprob, w):
        return dglu_jax.grouped_gemm_dglu_jax_sm90(
            a, c, padded_offsets=offsets, alpha_tensor=alpha, beta_tensor=beta,
            prob_tensor=prob, dprob_tensor=dprob, act_func=act_func,
            generate_dbias=dbias, **w, **extra, **ACTIVATIONS[act_func],
        )  # fmt: skip

    w = weights(x, mode)
    static = {k: w.pop(k) for k in ("n", "b_dtype") if k in w}
    extra.update(static)
    given = to_jax(dprob_before)
    out = run(*map(to_jax, (x.a, x.c, x.padded_offsets, x.alpha, x.beta, x.prob)), given, w)
    expected = dglu_backward(
        x.a, x.b, x.c, SHAPE.ends, x.alpha, x.beta, x.prob, act_func, ACTIVATIONS[act_func]
    )
    context = f"{mode} {act_func} dbias={dbias}"
    d_row = to_torch(out.d_row_tensor)
    check_d(d_row, expected, context)
    check_dprob(to_torch(out.dprob_tensor), dprob_before, expected, SHAPE.n, context)
    np.testing.assert_array_equal(np.asarray(given), dprob_before.cpu().numpy())  # not mutated
    if dbias:
        zero = torch.zeros(SHAPE.l, 2 * SHAPE.n, 1, dtype=torch.bfloat16, device="cuda")
        check_dbias(to_torch(out.dbias_tensor), zero, d_row, SHAPE.ends, context)
    else:
        assert out.dbias_tensor is None


# uneven experts, one empty: several m-tiles per expert and n-tiles per row, so the fast
# path's float atomics would vary the summation order (as in test_deterministic.py)
DETERMINISTIC_SHAPE = Shape(n=512, k=256, expert_rows=(768, 0, 256, 1536), extra_rows=64)
REPEATS = 5


def _bits(x) -> np.ndarray:
    """An array's bytes (tells -0.0 from 0.0 and NaN payloads apart)."""
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


@pytest.mark.parametrize("use_dynamic_sched", [False, True])
def test_deterministic_jitted_calls_repeat_bit_for_bit(use_dynamic_sched):
    shape = DETERMINISTIC_SHAPE
    x = make_inputs(shape, "dswiglu", {}, seed=11)
    dprob = to_jax(initial_dprob(shape.m, seed=11))

    @jax.jit
    def run(a, c, offsets, alpha, beta, prob, dprob, b):
        out = dglu_jax.grouped_gemm_dglu_jax(
            a, c, padded_offsets=offsets, alpha_tensor=alpha, beta_tensor=beta,
            prob_tensor=prob, dprob_tensor=dprob, b_tensor=b, generate_dbias=True,
            use_dynamic_sched=use_dynamic_sched, deterministic=True,
        )  # fmt: skip
        return out.d_row_tensor[: shape.valid_m], out.dprob_tensor, out.dbias_tensor

    args = [to_jax(t) for t in (x.a, x.c, x.padded_offsets, x.alpha, x.beta, x.prob)]
    b = to_jax(x.b.permute(2, 0, 1))
    first, *others = [[_bits(r) for r in run(*args, dprob, b)] for _ in range(REPEATS)]
    for repeat, other in enumerate(others, 1):
        for name, want, got in zip(("d_row", "dprob", "dbias"), first, other):
            assert np.array_equal(want, got), f"{name} of call {repeat} differs from call 0's"


def test_act_out_through_jax_matches_the_torch_wrapper_bit_for_bit():
    """act_out=True through dglu.jax: the act_out variant's prob * GLU(C) (M, N, 1) bf16,
    the bytes the torch wrapper's act_out_tensor holds for the same inputs (valid rows)."""
    import dglu
    from dglu.errors import VariantNotFoundError

    x = make_inputs(SHAPE, "dswiglu", {}, seed=13)
    arguments = dict(
        padded_offsets=x.padded_offsets, alpha_tensor=x.alpha, beta_tensor=x.beta, prob_tensor=x.prob,
        generate_dbias=True,
    )
    try:
        torch_out = dglu.grouped_gemm_dglu(
            x.a, x.c, dprob_tensor=initial_dprob(SHAPE.m, seed=13), b_tensor=x.b, act_out=True, **arguments
        )
    except VariantNotFoundError as exc:
        pytest.skip(f"no act_out variant installed: {exc}")
    out = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=("generate_dbias", "act_out"))(
        to_jax(x.a), to_jax(x.c), b_tensor=to_jax(x.b.permute(2, 0, 1)), act_out=True,
        dprob_tensor=to_jax(initial_dprob(SHAPE.m, seed=13)),
        **{k: to_jax(v) if isinstance(v, torch.Tensor) else v for k, v in arguments.items()},
    )
    assert isinstance(out, dglu_jax.DgluActResults) and out.act_out_tensor.shape == (SHAPE.m, SHAPE.n, 1)
    valid = SHAPE.valid_m
    want = torch_out["act_out_tensor"][:valid].cpu().view(torch.int16).numpy()
    np.testing.assert_array_equal(np.asarray(out.act_out_tensor)[:valid].view(np.int16), want)


_CAPTURED = textwrap.dedent(
    """
    import json
    import dglu, dglu.jax as dj, dglu.jax.launch as seam
    import jax, jax.numpy as jnp, numpy as np, torch
    calls = []
    handle = seam.handle  # wrapped before the first trace registers it
    seam.handle = lambda call: (calls.append(1), handle(call))[1]
    L, N, K, M = 2, 64, 128, 512
    def inputs(seed):
        k = jax.random.split(jax.random.key(seed), 4)
        return dict(
            a_tensor=jax.random.normal(k[0], (M, K), jnp.bfloat16),
            c_tensor=jax.random.normal(k[1], (M, 2 * N), jnp.bfloat16),
            b_tensor=jax.random.normal(k[2], (L, N, K), jnp.bfloat16) * 0.1,
            prob_tensor=jax.random.normal(k[3], (M, 1, 1), jnp.float32),
            padded_offsets=jnp.array([256, 512], jnp.int32),
            alpha_tensor=jnp.ones((L,), jnp.float32), beta_tensor=jnp.ones((L,), jnp.float32))
    def outputs(o):
        return o.d_row_tensor, o.dprob_tensor
    step = jax.jit(lambda kw: outputs(dj.grouped_gemm_dglu_jax(**kw)))
    def host(results):
        return [np.asarray(r, np.float32) for r in results]
    def torch_path(kw):
        t = {k: torch.from_dlpack(v) for k, v in kw.items()}
        out = dglu.grouped_gemm_dglu(
            t["a_tensor"], t["c_tensor"], padded_offsets=t["padded_offsets"],
            alpha_tensor=t["alpha_tensor"], beta_tensor=t["beta_tensor"],
            prob_tensor=t["prob_tensor"], b_tensor=t["b_tensor"].permute(1, 2, 0),
            dprob_tensor=torch.zeros(M, 1, 1, device="cuda"))
        torch.cuda.synchronize()
        return [out["d_row_tensor"].float().cpu().numpy().reshape(M, 2 * N, 1),
                out["dprob_tensor"].cpu().numpy()]
    first = inputs(0)
    reference = host(step(first))
    repeats = [host(step(first)) for _ in range(5)]
    calls_after_same = len(calls)
    fresh = [inputs(s) for s in (1, 2, 3)]
    results = [host(step(x)) for x in fresh]
    want = [torch_path(x) for x in fresh]
    print(json.dumps({
        "calls_after_same": calls_after_same, "calls": len(calls),
        "repeat_equal": all(np.array_equal(a, b) for r in repeats for a, b in zip(reference, r)),
        "fresh_equal_torch": all(
            np.array_equal(g, w) for r, e in zip(results, want) for g, w in zip(r, e)),
        "fresh_differ": not np.array_equal(results[0][0], results[1][0])}))
    """
)


def test_command_buffer_capture_replays_with_new_buffers():
    env = {**os.environ, "XLA_FLAGS": "--xla_gpu_graph_min_graph_size=1"}
    done = subprocess.run(
        [sys.executable, "-c", _CAPTURED], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["repeat_equal"] and report["fresh_equal_torch"] and report["fresh_differ"], report
    # one handler call (the first, uncaptured, run); the replays with its buffers call none
    assert report["calls_after_same"] <= 2, report


def test_export_round_trip():
    x = make_inputs(SHAPE, "dswiglu", {}, seed=3)
    args = [to_jax(t) for t in (x.a, x.c, x.padded_offsets, x.alpha, x.beta, x.prob)]
    b = to_jax(x.b.permute(2, 0, 1))

    def run(a, c, offsets, alpha, beta, prob, b):
        return dglu_jax.grouped_gemm_dglu_jax(
            a, c, padded_offsets=offsets, alpha_tensor=alpha, beta_tensor=beta,
            prob_tensor=prob, b_tensor=b,
        )[0]  # fmt: skip

    # dglu's target carries no compatibility guarantee of XLA's: the caller opts in
    unchecked = [jax.export.DisabledSafetyCheck.custom_call(dglu_jax.TARGET)]
    exported = jax.export.export(jax.jit(run), disabled_checks=unchecked)(*args, b)
    restored = jax.export.deserialize(exported.serialize())
    got, want = restored.call(*args, b), jax.jit(run)(*args, b)
    valid = SHAPE.valid_m
    np.testing.assert_array_equal(
        np.asarray(got[:valid], np.float32), np.asarray(want[:valid], np.float32)
    )
