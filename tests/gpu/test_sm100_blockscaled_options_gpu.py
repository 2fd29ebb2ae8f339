"""Blackwell block-scaled key choices beyond the default wheel (family sm100_blockscaled):
``discrete_col_sfd`` and ``use_single_group_runtime_offsets`` (cuDNN FE's kernel compiles
both in) and N-major dense FP8 B, each called through the public wrapper (which selects
the variant compiled with the option, or by B's strides), every output element against the
float64 reference (blockscaled_reference), SFD_col in the layout the option names.

These variants are not in the default wheel: build them first (ci/gpu_check.sh's wheel
has none of them), e.g.

    dglu-build add --arch sm_100a --ab-dtype e4m3 --d-dtype e4m3 --act dswiglu --tile 256x256 \\
        --cluster 2x1 --experts 8 --dbias --weight-mode dense --weight-mode discrete --discrete-col-sfd
    dglu-build add --arch sm_100a --ab-dtype e4m3 --d-dtype e4m3 --act dswiglu --tile 256x256 \\
        --cluster 2x1 --experts 1 --dbias --use-single-group-runtime-offsets
    dglu-build add --arch sm_100a --ab-dtype e4m3 --d-dtype e4m3 --act dgeglu --tile 256x256 \\
        --cluster 2x1 --experts 8 --dbias --b-major n

(--arch sm_103a on a B300); a test whose variant is not installed skips naming it. Nothing
here has run on Blackwell hardware yet.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")

import blockscaled_reference as bs  # noqa: E402
from blockscaled_checks import check_accumulated, check_quantized_d  # noqa: E402
from blockscaled_configs import MxConfig  # noqa: E402
from blockscaled_inputs import make_mx_inputs  # noqa: E402
from inputs import Shape, initial_dprob  # noqa: E402
from test_sm100_blockscaled_gpu import DEVICE, FAMILY, SHAPE, TILE, _arch, _weights, requires_blackwell  # noqa: E402

import dglu  # noqa: E402

pytestmark = pytest.mark.gpu

ONE_EXPERT = Shape(n=160, k=160, expert_rows=(768,))  # 2N = 320 and K = 160: partial SF atoms
NORM_CONST = 0.5
CASES = [  # (activation, weight mode, b_major, discrete_col_sfd, single group, shape)
    ("swiglu", "dense", "k", True, False, SHAPE),
    ("swiglu", "discrete", "k", True, False, SHAPE),
    ("swiglu", "dense", "k", False, True, ONE_EXPERT),
    ("geglu", "dense", "n", False, False, SHAPE),
]


def _variant(config: MxConfig, discrete_col_sfd: bool, single_group: bool, experts: int):
    """The installed variant of these key fields for the device, else skip naming it."""
    from dglu.contract.reader import full_variant
    from dglu.manifest import installed_variants

    wanted = (FAMILY, _arch(), "e4m3", config.act_func, config.dbias, config.weight_mode, config.b_major, experts,
              discrete_col_sfd, single_group)
    for entry in installed_variants():
        key = entry.key
        if (entry.family, key.arch, key.ab_dtype, key.act_func, key.dbias, key.weight_mode, key.b_major, key.experts,
                key.discrete_col_sfd, key.use_single_group_runtime_offsets) == wanted:
            return full_variant(entry)
    pytest.skip(f"no {FAMILY} variant {wanted[2:]} installed (this module's docstring builds them)")


@requires_blackwell
@pytest.mark.parametrize(("activation", "mode", "b_major", "discrete_col_sfd", "single_group", "shape"), CASES,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}{'-dcs' * c[3]}{'-sgo' * c[4]}" for c in CASES])
def test_compiled_in_options_and_n_major_dense_b(activation, mode, b_major, discrete_col_sfd, single_group, shape,
                                                 seed) -> None:
    config = MxConfig(activation, dbias=True, weight_mode=mode, b_major=b_major)
    variant = _variant(config, discrete_col_sfd, single_group, shape.l)
    x = make_mx_inputs(config, shape, seed, DEVICE)
    dprob_before = initial_dprob(shape.m, seed, DEVICE)
    dprob = dprob_before.clone()
    r = x.rest
    # single-group offsets: the kernel takes the expert's rows from A's shape and never reads
    # padded_offsets, so a wrong value in it must change nothing
    offsets = torch.zeros_like(r.padded_offsets) if single_group else r.padded_offsets
    d_row, d_col, dprob_out, dbias, amax, sfd_row, sfd_col = dglu.grouped_gemm_dglu(
        x.a, x.c, x.sfa, padded_offsets=offsets, alpha_tensor=r.alpha, beta_tensor=r.beta, prob_tensor=r.prob,
        dprob_tensor=dprob, norm_const_tensor=torch.tensor([NORM_CONST], device=DEVICE), d_dtype=config.d_dtype,
        generate_dbias=True, discrete_col_sfd=discrete_col_sfd, use_single_group_runtime_offsets=single_group,
        sf_vec_size=32, **_weights(x, config.discrete, "wrapper"), **config.act_kwargs(), **config.launch_kwargs(),
        **TILE,
    )
    torch.cuda.synchronize()
    assert dprob_out is dprob and amax is None
    expected = bs.blockscaled_dglu_backward(x.a, x.sfa, x.b, x.sfb, x.c, shape.ends, r.alpha, r.beta, r.prob,
                                            config.act_func, config.act_params)
    context = f"{variant.name} seed {seed}"
    check_quantized_d(d_row, d_col, sfd_row, sfd_col, expected, shape.ends, torch.float8_e4m3fn, NORM_CONST,
                      discrete_col_sfd, context)
    check_accumulated(dprob, dprob_before, dbias, torch.zeros_like(dbias), expected, shape.ends, shape.n, context)
