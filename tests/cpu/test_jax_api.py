"""dglu.jax's entry on XLA:CPU against hand-written v2 artifacts: trace-time checks (the
torch path's messages), result shapes and hidden workspaces from the variant, and the
handler's plan (dglu.jax.launch.plan_of) built from XLA's real buffers by a CPU handler
under the entry's target, with the CUDA driver stood in (stand_ins)."""

from __future__ import annotations

import ctypes

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
jnp = jax.numpy

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts, write_manifest  # noqa: E402

import dglu.jax as dglu_jax  # noqa: E402
from dglu import call  # noqa: E402
from dglu.jax import ffi, launch  # noqa: E402
from dglu.contract.keys import variant_name  # noqa: E402
from dglu.errors import VariantNotFoundError  # noqa: E402
from dglu.manifest import SearchEntry, read_manifest  # noqa: E402

M, N, K, L = 512, 64, 128, 2
S = jax.ShapeDtypeStruct
KEYS = [
    variant_key(dbias=True),
    variant_key(dbias=False),
    variant_key(dbias=True, scheduler="dynamic"),
    variant_key(dbias=False, weight_mode="discrete", b_major="n"),
    variant_key(dbias=True, act_out=True),
    variant_key(dbias=True, deterministic=True),
]
# The act_out variant's output: prob * GLU(C), (M, N, 1) bf16.
ACT_OUT = {"shape": ["m", "n", 1], "strides": ["n", 1, "m*n"], "dtypes": ["bf16"], "align": 16, "io": "out",
           "rank_drop": True}
# The deterministic variant's own workspace (its dprob partial sums: one row per n-tile).
DPROB_PARTS = {"dtype": "fp32", "count": "m", "align": 16, "zero": "never"}


def _write_installed(directory):
    """KEYS' artifacts; the deterministic ones under their real (``_det``) names, with
    their partial-sum workspace."""
    manifest = write_artifacts(directory, KEYS)
    for entry in manifest["variants"]:
        if entry["key"].get("deterministic"):
            entry["name"] = variant_name(entry["key"])
            entry["workspaces"]["dprob_parts"] = dict(DPROB_PARTS)
        if entry["key"].get("act_out"):
            entry["name"] = variant_name(entry["key"])
            entry["arguments"]["act_out"] = dict(ACT_OUT)
    write_manifest(directory, manifest)


@pytest.fixture
def driver(tmp_path, monkeypatch):
    """The variants of KEYS installed for both paths; the driver and the H200 stood in."""
    _write_installed(tmp_path)
    variants = read_manifest(tmp_path).variants
    fake = stand_ins.install(monkeypatch, variants, tmp_path)
    monkeypatch.setattr(call, "installed_variants", lambda arch=None: stand_ins.of_arch(variants, arch))
    monkeypatch.setattr(call, "search_path", lambda: [SearchEntry(tmp_path, "test", True)])
    launch.clear_plans()
    return fake


def _arrays(**changes):
    arrays = {
        "a_tensor": S((M, K, 1), jnp.bfloat16),
        "c_tensor": S((M, 2 * N, 1), jnp.bfloat16),
        "padded_offsets": S((L,), jnp.int32),
        "alpha_tensor": S((L,), jnp.float32),
        "beta_tensor": S((L,), jnp.float32),
        "prob_tensor": S((M, 1, 1), jnp.float32),
        "dprob_tensor": S((M, 1, 1), jnp.float32),
        "b_tensor": S((L, N, K), jnp.bfloat16),
    }
    arrays.update(changes)
    return {name: value for name, value in arrays.items() if value is not None}


def _shapes(arrays, **options):
    return jax.eval_shape(lambda kw: dglu_jax.grouped_gemm_dglu_jax(**kw, **options), arrays)


def test_results_have_the_variants_shapes(driver):
    out = _shapes(_arrays(), generate_dbias=True)
    assert (out.d_row_tensor.shape, out.d_row_tensor.dtype) == ((M, 2 * N, 1), jnp.bfloat16)
    assert (out.dprob_tensor.shape, out.dprob_tensor.dtype) == ((M, 1, 1), jnp.float32)
    assert (out.dbias_tensor.shape, out.dbias_tensor.dtype) == ((L, 2 * N, 1), jnp.bfloat16)
    assert out.d_col_tensor is None and out.amax_tensor is None
    assert _shapes(_arrays(dprob_tensor=None)).dbias_tensor is None


def test_discrete_weights_take_b_ptrs_as_uint32_pairs(driver):
    arrays = _arrays(b_tensor=None, b_ptrs=S((L, 2), jnp.uint32))
    out = _shapes(arrays, n=N, b_dtype=jnp.bfloat16, b_major="n")
    assert out.d_row_tensor.shape == (M, 2 * N, 1)


BAD_CALLS = [
    ({"a_tensor": S((M, K + 8, 1), jnp.bfloat16)}, {}),
    ({"c_tensor": S((M, N, 1), jnp.bfloat16)}, {}),
    ({"c_tensor": S((M, 2 * N, 1), jnp.int32)}, {}),
    ({"alpha_tensor": S((L,), jnp.bfloat16)}, {}),
    ({"prob_tensor": S((M, 1, 1), jnp.int8)}, {}),
    ({"b_tensor": S((L, 48, K), jnp.bfloat16), "c_tensor": S((M, 96, 1), jnp.bfloat16)}, {}),
    ({"a_tensor": S((M, K, 1), jnp.float16)}, {}),
    ({}, {"act_func": "relu"}),
    ({}, {"b_major": "n"}),
    ({}, {"geglu_alpha": 1.0}),
    ({}, {"m_aligned": 128}),
    ({}, {"mma_tiler_mn": (64, 64)}),
    ({"b_ptrs": S((L,), jnp.int64)}, {}),
    ({"b_tensor": None, "b_ptrs": S((L, 2), jnp.uint32)}, {"n": N}),
    ({"b_tensor": None, "b_ptrs": S((L, 2), jnp.uint32)}, {"n": 0, "b_dtype": jnp.bfloat16}),
]  # fmt: skip


def _torch_error(changes, options):
    """The torch wrapper's error for the same call (CPU tensors, the driver stood in)."""
    import torch

    import dglu

    def tensor(spec):
        if spec.dtype == jnp.uint32 and spec.shape[-1:] == (2,):
            return torch.zeros(spec.shape[:-1], dtype=torch.int64)  # b_ptrs' int64 view
        dtype = getattr(torch, np.dtype(spec.dtype).name)
        if spec.shape == (L, N, K) or spec.shape == (L, 48, K):  # row-major (L, N, K) B
            return torch.zeros(spec.shape, dtype=dtype).permute(1, 2, 0)
        return torch.zeros(spec.shape, dtype=dtype)

    kwargs = {name: tensor(spec) for name, spec in _arrays(**changes).items()}
    torch_options = {
        name: (getattr(torch, np.dtype(value).name) if name == "b_dtype" else value)
        for name, value in options.items()
    }
    try:
        dglu.grouped_gemm_dglu(**kwargs, **torch_options)
    except (ValueError, NotImplementedError, LookupError) as error:
        return type(error), str(error)
    raise AssertionError("the torch path accepted the call")


@pytest.mark.parametrize(("changes", "options"), BAD_CALLS)
def test_bad_calls_fail_at_trace_time_as_in_the_torch_path(driver, changes, options, monkeypatch):
    """Traced as for an H200 (sm_90a): the messages are the torch path's, but for the
    source of the architecture."""
    pytest.importorskip("torch", reason="comparing with the torch path needs torch")
    monkeypatch.setattr(dglu_jax, "default_device_arch", lambda: "sm_90a")
    kind, message = _torch_error(changes, options)
    with pytest.raises(kind) as raised:
        _shapes(_arrays(**changes), **options)
    assert str(raised.value) == message.replace("the tensors' device", dglu_jax.TRACE_ARCH_SOURCE)


def test_tracing_without_a_gpu_selects_for_any_architecture(driver):
    with pytest.raises(VariantNotFoundError) as raised:
        _shapes(_arrays(), d_dtype=jnp.float32)  # a D dtype no installed variant has
    request = str(raised.value).splitlines()[1]
    assert "arch=" not in request and "(any arch, tile_m, tile_n, cluster_m, cluster_n)" in request


def test_block_scaled_arguments_of_a_bf16_call_are_refused_by_its_familys_policy(driver):
    sfa = S((1, M // 128, 1, 32, 4, 4), jnp.float8_e8m0fnu)
    with pytest.raises(NotImplementedError, match="^sfa_tensor: got a JAX array; block-scaled .* pass None"):
        _shapes(_arrays(sfa_tensor=sfa))


def test_b_tensor_must_be_rank_3_row_major(driver):
    with pytest.raises(ValueError, match=r"b_tensor: expected a row-major \(L, N, K\) array"):
        _shapes(_arrays(b_tensor=S((N, K), jnp.bfloat16)))


def _host(buffer: ffi.Buffer, element) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(buffer.data, ctypes.POINTER(element)), buffer.dims)


@pytest.fixture
def plans_on_cpu(driver):
    """A CPU handler under the entry's target: records the handler's plan for XLA's
    buffers (device 0, the stand-in stream) and adds 1 to dprob (so aliasing shows)."""
    pytest.importorskip("cuda.bindings", reason="the launch plan packs cuda-python types")
    seen: list = []

    def handle(call: ffi.DecodedCall) -> None:
        plan = launch.plan_of(call.args, call.rets, call.attrs, 0, stand_ins.STREAM)
        seen.append((plan, call))
        results = call.attrs["results"].split(",")
        _host(call.rets[results.index("dprob")], ctypes.c_float)[...] += 1.0

    if ffi.registered(dglu_jax.TARGET, "cpu") is None:
        ffi.register(dglu_jax.TARGET, ffi.Handler(handle), "cpu")
    else:  # XLA keeps the first handler: route it to this test's recorder
        ffi.registered(dglu_jax.TARGET, "cpu").function = handle
    return seen


def _concrete():
    vectors = {
        "padded_offsets": jnp.array([256, 512], jnp.int32),
        "alpha_tensor": jnp.ones((L,), jnp.float32),
        "beta_tensor": jnp.ones((L,), jnp.float32),
        "prob_tensor": jnp.ones((M, 1, 1), jnp.float32),
    }
    return jnp.zeros((M, K, 1), jnp.bfloat16), jnp.zeros((M, 2 * N, 1), jnp.bfloat16), vectors


def test_given_dprob_is_accumulated_into_a_new_array(plans_on_cpu):
    a, c, vectors = _concrete()
    b = jnp.zeros((L, N, K), jnp.bfloat16)
    dprob = jnp.full((M, 1, 1), 2.0, jnp.float32)
    run = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=("generate_dbias",))
    out = run(a, c, b_tensor=b, dprob_tensor=dprob, generate_dbias=True, **vectors)
    np.testing.assert_array_equal(np.asarray(out.dprob_tensor), 3.0)
    np.testing.assert_array_equal(np.asarray(dprob), 2.0)  # the caller's is untouched
    fresh = dglu_jax.grouped_gemm_dglu_jax(a, c, b_tensor=b, **vectors)
    np.testing.assert_array_equal(np.asarray(fresh.dprob_tensor), 1.0)  # zeros + 1


def test_the_plan_launches_on_xlas_buffers_and_zeroes_dbias_and_counters(plans_on_cpu):
    a, c, vectors = _concrete()
    dglu_jax.grouped_gemm_dglu_jax(
        a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), generate_dbias=True,
        use_dynamic_sched=True, **vectors,
    )  # fmt: skip
    plan, call = plans_on_cpu[-1]
    assert call.attrs["results"] == "d_row,dprob,dbias"
    assert call.attrs["workspaces"] == "dbias_ws,tile_counter"
    rets = dict(zip(["d_row", "dprob", "dbias", "dbias_ws", "tile_counter"], call.rets))
    # workspaces: the count plus room to align the start (fp32 L*2N + 16 B, i32 4 + 16 B)
    assert rets["dbias_ws"].dims == (L * 2 * N + 4,) and rets["tile_counter"].dims == (8,)
    aligned = {name: -(-rets[name].data // 16) * 16 for name in ("dbias_ws", "tile_counter")}
    assert set(plan.clears) == {
        (rets["dbias"].data, L * 2 * N * 2),
        (aligned["dbias_ws"], L * 2 * N * 4),
        (aligned["tile_counter"], 16),
    }
    assert plan.launches and all(p.stream == stand_ins.STREAM for p in plan.launches)


def test_discrete_plan_encodes_the_expert_template_from_b_ptrs(plans_on_cpu):
    a, c, vectors = _concrete()
    dglu_jax.grouped_gemm_dglu_jax(
        a, c, b_ptrs=jnp.zeros((L, 2), jnp.uint32), n=N, b_dtype=jnp.bfloat16, b_major="n",
        **vectors,
    )  # fmt: skip
    plan, call = plans_on_cpu[-1]
    assert call.attrs["workspaces"] == "b_desc_ws" and call.rets[2].dims == (16 * L + 16,)
    assert plan.clears == ()  # b_desc_ws is zero: never, no dbias
    assert len(plan.launches) == 2  # b_descriptors, then the main kernel


def test_a_bad_buffer_at_run_time_is_an_error_of_the_execution(plans_on_cpu, monkeypatch):
    a, c, vectors = _concrete()
    monkeypatch.setattr(dglu_jax, "call_layout", _short_workspaces(dglu_jax.call_layout))
    with pytest.raises(Exception, match="workspace dbias_ws: variant .* needs 256 fp32"):
        dglu_jax.grouped_gemm_dglu_jax(
            a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), use_dynamic_sched=True,
            generate_dbias=True, **vectors,
        ).dprob_tensor.block_until_ready()


def _short_workspaces(layout_of):
    def short(*args):
        layout = layout_of(*args)
        return layout._replace(workspaces=tuple((n, 1, t) for n, _, t in layout.workspaces))

    return short


def test_importing_dglu_imports_no_jax():
    import subprocess
    import sys

    code = "import sys, dglu; print('jax' in sys.modules or 'dglu.jax' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )  # fmt: skip
    assert done.stdout.strip() == "False"


def test_export_round_trip_keeps_the_custom_call(plans_on_cpu):
    pytest.importorskip("flatbuffers", reason="jax.export serialisation needs flatbuffers")
    a, c, vectors = _concrete()
    b = jnp.zeros((L, N, K), jnp.bfloat16)

    def run(a, c, b):
        return dglu_jax.grouped_gemm_dglu_jax(a, c, b_tensor=b, **vectors).dprob_tensor

    unchecked = [jax.export.DisabledSafetyCheck.custom_call(dglu_jax.TARGET)]
    exported = jax.export.export(jax.jit(run), disabled_checks=unchecked)(a, c, b)
    restored = jax.export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(a, c, b)), 1.0)  # zeros + 1


@pytest.mark.parametrize("deterministic", [False, True])
def test_deterministic_reaches_the_handler_and_selects_the_det_variant(
    plans_on_cpu, monkeypatch, deterministic
):
    loaded: list[str] = []
    load = launch.load_variant
    monkeypatch.setattr(launch, "load_variant", lambda v, d: (loaded.append(v.name), load(v, d))[1])
    a, c, vectors = _concrete()
    static = ("generate_dbias", "deterministic")
    run = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=static)
    run(
        a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), generate_dbias=True,
        deterministic=deterministic, **vectors,
    ).dprob_tensor.block_until_ready()  # fmt: skip
    _, call = plans_on_cpu[-1]
    assert call.attrs["deterministic"] is deterministic
    assert ("dprob_parts" in call.attrs["workspaces"].split(",")) == deterministic
    assert len(loaded) == 1 and loaded[0].endswith("_det") == deterministic
    assert (loaded[0] == variant_name(KEYS[-1])) == deterministic


def test_act_out_returns_the_activation(driver):
    out = _shapes(_arrays(), generate_dbias=True, act_out=True)
    assert isinstance(out, dglu_jax.DgluActResults)
    assert (out.act_out_tensor.shape, out.act_out_tensor.dtype) == ((M, N, 1), jnp.bfloat16)
    assert not hasattr(_shapes(_arrays(), generate_dbias=True), "act_out_tensor")


def test_act_out_reaches_the_handler(plans_on_cpu):
    a, c, vectors = _concrete()
    run = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=("generate_dbias", "act_out"))
    out = run(a, c, b_tensor=jnp.zeros((L, N, K), jnp.bfloat16), generate_dbias=True, act_out=True, **vectors)
    out.dprob_tensor.block_until_ready()
    _, call = plans_on_cpu[-1]
    assert call.attrs["act_out"] is True and "act_out" in call.attrs["results"].split(",")


def test_round_dgrad_is_refused_where_the_variant_has_no_such_flag(driver):
    with pytest.raises(ValueError, match="round_dgrad_to_input_dtype: True, but the selected variant"):
        _shapes(_arrays(), round_dgrad_to_input_dtype=True)
    with pytest.raises(ValueError, match="sf_fp8_dtype_override: got 'e5m3'; .*Rubin"):
        _shapes(_arrays(), sf_fp8_dtype_override="e5m3")


def test_deterministic_must_be_a_bool(driver):
    with pytest.raises(ValueError, match="deterministic: expected a bool, got 1"):
        _shapes(_arrays(), deterministic=1)
