"""Refusals name the real reason: each refusal fires with other arguments also wrong, and
the message is the most fundamental one's. Order (dglu.api, dglu.op): the operands' dtype
family (FP4, E4M3 scales, A's and B's types), then option values, then missing tensors,
then shapes and strides; nothing allocated, launched or written.

Each case below is one refusal (``first``) together with the wrong arguments of every later
stage (``also``): the message must start with the refusal's argument and show its
fragments. The stand-ins and the two manifests (with and without MXFP8 variants) are
test_blockscaled_refusals'.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

from test_blockscaled_refusals import (  # noqa: E402
    BF16, E4M3, FP4, K, L, M, N, Refusal, change, check_refused, contiguous_sf, manifest, recorded, sf,
)

__all__ = ["manifest", "recorded"]  # the fixtures these tests use

FP4_A = dict(
    a_tensor=lambda: torch.zeros(M, K // 2, 1, dtype=torch.uint8).view(FP4),
    b_tensor=lambda: torch.zeros(L, N, K // 2, dtype=torch.uint8).view(FP4).permute(1, 2, 0),
)
UINT8_A = dict(
    a_tensor=lambda: torch.zeros(M, K // 2, 1, dtype=torch.uint8),
    b_tensor=lambda: torch.zeros(L, N, K // 2, dtype=torch.uint8).permute(1, 2, 0),
)
# The wrong arguments of each stage, for the wrapper.
BAD_OPTIONS = dict(sf_vec_size=16, d_dtype=None, sf_fp8_dtype_override="e5m3", act_func="nope")
MISSING = dict(norm_const_tensor=None, sfa_tensor=None, padded_offsets=None)
BAD_SHAPES = dict(sfb_tensor=lambda: contiguous_sf(N, K, L), prob_tensor=lambda: torch.ones(M + 1, 1, 1))
FP4_MESSAGE = ("no FP4 tensor cores on Hopper", "Blackwell cubins")

CASES = {
    "FP4 A (float4_e2m1fn_x2) before options, missing tensors, shapes": Refusal(
        "wrapper", change(**FP4_A, **BAD_OPTIONS, **MISSING, **BAD_SHAPES), "a_tensor",
        ("float4_e2m1fn_x2", *FP4_MESSAGE),
    ),
    "FP4 A (uint8) before options, missing tensors, shapes": Refusal(
        "wrapper", change(**UINT8_A, **BAD_OPTIONS, **MISSING, **BAD_SHAPES), "a_tensor",
        ("uint8", *FP4_MESSAGE),
    ),
    "FP4 A without its scale factors nor norm_const": Refusal(
        "wrapper", change(**FP4_A, sfa_tensor=None, norm_const_tensor=None), "a_tensor", FP4_MESSAGE,
    ),
    "discrete FP4 b_dtype before options and missing tensors": Refusal(
        "discrete wrapper", change(b_dtype=FP4, **BAD_OPTIONS, **MISSING), "b_dtype", FP4_MESSAGE,
    ),
    "E4M3 SFA before options and missing tensors": Refusal(
        "wrapper", change(sfa_tensor=lambda: sf(M, K).view(E4M3), **BAD_OPTIONS,
                          norm_const_tensor=None, padded_offsets=None),
        "sfa_tensor", ("float8_e4m3fn", "float8_e8m0fnu"),
    ),
    "sf_fp8_dtype_override before other options and missing tensors": Refusal(
        "wrapper", change(sf_fp8_dtype_override="e5m3", sf_vec_size=16, d_dtype=None, **MISSING),
        "sf_fp8_dtype_override", ("'e5m3'", "Rubin"),
    ),
    "sf_vec_size before missing tensors and shapes": Refusal(
        "wrapper", change(sf_vec_size=16, **MISSING, **BAD_SHAPES), "sf_vec_size", ("16", "32"),
    ),
    "d_dtype before missing tensors and shapes": Refusal(
        "wrapper", change(d_dtype=BF16, **MISSING, **BAD_SHAPES), "d_dtype", ("bfloat16", "float8_e4m3fn"),
    ),
    "FP8 C with vector_f32 before missing tensors": Refusal(
        "wrapper", change(c_tensor=lambda: torch.zeros(M, 2 * N, 1).to(E4M3), vector_f32=True, **MISSING),
        ("vector_f32", "c_tensor"), ("vector_f32", "True"),
    ),
    "missing norm_const before shapes": Refusal(
        "wrapper", change(norm_const_tensor=None, **BAD_SHAPES), "norm_const_tensor", ("None", "FP8 operands"),
    ),
    "missing padded_offsets before shapes": Refusal(
        "wrapper", change(padded_offsets=None, **BAD_SHAPES), "padded_offsets", ("None", "required"),
    ),
    "C's dtype before the single-group offsets and shapes": Refusal(
        "wrapper", change(c_tensor=lambda: torch.zeros(M, 2 * N, 1, dtype=torch.float64),
                          use_single_group_runtime_offsets=True, **BAD_SHAPES),
        "c_tensor", ("float64",),
    ),
    "class: FP4 sample_a before options and missing samples": Refusal(
        "check_support",
        change(sample_a=FP4_A["a_tensor"], sample_b=FP4_A["b_tensor"], sf_vec_size=16,
               sf_fp8_dtype_override="e5m3", sample_norm_const=None, sample_sfd_row=None,
               sample_padded_offsets=None),
        "sample_a", ("float4_e2m1fn_x2", *FP4_MESSAGE),
    ),
    "class: sf_vec_size before missing samples": Refusal(
        "check_support", change(sf_vec_size=16, sample_norm_const=None, sample_sfd_col=None),
        "sf_vec_size", ("16", "32"),
    ),
    "class: sf_fp8_dtype_override before missing samples": Refusal(
        "check_support", change(sf_fp8_dtype_override="e5m3", sample_norm_const=None), "sf_fp8_dtype_override",
        ("Rubin",),
    ),
    "class: missing sample_dprob before shapes": Refusal(
        "check_support", change(sample_dprob=None, sample_sfb=lambda: contiguous_sf(N, K, L)), "sample_dprob",
        ("None", "required"),
    ),
    "class: sample_c's dtype before the single-group offsets": Refusal(
        "check_support", change(sample_c=lambda: torch.zeros(M, 2 * N, 1, dtype=torch.float64),
                                use_single_group_runtime_offsets=True), "sample_c", ("float64",),
    ),
    "class: sample_amax before missing samples": Refusal(
        "check_support", change(sample_amax=lambda: torch.zeros(1), sample_norm_const=None), "sample_amax",
        ("got a Tensor", "bf16/fp16 D of FP4 operands", "pass None"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_most_fundamental_reason_is_named(name, recorded, manifest) -> None:
    check_refused(CASES[name], recorded, manifest)
