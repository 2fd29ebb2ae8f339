"""dglu.jax's entry on XLA:CPU: trace-time checks, result shapes, and the custom call's
buffers and attributes as the launch seam sees them (a CPU handler stands in for the GPU
one under the same target name)."""

from __future__ import annotations

import ctypes

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
jnp = jax.numpy

import dglu.jax as dglu_jax  # noqa: E402
from dglu.jax import ffi  # noqa: E402
from dglu.jax.config import config_from_attributes  # noqa: E402
from dglu.jax.launch import problem_of  # noqa: E402

M, N, K, L = 512, 64, 128, 2
S = jax.ShapeDtypeStruct


def _arrays(**changes):
    arrays = {
        "a_tensor": S((M, K, 1), jnp.bfloat16),
        "c_tensor": S((M, 2 * N, 1), jnp.bfloat16),
        "padded_offsets": S((L,), jnp.int32),
        "alpha_tensor": S((L,), jnp.float32),
        "beta_tensor": S((L,), jnp.float32),
        "prob_tensor": S((M, 1, 1), jnp.float32),
        "b_tensor": S((L, N, K), jnp.bfloat16),
    }
    arrays.update(changes)
    return {name: value for name, value in arrays.items() if value is not None}


def _shapes(arrays, **options):
    return jax.eval_shape(lambda kw: dglu_jax.grouped_gemm_dglu_jax(**kw, **options), arrays)


def test_results_have_the_seed_shapes():
    out = _shapes(_arrays(), generate_dbias=True, d_dtype=jnp.float32)
    assert out.d_row_tensor.shape == (M, 2 * N, 1) and out.d_row_tensor.dtype == jnp.float32
    assert (out.dprob_tensor.shape, out.dprob_tensor.dtype) == ((M, 1, 1), jnp.float32)
    assert (out.dbias_tensor.shape, out.dbias_tensor.dtype) == ((L, 2 * N, 1), jnp.bfloat16)
    assert out.d_col_tensor is None and out.amax_tensor is None
    assert _shapes(_arrays()).dbias_tensor is None


def test_discrete_weights_take_b_ptrs_as_uint32_pairs():
    arrays = _arrays(b_tensor=None, b_ptrs=S((L, 2), jnp.uint32))
    out = _shapes(arrays, n=N, b_dtype=jnp.bfloat16, b_major="n")
    assert out.d_row_tensor.shape == (M, 2 * N, 1)


@pytest.mark.parametrize(
    ("changes", "options", "error", "message"),
    [
        ({"a_tensor": S((M, K + 8, 1), jnp.bfloat16)}, {}, ValueError,
         r"b_tensor: shape \(64, 128, 2\) does not match \(N, K, L\) = \(64, 136, 2\)"),
        ({"c_tensor": S((M, N, 1), jnp.bfloat16)}, {}, ValueError,
         r"c_tensor: shape \(512, 64, 1\) does not match \(M, 2N, 1\)"),
        ({"alpha_tensor": S((L,), jnp.bfloat16)}, {}, ValueError,
         "alpha_tensor: dtype bfloat16 is not accepted; expected one of float32"),
        ({"b_tensor": S((N, K), jnp.bfloat16)}, {}, ValueError,
         r"b_tensor: expected a row-major \(L, N, K\) array, got rank 2"),
        ({"b_tensor": S((L, N, K), jnp.float16)}, {}, ValueError,
         "b_tensor: dtype torch.float16 differs from a_tensor's torch.bfloat16"),
        ({"b_tensor": S((L, 48, K), jnp.bfloat16), "c_tensor": S((M, 96, 1), jnp.bfloat16)},
         {}, ValueError, "b_tensor: N = 48 must be a positive multiple of 32"),
        ({}, {"act_func": "relu"}, ValueError, "act_func: expected one of"),
        ({}, {"b_major": "n"}, ValueError, "b_major: 'n' applies to discrete weights"),
        ({}, {"geglu_alpha": 1.0}, ValueError, "geglu_alpha: act_func='dswiglu' does not use"),
        ({}, {"d_dtype": jnp.int8}, ValueError, "d_dtype: expected torch.bfloat16"),
        ({}, {"sfa_tensor": 1}, NotImplementedError, "sfa_tensor: block-scaled"),
        ({"b_ptrs": S((L,), jnp.int32)}, {}, ValueError,
         "b_tensor and b_ptrs: dense and discrete weights exclude each other"),
        ({"b_tensor": None, "b_ptrs": S((L,), jnp.int32)}, {"n": N, "b_dtype": jnp.bfloat16},
         ValueError, "b_ptrs: dtype int32 is not accepted"),
        ({"b_tensor": None, "b_ptrs": S((L, 2), jnp.uint32)}, {"n": N}, ValueError,
         "b_dtype: required with b_ptrs, n"),
        ({"b_tensor": None, "b_ptrs": S((L, 2), jnp.uint32)},
         {"n": N, "b_dtype": jnp.float16}, ValueError, "b_dtype: expected jnp.bfloat16"),
    ],
)  # fmt: skip
def test_bad_calls_fail_at_trace_time(changes, options, error, message):
    with pytest.raises(error, match=message):
        _shapes(_arrays(**changes), **options)


def _host(buffer: ffi.Buffer, element) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(buffer.data, ctypes.POINTER(element)), buffer.dims)


@pytest.fixture(scope="module")
def seen_on_cpu():
    """Stand-in CPU handler under the entry's target: records what the seam would build
    and adds 1 to dprob (so that the accumulator's aliasing shows)."""
    seen: list = []

    def handle(call: ffi.DecodedCall) -> None:
        config = config_from_attributes(call.attrs)
        seen.append((config, problem_of(call, config, device=0), call))
        _host(call.rets[1], ctypes.c_float)[...] += 1.0

    ffi.register(dglu_jax.TARGET, ffi.Handler(handle), "cpu")
    return seen


def _concrete(dtype_of_b="dense"):
    a = jnp.zeros((M, K, 1), jnp.bfloat16)
    c = jnp.zeros((M, 2 * N, 1), jnp.bfloat16)
    vectors = {
        "padded_offsets": jnp.array([256, 512], jnp.int32),
        "alpha_tensor": jnp.ones((L,), jnp.float32),
        "beta_tensor": jnp.ones((L,), jnp.float32),
        "prob_tensor": jnp.ones((M, 1, 1), jnp.float32),
    }
    return a, c, vectors


def test_given_dprob_is_accumulated_into_a_new_array(seen_on_cpu):
    a, c, vectors = _concrete()
    dprob = jnp.full((M, 1, 1), 2.0, jnp.float32)
    run = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=("act_func", "generate_dbias"))
    out = run(a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), dprob_tensor=dprob,
              act_func="dgeglu", generate_dbias=True, **vectors)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(out.dprob_tensor), 3.0)
    np.testing.assert_array_equal(np.asarray(dprob), 2.0)  # the caller's is untouched
    fresh = dglu_jax.grouped_gemm_dglu_jax(
        a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), **vectors
    )
    np.testing.assert_array_equal(np.asarray(fresh.dprob_tensor), 1.0)  # zeros + 1


def test_the_seam_sees_seed_layout_views_and_the_configuration(seen_on_cpu):
    a, c, vectors = _concrete()
    seen_on_cpu.clear()
    dglu_jax.grouped_gemm_dglu_jax(
        a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), act_func="dgeglu",
        glu_clamp_max=10.0, glu_clamp_min=-10.0, generate_dbias=True, use_dynamic_sched=True,
        mma_tiler_mn=(128, 64), **vectors,
    )  # fmt: skip
    config, problem, call = seen_on_cpu[-1]
    assert config.options.act_func == "dgeglu" and config.options.tile == (128, 64)
    assert dict(config.options.act_params)["glu_clamp_max"] == 10.0
    assert config.options.scheduler == "dynamic" and config.dbias
    assert (problem.m, problem.n, problem.k, problem.l) == (M, N, K, L)
    views = problem.tensors
    assert views["b"].shape == (N, K, L) and views["b"].strides == (K, 1, N * K)
    assert views["b"].pointer == call.args[1].data
    assert views["c"].shape == (M, 2 * N, 1) and views["d_row"].dtype == "bf16"
    assert views["dprob"].pointer == call.rets[1].data
    assert views["dbias"].shape == (L, 2 * N, 1)
    # hidden workspaces after the results: dbias_ws (fp32 L*2N), tile_counter (4 i32)
    assert [(r.dtype, r.dims) for r in call.rets[3:]] == [
        ("float32", (L * 2 * N,)),
        ("int32", (4,)),
    ]


def test_discrete_views_come_from_b_ptrs(seen_on_cpu):
    a, c, vectors = _concrete()
    seen_on_cpu.clear()
    b_ptrs = jnp.zeros((L, 2), jnp.uint32)
    dglu_jax.grouped_gemm_dglu_jax(
        a, c, b_ptrs=b_ptrs, n=N, b_dtype=jnp.bfloat16, b_major="n", **vectors
    )
    config, problem, call = seen_on_cpu[-1]
    assert config.weight_mode == "discrete" and config.n == N
    assert problem.tensors["b_ptrs"].shape == (L,) and problem.tensors["b_ptrs"].dtype == "i64"
    expert = problem.tensors["b_expert"]
    assert expert.shape == (N, K, 1) and expert.strides == (1, N, N * K)
    assert [(r.dtype, r.dims) for r in call.rets[2:]] == [("int64", (16 * L,))]  # b_desc_ws


def test_importing_dglu_imports_no_jax():
    import subprocess
    import sys

    code = "import sys, dglu; print('jax' in sys.modules or 'dglu.jax' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )  # fmt: skip
    assert done.stdout.strip() == "False"


def test_export_round_trip_keeps_the_custom_call(seen_on_cpu):
    pytest.importorskip("flatbuffers", reason="jax.export serialisation needs flatbuffers")
    a, c, vectors = _concrete()
    b = jnp.zeros((L, N, K), jnp.bfloat16)

    def run(a, c, b):
        return dglu_jax.grouped_gemm_dglu_jax(a, c, b_tensor=b, **vectors).dprob_tensor

    unchecked = [jax.export.DisabledSafetyCheck.custom_call(dglu_jax.TARGET)]
    exported = jax.export.export(jax.jit(run), disabled_checks=unchecked)(a, c, b)
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(a, c, b)), 1.0)  # zeros + 1
