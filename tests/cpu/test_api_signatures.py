"""The public API's signatures, pinned: names, order, kinds and defaults.

Defaults are the seed document's (/work/shared/seed/grouped_gemm_dglu_sm100.md, "Common
Parameters" and "Wrapper-specific Parameters"), except acc_dtype and d_dtype: None, meaning
torch.float32 and torch.bfloat16 (dglu.api). The seed lists no complete signature; the
order is its examples' (tensors first, then the keyword-only configuration).
"""

from __future__ import annotations

import inspect

import pytest

import dglu

P, K = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY
REQUIRED = inspect.Parameter.empty
CONFIG = [
    ("mma_tiler_mn", None), ("cluster_shape_mn", None), ("sf_vec_size", 16),
    ("vector_f32", False), ("m_aligned", 256), ("discrete_col_sfd", False),
    ("act_func", "dswiglu"), ("geglu_alpha", 1.702), ("glu_clamp_max", 7.0),
    ("glu_clamp_min", -7.0), ("linear_offset", 1.0), ("situ_beta1", 4.0), ("situ_beta2", 25.0),
]
WRAPPER = [
    ("a_tensor", P, REQUIRED), ("c_tensor", P, REQUIRED), ("sfa_tensor", P, None),
    *[(n, K, REQUIRED) for n in ("padded_offsets", "alpha_tensor", "beta_tensor", "prob_tensor",
                                 "dprob_tensor")],
    *[(n, K, None) for n in ("b_tensor", "sfb_tensor", "b_ptrs", "sfb_ptrs", "n", "b_dtype")],
    ("b_major", K, "k"), ("norm_const_tensor", K, None), ("acc_dtype", K, None),
    ("d_dtype", K, None), ("cd_major", K, "n"),
    *[(n, K, d) for n, d in CONFIG],
    ("epilogue_op", K, None), ("generate_dbias", K, False), ("use_dynamic_sched", K, False),
    ("current_stream", K, None), ("deterministic", K, False), ("act_out", K, False),
    ("use_single_group_runtime_offsets", K, False), ("round_dgrad_to_input_dtype", K, False),
]
CONSTRUCTOR = [
    ("self", P, REQUIRED), ("sample_a", P, REQUIRED), ("sample_c", P, REQUIRED),
    ("sample_d_row", P, REQUIRED), ("sample_d_col", P, None), ("sample_sfa", P, None),
    *[(f"sample_{n}", K, REQUIRED) for n in ("padded_offsets", "alpha", "beta", "prob", "dprob")],
    *[(f"sample_{n}", K, None) for n in ("dbias", "b", "sfb", "sfd_row", "sfd_col", "amax",
                                          "norm_const")],
    ("num_experts", K, None), ("b_shape", K, None), ("b_dtype", K, None), ("acc_dtype", K, None),
    *[(n, K, d) for n, d in CONFIG],
    ("b_major", K, "k"), ("epilogue_op", K, None), ("use_dynamic_sched", K, False),
    ("deterministic", K, False), ("act_out", K, False), ("use_single_group_runtime_offsets", K, False),
    ("round_dgrad_to_input_dtype", K, False),
]
EXECUTE = [
    ("self", P, REQUIRED), ("a_tensor", P, REQUIRED), ("c_tensor", P, REQUIRED),
    ("d_row_tensor", P, REQUIRED), ("d_col_tensor", P, None), ("sfa_tensor", P, None),
    *[(n, K, REQUIRED) for n in ("padded_offsets", "alpha_tensor", "beta_tensor", "prob_tensor",
                                 "dprob_tensor")],
    *[(n, K, None) for n in ("dbias_tensor", "b_tensor", "sfb_tensor", "b_ptrs", "sfb_ptrs",
                             "sfd_row_tensor", "sfd_col_tensor", "amax_tensor",
                             "norm_const_tensor", "current_stream", "act_out_tensor")],
]


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (dglu.grouped_gemm_dglu_wrapper_sm90, WRAPPER),
        (dglu.grouped_gemm_dglu_wrapper_sm100, WRAPPER),
        (dglu.GroupedGemmDgluSm100.__init__, CONSTRUCTOR),
        (dglu.GroupedGemmDgluSm100.execute, EXECUTE),
    ],
    ids=["wrapper_sm90", "wrapper_sm100", "class_init", "execute"],
)
def test_signature_matches_the_seed(function, expected) -> None:
    parameters = inspect.signature(function).parameters.values()
    assert [(p.name, p.kind, p.default) for p in parameters] == expected
