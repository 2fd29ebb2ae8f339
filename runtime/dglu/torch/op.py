"""``torch.ops.dglu.grouped_gemm_dglu``: the fused op as a torch custom op.

Registered with ``torch.library.custom_op`` so that torch.compile traces through it
(fullgraph, no graph break) and CUDA graphs capture it: it declares that it accumulates
into ``dprob_tensor`` and returns D_row (and dbias) as new tensors, and its fake
implementation gives their shapes and dtypes without running anything. Its CUDA kernel is
the eager wrapper ``dglu.grouped_gemm_dglu`` on torch's current stream, unchanged (this
layer adds the dispatcher's cost, nothing inside the wrapper).

``grouped_gemm_dglu`` below is the function to call: the seed's BF16 arguments and
defaults, returning ``DgluOutputs`` in the seed's order (d_row, d_col, dprob, dbias, amax,
sfd_row, sfd_col; d_col, amax and the scale factors None); with act_out=True (not in the
seed) ``DgluActOutputs``, the same plus a trailing act_out_tensor (M, N, 1) bf16, prob * GLU(C)
written by the kernel (an act_out variant must be installed). Under
``torch.compile(mode="reduce-overhead")`` a dprob buffer that is an input of the compiled
function is a mutated input, which keeps that graph out of CUDA graphs; allocate dprob
inside the compiled function (as the MLP's backward does) or pass a static buffer.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

OP_NAME = "dglu::grouped_gemm_dglu"
_STRIDE_TAG = getattr(torch.Tag, "needs_exact_strides", torch.Tag.needs_fixed_stride_order)


class DgluOutputs(NamedTuple):
    """The op's results in the seed's order (unpacks like the wrapper's TupleDict)."""

    d_row_tensor: torch.Tensor
    d_col_tensor: None
    dprob_tensor: torch.Tensor
    dbias_tensor: Optional[torch.Tensor]
    amax_tensor: None
    sfd_row_tensor: None
    sfd_col_tensor: None


class DgluActOutputs(NamedTuple):
    """DgluOutputs plus act_out_tensor (M, N, 1) bf16: prob * GLU(C), for act_out=True."""

    d_row_tensor: torch.Tensor
    d_col_tensor: None
    dprob_tensor: torch.Tensor
    dbias_tensor: Optional[torch.Tensor]
    amax_tensor: None
    sfd_row_tensor: None
    sfd_col_tensor: None
    act_out_tensor: torch.Tensor


def _pair(values: Optional[list[int]]) -> Optional[tuple[int, ...]]:
    return None if values is None else tuple(values)


@torch.library.custom_op(
    OP_NAME, mutates_args=("dprob_tensor",), device_types="cuda", tags=(_STRIDE_TAG,)
)
def grouped_gemm_dglu_op(
    a_tensor: torch.Tensor,
    c_tensor: torch.Tensor,
    padded_offsets: torch.Tensor,
    alpha_tensor: torch.Tensor,
    beta_tensor: torch.Tensor,
    prob_tensor: torch.Tensor,
    dprob_tensor: torch.Tensor,
    b_tensor: Optional[torch.Tensor],
    b_ptrs: Optional[torch.Tensor],
    n: Optional[int],
    b_dtype: Optional[torch.dtype],
    b_major: str,
    act_func: str,
    geglu_alpha: float,
    glu_clamp_max: float,
    glu_clamp_min: float,
    linear_offset: float,
    situ_beta1: float,
    situ_beta2: float,
    generate_dbias: bool,
    use_dynamic_sched: bool,
    mma_tiler_mn: Optional[list[int]],
    cluster_shape_mn: Optional[list[int]],
    d_dtype: Optional[torch.dtype],
    act_out: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(D_row (M, 2N, 1), dbias (L, 2N, 1) bf16, act_out (M, N, 1) bf16); dbias and act_out
    are empty (0,) tensors unless generate_dbias and act_out (a custom op's outputs cannot be
    None)."""
    import dglu

    out = dglu.grouped_gemm_dglu(
        a_tensor,
        c_tensor,
        padded_offsets=padded_offsets,
        alpha_tensor=alpha_tensor,
        beta_tensor=beta_tensor,
        prob_tensor=prob_tensor,
        dprob_tensor=dprob_tensor,
        b_tensor=b_tensor,
        b_ptrs=b_ptrs,
        n=n,
        b_dtype=b_dtype,
        b_major=b_major,
        d_dtype=d_dtype,
        mma_tiler_mn=_pair(mma_tiler_mn),
        cluster_shape_mn=_pair(cluster_shape_mn),
        act_func=act_func,
        geglu_alpha=geglu_alpha,
        glu_clamp_max=glu_clamp_max,
        glu_clamp_min=glu_clamp_min,
        linear_offset=linear_offset,
        situ_beta1=situ_beta1,
        situ_beta2=situ_beta2,
        generate_dbias=generate_dbias,
        use_dynamic_sched=use_dynamic_sched,
        act_out=act_out,
    )
    d_row, dbias = out["d_row_tensor"], out["dbias_tensor"]
    activation = out["act_out_tensor"] if act_out else _absent(d_row)
    return d_row, _absent(d_row) if dbias is None else dbias, activation


def _absent(like: torch.Tensor) -> torch.Tensor:
    """The placeholder returned for dbias without generate_dbias (and act_out without act_out)."""
    return like.new_empty((0,), dtype=torch.bfloat16)


@grouped_gemm_dglu_op.register_fake
def _fake(
    a_tensor, c_tensor, padded_offsets, alpha_tensor, beta_tensor, prob_tensor, dprob_tensor,
    b_tensor, b_ptrs, n, b_dtype, b_major, act_func, geglu_alpha, glu_clamp_max,
    glu_clamp_min, linear_offset, situ_beta1, situ_beta2, generate_dbias, use_dynamic_sched,
    mma_tiler_mn, cluster_shape_mn, d_dtype, act_out,
):
    """Shapes and dtypes only: D_row (M, 2N, 1) of A's rows and C's width, dbias (L, 2N, 1)
    and act_out (M, N, 1) bf16, or the (0,) placeholders."""
    rows, width = a_tensor.shape[0], c_tensor.shape[1]
    d_row = a_tensor.new_empty((rows, width, 1), dtype=d_dtype or torch.bfloat16)
    dbias = _absent(d_row)
    if generate_dbias:
        dbias = a_tensor.new_empty((padded_offsets.shape[0], width, 1), dtype=torch.bfloat16)
    activation = _absent(d_row)
    if act_out:
        activation = a_tensor.new_empty((rows, width // 2, 1), dtype=torch.bfloat16)
    return d_row, dbias, activation


def grouped_gemm_dglu(
    a_tensor: torch.Tensor,
    c_tensor: torch.Tensor,
    *,
    padded_offsets: torch.Tensor,
    alpha_tensor: torch.Tensor,
    beta_tensor: torch.Tensor,
    prob_tensor: torch.Tensor,
    dprob_tensor: torch.Tensor,
    b_tensor: Optional[torch.Tensor] = None,
    b_ptrs: Optional[torch.Tensor] = None,
    n: Optional[int] = None,
    b_dtype: Optional[torch.dtype] = None,
    b_major: str = "k",
    d_dtype: Optional[torch.dtype] = None,
    mma_tiler_mn: Optional[tuple[int, int]] = None,
    cluster_shape_mn: Optional[tuple[int, int]] = None,
    act_func: str = "dswiglu",
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    linear_offset: float = 1.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    generate_dbias: bool = False,
    use_dynamic_sched: bool = False,
    act_out: bool = False,
) -> DgluOutputs | DgluActOutputs:
    """The fused op through the dispatcher (torch.compile- and CUDA-graph-safe); the seed's
    arguments (BF16 contract) and return order. dprob_tensor accumulates in place. act_out
    (not in the seed): also return prob * GLU(C), DgluActOutputs."""
    d_row, dbias, activation = torch.ops.dglu.grouped_gemm_dglu(
        a_tensor,
        c_tensor,
        padded_offsets,
        alpha_tensor,
        beta_tensor,
        prob_tensor,
        dprob_tensor,
        b_tensor,
        b_ptrs,
        n,
        b_dtype,
        b_major,
        act_func,
        float(geglu_alpha),
        float(glu_clamp_max),
        float(glu_clamp_min),
        float(linear_offset),
        float(situ_beta1),
        float(situ_beta2),
        generate_dbias,
        use_dynamic_sched,
        None if mma_tiler_mn is None else list(mma_tiler_mn),
        None if cluster_shape_mn is None else list(cluster_shape_mn),
        d_dtype,
        act_out,
    )
    outputs = (d_row, None, dprob_tensor, dbias if generate_dbias else None, None, None, None)
    return DgluActOutputs(*outputs, activation) if act_out else DgluOutputs(*outputs)
