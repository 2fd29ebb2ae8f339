"""dglu.jax's MXFP8 calls on the GPU (family sm90_mxfp8): the same inputs through the torch
wrapper and through the JAX entry under jax.jit, in JAX's forms (scale factors as the
seed's permuted storage, B row-major (L, N, K) or (L, K, N), b_ptrs/sfb_ptrs as uint32
pairs). JAX's D_row, D_col and SFD bytes equal the torch wrapper's, byte for byte, on every
row and block the kernels write; JAX's results are checked against the float64 block-scaled
reference like the torch path's (blockscaled_checks: SFD bytes, FP8 codes, dprob and dbias
from the unquantized D); dprob starts from non-zero contents, alpha/beta/prob far from 1,
uneven experts with an empty one, norm_const far from 1 (blockscaled_inputs)."""

from __future__ import annotations

import functools

import pytest

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'dglu[test]')")
torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
jnp = jax.numpy

import blockscaled_reference as bs  # noqa: E402
import dglu.jax as dglu_jax  # noqa: E402
from blockscaled_checks import check_accumulated, check_quantized_d, discrete_written_mask, written_mask  # noqa: E402
from blockscaled_configs import DEFAULT, MxConfig  # noqa: E402
from blockscaled_inputs import MxInputs, make_mx_inputs  # noqa: E402
from dglu.jax.arrays import SEED_TO_SF_STORAGE, SF_STORAGE_TO_SEED  # noqa: E402
from inputs import initial_dprob  # noqa: E402
from test_blockscaled_gpu import DEVICE, SMALL, MxCase, expected_for, require_installed, run_wrapper  # noqa: E402

pytestmark = pytest.mark.gpu
NORM_CONST = 3.0
CONFIGS = [
    DEFAULT,  # dswiglu, e4m3 in and out, bf16 C, dbias, dense K-major, static
    MxConfig("dgeglu", b_major="n", scheduler="dynamic"),  # dense N-major B: a row-major (L, K, N) array
    MxConfig("dsituglu", weight_mode="discrete", b_major="n", scheduler="dynamic"),
]
_JAX_TYPES = {
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e5m2: jnp.float8_e5m2,
    torch.float8_e8m0fnu: jnp.float8_e8m0fnu,
    torch.bfloat16: jnp.bfloat16,
}


def to_jax(t: torch.Tensor):
    """A torch tensor's bytes as a JAX array of its dtype on JAX's default device."""
    host = t.detach().cpu().contiguous()
    if host.dtype in _JAX_TYPES:
        raw = host.view(torch.uint8 if host.element_size() == 1 else torch.int16).numpy()
        return jnp.asarray(raw.view(np.dtype(_JAX_TYPES[host.dtype])))
    return jnp.asarray(host.numpy())


def to_torch(x, dtype: torch.dtype) -> torch.Tensor:
    """A JAX array's bytes as a CUDA torch tensor of ``dtype`` (same shape)."""
    host = np.asarray(x)
    if dtype in _JAX_TYPES:
        host = host.view(np.uint8 if host.itemsize == 1 else np.int16)
    return torch.from_numpy(host.copy()).view(dtype).to(DEVICE)


def pointer_pairs(pointers: torch.Tensor):
    return jnp.asarray(pointers.cpu().numpy().view(np.uint32).reshape(-1, 2))


def jax_arguments(x: MxInputs, config: MxConfig, dprob: torch.Tensor, norm_const: torch.Tensor) -> dict:
    """The call's arrays in dglu.jax's forms."""
    r = x.rest
    made = {
        "a_tensor": to_jax(x.a), "c_tensor": to_jax(x.c), "sfa_tensor": to_jax(x.sfa.permute(SEED_TO_SF_STORAGE)),
        "padded_offsets": to_jax(r.padded_offsets), "alpha_tensor": to_jax(r.alpha), "beta_tensor": to_jax(r.beta),
        "prob_tensor": to_jax(r.prob), "dprob_tensor": to_jax(dprob), "norm_const_tensor": to_jax(norm_const),
    }  # fmt: skip
    if x.experts is None:
        order = (2, 1, 0) if config.b_major == "n" else (2, 0, 1)  # (N, K, L) -> (L, K, N) / (L, N, K)
        made["b_tensor"] = to_jax(x.b.permute(order))
        made["sfb_tensor"] = to_jax(x.sfb.permute(SEED_TO_SF_STORAGE))
    else:
        made["b_ptrs"], made["sfb_ptrs"] = pointer_pairs(x.experts.b_ptrs), pointer_pairs(x.sfb_ptrs)
    return made


def jax_options(config: MxConfig, discrete_col_sfd: bool, n: int) -> dict:
    options = {
        **config.act_kwargs(), **config.launch_kwargs(), "sf_vec_size": 32, "discrete_col_sfd": discrete_col_sfd,
        "d_dtype": _JAX_TYPES[config.d_dtype], "generate_dbias": config.dbias,
    }  # fmt: skip
    if config.discrete:
        options.update(n=n, b_dtype=_JAX_TYPES[config.ab_dtype])
    return options


def sf_view(storage) -> torch.Tensor:
    """A JAX SFD storage array as the seed's permuted E8M0 view (torch, on the device)."""
    return to_torch(storage, torch.float8_e8m0fnu).permute(SF_STORAGE_TO_SEED)


def written_bytes(sf: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return bs.sf_storage(sf.view(torch.uint8).cpu())[mask.reshape(-1)]


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("discrete_col_sfd", [False, True])
def test_jax_mxfp8_equals_the_torch_wrapper_and_the_reference(config: MxConfig, discrete_col_sfd: bool, seed: int):
    require_installed(config)
    shape = SMALL
    x = make_mx_inputs(config, shape, seed, DEVICE)
    norm_const = torch.tensor([NORM_CONST], dtype=torch.float32, device=DEVICE)
    dprob_before = initial_dprob(shape.m, seed, DEVICE)
    case = MxCase(config, shape, seed, api="wrapper", norm_const=NORM_CONST, discrete_col_sfd=discrete_col_sfd)
    wrapper = run_wrapper(case, x, dprob_before.clone(), norm_const)

    run = jax.jit(functools.partial(dglu_jax.grouped_gemm_dglu_jax, **jax_options(config, discrete_col_sfd, shape.n)))
    arguments = jax_arguments(x, config, dprob_before, norm_const)
    out = run(**arguments)
    jax.block_until_ready(out)
    torch.cuda.synchronize()
    width = 2 * shape.n
    assert out.d_row_tensor.shape == out.d_col_tensor.shape == (shape.m, width, 1)
    assert out.sfd_row_tensor.shape == tuple(wrapper.sfd_row.permute(SEED_TO_SF_STORAGE).shape)
    assert out.sfd_col_tensor.shape == tuple(wrapper.sfd_col.permute(SEED_TO_SF_STORAGE).shape)
    assert out.amax_tensor is None and (out.dbias_tensor is not None) == config.dbias
    d_row, d_col = to_torch(out.d_row_tensor, config.d_dtype), to_torch(out.d_col_tensor, config.d_dtype)
    sfd_row, sfd_col = sf_view(out.sfd_row_tensor), sf_view(out.sfd_col_tensor)
    dprob = to_torch(out.dprob_tensor, torch.float32)
    dbias = to_torch(out.dbias_tensor, torch.bfloat16) if config.dbias else None

    # the torch wrapper's bytes, on every row and block the kernels write
    valid_m = shape.ends[-1]
    for name, got, want in (("d_row", d_row, wrapper.d_row), ("d_col", d_col, wrapper.d_col)):
        assert torch.equal(got[:valid_m].view(torch.uint8), want[:valid_m].view(torch.uint8)), name
    col_mask = discrete_written_mask(width, shape.ends) if discrete_col_sfd else written_mask(width, valid_m)
    for name, got, want, mask in (
        ("sfd_row", sfd_row, wrapper.sfd_row, written_mask(valid_m, width)),
        ("sfd_col", sfd_col, wrapper.sfd_col, col_mask),
    ):
        assert torch.equal(written_bytes(got, mask), written_bytes(want, mask)), name
    np.testing.assert_array_equal(np.asarray(arguments["dprob_tensor"]), dprob_before.cpu().numpy())  # not mutated

    # the float64 reference, as the torch path's results are checked
    expected = expected_for(case, x)
    context = f"dglu.jax: {case.describe()}"
    check_quantized_d(d_row, d_col, sfd_row, sfd_col, expected, shape.ends, config.d_dtype, NORM_CONST,
                      discrete_col_sfd, context, check_padding=False)
    dbias_before = torch.zeros_like(dbias) if dbias is not None else None
    check_accumulated(dprob, dprob_before, dbias, dbias_before, expected, shape.ends, shape.n, context)
