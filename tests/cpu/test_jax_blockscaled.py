"""dglu.jax's block-scaled (MXFP8) calls on XLA:CPU, against sm90_mxfp8 manifest entries
written from the family's own declaration (test_blockscaled_refusals' manifest): JAX's
forms of the arguments (scale factors as the seed's permuted storage, B row-major, b_ptrs
as uint32 pairs), the results' shapes and dtypes in the seed's order, every refusal with
the torch wrapper's message for the same call and nothing enqueued, every option row of
the argument table checked by the wrapper's code, and the handler's plan built from XLA's
real buffers by a CPU handler under the entry's target (the driver stood in)."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch", reason="the torch wrapper's calls are the reference")
jnp = jax.numpy

import stand_ins  # noqa: E402
from test_jax_api import plans_on_cpu  # noqa: E402,F401 (a fixture)
import test_blockscaled_refusals as mx  # noqa: E402
from test_blockscaled_refusals import FP4, K, L, M, N  # noqa: E402

import dglu.jax as dglu_jax  # noqa: E402
from dglu import api, bound  # noqa: E402
from dglu.arguments import ARGUMENTS, NOT_OFFERED, WRAPPER  # noqa: E402
from dglu.errors import VariantNotFoundError  # noqa: E402
from dglu.jax import arrays, launch  # noqa: E402
from dglu.jax.config import decode_attributes  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402

S = jax.ShapeDtypeStruct
ARCH = "sm_90a"
TORCH_TO_JAX = {
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e5m2: jnp.float8_e5m2,
    torch.float8_e8m0fnu: jnp.float8_e8m0fnu,
    torch.bfloat16: jnp.bfloat16,
    torch.float32: jnp.float32,
    torch.int32: jnp.int32,
    torch.uint8: jnp.uint8,
    FP4: jnp.uint8,  # FP4 pairs: uint8 in JAX
}
SCALE_FACTORS = ("sfa_tensor", "sfb_tensor")


@pytest.fixture
def driver(tmp_path, monkeypatch):
    """The BF16 defaults and the sm90_mxfp8 variants installed; the driver and an H200
    stood in; JAX traces for the H200 (sm_90a)."""
    mx.write_variants(tmp_path, with_blockscaled=True)
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    monkeypatch.setattr(dglu_jax, "default_device_arch", lambda: ARCH)
    launch.clear_plans()
    return fake


def spec_of(name: str, value, b_major: str = "k"):
    """The JAX form of a torch wrapper argument (module docstring), as a ShapeDtypeStruct;
    options pass through (torch dtypes as JAX's)."""
    if not isinstance(value, torch.Tensor):
        return TORCH_TO_JAX.get(value, value) if isinstance(value, torch.dtype) else value
    if name in ("b_ptrs", "sfb_ptrs"):
        return S((value.shape[0], 2), jnp.uint32)
    dtype = TORCH_TO_JAX[value.dtype]
    if name == "b_tensor":  # (N, K, L) -> row-major (L, N, K), or (L, K, N) N-major
        order = (2, 1, 0) if b_major == "n" else (2, 0, 1)
        return S(tuple(value.permute(order).shape), dtype)
    if value.dim() == 6:  # the seed's scale-factor view -> its storage
        return S(tuple(value.permute(arrays.SEED_TO_SF_STORAGE).shape), dtype)
    return S(tuple(value.shape), dtype)


def jax_call(torch_call: dict) -> dict:
    b_major = torch_call.get("b_major", "k")
    return {name: spec_of(name, value, b_major) for name, value in torch_call.items()}


def traced(call: dict):
    """The entry's results for ``call`` (JAX forms), traced only."""
    tensors = {k: v for k, v in call.items() if isinstance(v, S)}
    options = {k: v for k, v in call.items() if not isinstance(v, S)}
    return jax.eval_shape(lambda kw: dglu_jax.grouped_gemm_dglu_jax(**kw, **options), tensors)


def storage_shape(rows: int, cols: int, l: int = 1) -> tuple[int, ...]:
    return (l, -(-rows // 128), -(-cols // 128), 32, 4, 4)


@pytest.mark.parametrize("weights", ["dense", "discrete"])
def test_results_are_the_seeds_outputs_in_its_order(driver, weights):
    call = mx.wrapper_call() if weights == "dense" else mx.discrete_wrapper_call()
    out = traced(jax_call(call))
    assert type(out) is dglu_jax.DgluResults
    e4m3, e8m0 = jnp.float8_e4m3fn, jnp.float8_e8m0fnu
    assert [(x.shape, x.dtype) if x is not None else None for x in out] == [
        ((M, 2 * N, 1), e4m3),  # d_row
        ((M, 2 * N, 1), e4m3),  # d_col
        ((M, 1, 1), jnp.float32),  # dprob
        ((L, 2 * N, 1), jnp.bfloat16),  # dbias
        None,  # amax: Hopper's MXFP8 has none
        (storage_shape(M, 2 * N), e8m0),  # sfd_row, as the seed's storage
        (storage_shape(2 * N, M), e8m0),  # sfd_col
    ]


def test_the_results_named_tuple_is_the_front_policies_output_order():
    from dglu_build.kernels.front import SEED_OUTPUTS

    assert dglu_jax.DgluResults._fields == tuple(f"{role}_tensor" for role in SEED_OUTPUTS)
    assert dglu_jax.DgluActResults._fields == (*dglu_jax.DgluResults._fields, "act_out_tensor")


def test_n_major_dense_b_is_a_row_major_l_k_n_array(driver):
    """b_major="n" reads dense B as a row-major (L, K, N) array and selects the N-major
    variant (none is installed here: the refusal names the request)."""
    call = jax_call(mx.wrapper_call())
    call["b_tensor"] = S((L, K, N), jnp.float8_e4m3fn)
    with pytest.raises(VariantNotFoundError, match=r"weight_mode=dense .* b_major=n \(from b_major\)"):
        traced({**call, "b_major": "n"})
    spec = arrays.array_spec("b", (L, K, N), jnp.float8_e4m3fn, b_major="n")
    assert (spec.shape, spec.stride()) == ((N, K, L), (1, N, N * K))
    dense = mx.dense_b()  # the torch path's K-major (N, K, L) view of row-major (L, N, K)
    spec = arrays.array_spec("b", (L, N, K), jnp.float8_e4m3fn)
    assert (spec.shape, spec.stride()) == (tuple(dense.shape), dense.stride())


def _torch_error(call: dict) -> tuple[type, str]:
    try:
        api.grouped_gemm_dglu(**call)
    except (ValueError, TypeError, NotImplementedError, LookupError) as error:
        return type(error), str(error)
    raise AssertionError("the torch wrapper accepted the call")


# The refusals of test_blockscaled_refusals that a JAX call can express (JAX arrays have no
# strides: the scale factors' strides are their storage's, and execute()/the class API are
# torch-only), the uint8 FP4 case by its float4_e2m1fn_x2 twin (uint8 is FP4 in JAX).
PARITY = sorted(
    name
    for name, refusal in {**mx.BEFORE_SELECTION, **mx.WITH_VARIANT}.items()
    if refusal.call in ("wrapper", "discrete wrapper") and "contiguous" not in name and "uint8" not in name
)


def _refused_call(case: str) -> dict:
    refusal = {**mx.BEFORE_SELECTION, **mx.WITH_VARIANT}[case]
    base = mx.wrapper_call() if refusal.call == "wrapper" else mx.discrete_wrapper_call()
    return {**base, **refusal.changes()}


@pytest.mark.parametrize("case", PARITY)
def test_refusals_are_the_torch_wrappers_before_anything_is_enqueued(driver, monkeypatch, case):
    call = _refused_call(case)
    kind, message = _torch_error(call)
    allocations, enqueued = driver.allocations(), len(driver.enqueued())
    monkeypatch.setattr(bound, "run_variant", lambda *a, **k: pytest.fail("launched"))
    with pytest.raises(kind) as raised:
        traced(jax_call(call))
    expected = message.replace("the tensors' device", dglu_jax.TRACE_ARCH_SOURCE).replace("a Tensor", "a JAX array")
    assert str(raised.value) == expected
    assert driver.allocations() == allocations and len(driver.enqueued()) == enqueued


def test_uint8_operands_are_fp4_pairs_refused_on_hopper(driver):
    call = jax_call(mx.wrapper_call())
    call["a_tensor"], call["b_tensor"] = S((M, K // 2, 1), jnp.uint8), S((L, N, K // 2), jnp.uint8)
    with pytest.raises(ValueError, match="^a_tensor: got torch.float4_e2m1fn_x2; no FP4 tensor cores on Hopper"):
        traced(call)


def test_unpacked_fp4_is_refused_saying_how_to_pack_it(driver):
    call = jax_call(mx.wrapper_call())
    call["a_tensor"] = S((M, K, 1), jnp.float4_e2m1fn)
    with pytest.raises(ValueError, match="^a_tensor: got float4_e2m1fn .* uint8 arrays of packed pairs"):
        traced(call)


def test_the_packing_the_refusal_names_puts_element_2j_in_the_low_nibble():
    """jax.lax.bitcast_convert_type of (..., 2) float4_e2m1fn to uint8 packs as the
    kernels' (and torch's float4_e2m1fn_x2) pairs read: element 2j low, 2j + 1 high."""
    values = torch.tensor([[0.5, -6.0, 1.5, 3.0], [0.0, -0.5, 4.0, 2.0]])
    unpacked = jnp.asarray(values.numpy(), jnp.float4_e2m1fn).reshape(2, 2, 2)
    packed = np.asarray(jax.lax.bitcast_convert_type(unpacked, jnp.uint8))
    decoded = mx.bs.e2m1_decode(torch.from_numpy(packed.copy()))
    assert torch.equal(decoded, values.double())


@pytest.mark.parametrize("name", SCALE_FACTORS)
def test_scale_factors_in_the_seeds_view_shape_are_refused_with_the_storage_order(driver, name):
    call = jax_call(mx.wrapper_call())
    storage = call[name].shape
    call[name] = S(tuple(storage[axis] for axis in arrays.SF_STORAGE_TO_SEED), jnp.float8_e8m0fnu)
    with pytest.raises(ValueError, match=rf"^{name}: expected the seed's scale-factor storage.*\(5, 2, 4, 0, 1, 3\)"):
        traced(call)


def test_uint8_scale_factors_are_refused_by_the_familys_scale_dtype(driver):
    call = jax_call(mx.wrapper_call())
    call["sfa_tensor"] = S(call["sfa_tensor"].shape, jnp.uint8)
    with pytest.raises(ValueError, match=r"^sfa_tensor: expected torch.float8_e8m0fnu .*\), got torch.uint8"):
        traced(call)


def test_storage_views_are_the_seeds_permuted_tensors():
    """array_spec's view of the storage is the torch path's permuted allocation: its shape
    and strides (blockscaled_reference's), for every scale-factor role; array_shape inverts it."""
    for role in arrays.SCALE_FACTOR_ROLES:
        for rows, cols, l in ((M, K, 1), (N, K, L), (M, 2 * N, 1), (2 * N, M, 1), (100, 40, 3)):
            seed = mx.bs.sf_allocate(rows, cols, l)
            spec = arrays.array_spec(role, storage_shape(rows, cols, l), jnp.float8_e8m0fnu)
            assert (spec.shape, spec.stride()) == (tuple(seed.shape), seed.stride())
            assert arrays.array_shape(role, spec.shape) == storage_shape(rows, cols, l)
            assert spec.dtype == "torch.float8_e8m0fnu"


# ---- the handler's plan on XLA's buffers (XLA:CPU, the driver stood in) ----


# plans_on_cpu: test_jax_api's recorder, under this module's driver (its manifest)


def concrete(call: dict) -> dict:
    """Zero-filled JAX arrays of ``call``'s forms (offsets and vectors with their values)."""
    made = {}
    for name, value in call.items():
        if isinstance(value, S):
            made[name] = jnp.zeros(value.shape, value.dtype)
        else:
            made[name] = value
    made["padded_offsets"] = jnp.array([256, 256, 768, 1024], jnp.int32)
    return made


def _run(call: dict, **static):
    tensors = {k: v for k, v in call.items() if isinstance(v, jax.Array)}
    options = {k: v for k, v in call.items() if not isinstance(v, jax.Array)}
    out = dglu_jax.grouped_gemm_dglu_jax(**tensors, **options, **static)
    out.dprob_tensor.block_until_ready()
    return out


@pytest.mark.parametrize("weights", ["dense", "discrete"])
def test_the_plan_binds_every_block_scaled_buffer(plans_on_cpu, weights):
    call = jax_call(mx.wrapper_call() if weights == "dense" else mx.discrete_wrapper_call())
    out = _run(concrete(call))
    plan, xla = plans_on_cpu[-1]
    decoded = decode_attributes(xla.attrs)
    b, sfb = ("b", "sfb") if weights == "dense" else ("b_ptrs", "sfb_ptrs")
    assert decoded.operands == ("a", b, "c", "padded_offsets", "alpha", "beta", "prob", "sfa", sfb, "norm_const",
                                "dprob")
    assert decoded.results == ("d_row", "d_col", "sfd_row", "sfd_col", "dprob", "dbias")
    rets = dict(zip(decoded.results, xla.rets))
    assert rets["sfd_row"].dims == storage_shape(M, 2 * N) and rets["sfd_row"].dtype == "float8_e8m0fnu"
    assert xla.args[0].dtype == "float8_e4m3fn" and xla.args[7].dtype == "float8_e8m0fnu"
    # every tensor the kernels see is XLA's buffer, the scale factors with the seed's strides
    given = dict(zip(decoded.operands, xla.args)) | rets
    for role in ("a", "sfa", b, sfb, "norm_const", "c", "d_row", "d_col", "sfd_row", "sfd_col", "dbias"):
        assert plan.views[role].pointer == given[role].data, role
    assert plan.views["sfa"].strides == mx.bs.sf_strides(M, K)
    assert plan.views["sfd_col"].strides == mx.bs.sf_strides(2 * N, M)
    if weights == "dense":
        assert plan.views["sfb"].strides == mx.bs.sf_strides(N, K, L)
    assert plan.launches and all(p.stream == stand_ins.STREAM for p in plan.launches)
    assert (rets["dbias"].data, L * 2 * N * 2) in plan.clears  # dbias accumulates from zero
    np.testing.assert_array_equal(np.asarray(out.dprob_tensor), 1.0)  # zeros + 1


def test_block_scaled_options_reach_the_handler(plans_on_cpu):
    call = jax_call(mx.wrapper_call())
    _run(concrete(call), discrete_col_sfd=True, vector_f32=True, epilogue_op="relu")
    _, xla = plans_on_cpu[-1]
    options = decode_attributes(xla.attrs).config.options
    assert (options.discrete_col_sfd, options.vector_f32, options.epilogue_op) == (True, True, "relu")
    assert options.single_group is False


def test_single_group_offsets_reach_the_handler(plans_on_cpu):
    """use_single_group_runtime_offsets: one expert, padded_offsets an int32 (1,) array
    the kernels never read; the handler's own check (one expert, M a multiple of
    m_aligned) passes on XLA's buffers."""
    call = concrete(jax_call(mx.wrapper_call()))
    one = {"padded_offsets": jnp.zeros((1,), jnp.int32), "alpha_tensor": jnp.ones(1), "beta_tensor": jnp.ones(1),
           "b_tensor": jnp.zeros((1, N, K), jnp.float8_e4m3fn), "sfb_tensor": jnp.zeros(storage_shape(N, K), jnp.float8_e8m0fnu)}
    out = _run({**call, **one}, use_single_group_runtime_offsets=True)
    _, xla = plans_on_cpu[-1]
    assert decode_attributes(xla.attrs).config.options.single_group is True
    assert out.dbias_tensor.shape == (1, 2 * N, 1)


def test_a_bf16_call_exported_before_the_operands_attribute_decodes_as_bf16():
    attrs = {
        "weight_mode": "dense", "n": 0, "b_dtype": "", "d_dtype": "bf16", "dbias": False, "act_func": "dswiglu",
        "b_major": "k", "tile": (0, 0), "cluster": (1, 1), "scheduler": "static", "m_aligned": 256,
        "deterministic": False, "results": "d_row,dprob", "workspaces": "",
    }  # fmt: skip
    decoded = decode_attributes(attrs)
    assert decoded.operands == ("a", "b", "c", "padded_offsets", "alpha", "beta", "prob", "dprob")
    assert decoded.config.options.epilogue_op is None and decoded.config.options.discrete_col_sfd is False


# ---- Blackwell (sm_100a): NVFP4 and MXFP8 through the sm100_blockscaled family's policy ----


@pytest.fixture
def b200(tmp_path, monkeypatch):
    """test_sm100_blockscaled_front's manifest (an sm_100a NVFP4 and an MXFP8 variant, an
    sm_90a BF16 one) on a B200 stand-in; JAX traces for sm_100a."""
    sm100 = pytest.importorskip("test_sm100_blockscaled_front", reason="needs the sm100_blockscaled family")
    fake, _ = sm100._stand_ins(sm100.B200, tmp_path, monkeypatch)
    monkeypatch.setattr(dglu_jax, "default_device_arch", lambda: "sm_100a")
    return sm100, fake


def test_an_nvfp4_call_takes_uint8_fp4_pairs_and_returns_amax(b200):
    sm100, fake = b200
    out = traced(jax_call(sm100._call()))
    assert (out.d_row_tensor.shape, out.d_row_tensor.dtype) == ((sm100.M, 2 * sm100.N, 1), jnp.bfloat16)
    assert (out.amax_tensor.shape, out.amax_tensor.dtype) == ((sm100.L, 2, 1), jnp.float32)
    assert out.dbias_tensor.shape == (sm100.L, 2 * sm100.N, 1)
    assert out.d_col_tensor is out.sfd_row_tensor is out.sfd_col_tensor is None
    assert fake.allocations() == 0 and fake.enqueued() == []


def test_an_mxfp8_call_on_blackwell_returns_its_quantized_outputs(b200):
    sm100, _ = b200
    out = traced(jax_call(sm100._mxfp8_call()))
    m, n2 = sm100.M, 2 * sm100.N
    assert out.d_row_tensor.dtype == out.d_col_tensor.dtype == jnp.float8_e4m3fn
    assert out.sfd_row_tensor.shape == storage_shape(m, n2) and out.sfd_col_tensor.shape == storage_shape(n2, m)
    assert out.amax_tensor is None


@pytest.mark.parametrize(
    ("call", "changes"),
    [
        ("nvfp4", {"sf_vec_size": 32}),
        ("nvfp4", {"d_dtype": torch.float8_e4m3fn}),
        ("nvfp4", {"norm_const_tensor": torch.ones(1)}),
        ("mxfp8", {"sf_vec_size": 16}),
        ("mxfp8", {"discrete_col_sfd": True}),
        ("mxfp8", {"norm_const_tensor": None}),
        # before the selection, as in the wrapper: no installed variant compiles it in
        ("mxfp8", {"use_single_group_runtime_offsets": True}),
    ],
)
def test_blackwell_refusals_are_the_torch_wrappers(b200, call, changes):
    sm100, fake = b200
    torch_call = (sm100._call if call == "nvfp4" else sm100._mxfp8_call)(**changes)
    kind, message = _torch_error(torch_call)
    with pytest.raises(kind) as raised:
        traced(jax_call(torch_call))
    assert str(raised.value) == message.replace("the tensors' device", dglu_jax.TRACE_ARCH_SOURCE).replace(
        "a Tensor", "a JAX array")
    assert fake.allocations() == 0 and fake.enqueued() == []


def test_a_jitted_call_as_docs_blockscaled_writes_it(plans_on_cpu):
    """docs/blockscaled.md's JAX example, on XLA:CPU (the handler records the plan)."""

    def sf_storage(rows, kc, l=1):
        shape = (l, -(-rows // 128), -(-kc // 128), 32, 4, 4)
        return jax.lax.bitcast_convert_type(jnp.full(shape, 127, jnp.uint8), jnp.float8_e8m0fnu)

    run = jax.jit(dglu_jax.grouped_gemm_dglu_jax, static_argnames=("d_dtype", "sf_vec_size", "generate_dbias"))
    out = run(
        jnp.zeros((M, K, 1), jnp.float8_e4m3fn), jnp.zeros((M, 2 * N, 1), jnp.bfloat16), sf_storage(M, K),
        padded_offsets=jnp.array([256, 256, 768, 1024], jnp.int32), alpha_tensor=jnp.ones(L),
        beta_tensor=jnp.ones(L), prob_tensor=jnp.ones((M, 1, 1)),
        b_tensor=jnp.zeros((L, N, K), jnp.float8_e4m3fn), sfb_tensor=sf_storage(N, K, L),
        norm_const_tensor=jnp.ones(1, jnp.float32), d_dtype=jnp.float8_e4m3fn, sf_vec_size=32, generate_dbias=True,
    )  # fmt: skip
    d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col = out
    np.testing.assert_array_equal(np.asarray(dprob), 1.0)
    assert sfd_row.shape == storage_shape(M, 2 * N) and sfd_row.dtype == jnp.float8_e8m0fnu and amax is None
    plan, _ = plans_on_cpu[-1]
    assert plan.views["sfb"].strides == mx.bs.sf_strides(N, K, L)


SENTINEL = object()  # no option accepts it; the refusal shows its repr, the same in both


def _bf16_call() -> dict:
    call = mx.wrapper_call()
    for name in ("sfa_tensor", "sfb_tensor", "norm_const_tensor"):
        del call[name]
    bf16 = torch.bfloat16
    return {**call, "a_tensor": call["a_tensor"].to(bf16), "b_tensor": call["b_tensor"].to(bf16), "d_dtype": None,
            "sf_vec_size": 16}


@pytest.mark.parametrize("base", ["mxfp8", "bf16"])
@pytest.mark.parametrize("option", [n for n in WRAPPER if ARGUMENTS[n].role == "option" and n not in NOT_OFFERED["jax"]])
def test_every_option_of_the_table_reaches_the_checks_as_in_the_wrapper(driver, base, option):
    """Each option row of the argument table that dglu.jax offers is checked by the
    wrapper's code: a value no option accepts is refused by both, with one message."""
    call = {**(mx.wrapper_call() if base == "mxfp8" else _bf16_call()), option: SENTINEL}
    kind, message = _torch_error(call)
    with pytest.raises(kind) as raised:
        traced(jax_call(call))
    assert str(raised.value) == message.replace("the tensors' device", dglu_jax.TRACE_ARCH_SOURCE)
