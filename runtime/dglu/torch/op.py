"""``torch.ops.dglu.grouped_gemm_dglu``: the fused op as a torch custom op.

Registered with ``torch.library.custom_op`` so that torch.compile traces through it
(fullgraph, no graph break) and CUDA graphs capture it: it declares that it accumulates
into ``dprob_tensor`` and returns D_row (and the other outputs) as new tensors, and its fake
implementation gives their shapes, strides and dtypes without running anything. Its CUDA
kernel is the eager wrapper ``dglu.grouped_gemm_dglu`` on torch's current stream, unchanged
(this layer adds the dispatcher's cost, nothing inside the wrapper).

The op takes the wrapper's parameters in the wrapper's order (dglu.arguments.WRAPPER), less
``current_stream`` (the dispatcher's stream is torch's current one) and
``activation_tensor`` (a custom op returns its outputs: act_out=True returns
act_out_tensor): the BF16 contract, deterministic, act_out, round_dgrad_to_input_dtype and
the block-scaled (MXFP8) arguments. ``grouped_gemm_dglu`` below is the function to call,
returning ``DgluOutputs`` in the seed's order (d_row, d_col, dprob, dbias, amax, sfd_row,
sfd_col; the block-scaled ones None on the BF16 path, amax only with FP4 operands and a
16-bit D, Blackwell's NVFP4); with act_out=True
``DgluActOutputs``, the same plus a trailing act_out_tensor (M, N, 1) bf16, prob * GLU(C)
written by the kernel (an act_out variant must be installed). Under
``torch.compile(mode="reduce-overhead")`` a dprob buffer that is an input of the compiled
function is a mutated input, which keeps that graph out of CUDA graphs; allocate dprob
inside the compiled function (as the MLP's backward does) or pass a static buffer.
"""

from __future__ import annotations

import inspect
from typing import Optional

import torch

from ..contract.records import Record
from ..dtypes import FP8_TYPES, torch_dtype

OP_NAME = "dglu::grouped_gemm_dglu"
_STRIDE_TAG = getattr(torch.Tag, "needs_exact_strides", torch.Tag.needs_fixed_stride_order)
# The seed's scale-factor layout (docs/blockscaled_contract.md): 128-row atoms of
# 4 x 32-element blocks, 512 bytes each, permuted (32, 4, rows/128, 4, blocks/4, L).
SF_ATOM_ROWS, SF_ATOM_BYTES, SF_BLOCK = 128, 512, 32
FP8_DTYPES = tuple(torch_dtype(name) for name in FP8_TYPES)  # the block-scaled operands'
FP4_DTYPE = torch_dtype("e2m1x2")
AMAX_D_DTYPES = (torch.bfloat16, torch.float16)  # NVFP4's D dtypes that come with per-expert amax
# The op's outputs, in its return order (absent ones are (0,) placeholders).
OUTPUTS = ("d_row_tensor", "d_col_tensor", "dbias_tensor", "sfd_row_tensor", "sfd_col_tensor", "amax_tensor",
           "act_out_tensor")


class DgluOutputs(Record):
    """The op's results in the seed's order (unpacks like the wrapper's TupleDict)."""

    d_row_tensor: torch.Tensor
    d_col_tensor: Optional[torch.Tensor]
    dprob_tensor: torch.Tensor
    dbias_tensor: Optional[torch.Tensor]
    amax_tensor: Optional[torch.Tensor]
    sfd_row_tensor: Optional[torch.Tensor]
    sfd_col_tensor: Optional[torch.Tensor]


class DgluActOutputs(Record):
    """DgluOutputs plus act_out_tensor (M, N, 1) bf16: prob * GLU(C), for act_out=True."""

    d_row_tensor: torch.Tensor
    d_col_tensor: Optional[torch.Tensor]
    dprob_tensor: torch.Tensor
    dbias_tensor: Optional[torch.Tensor]
    amax_tensor: Optional[torch.Tensor]
    sfd_row_tensor: Optional[torch.Tensor]
    sfd_col_tensor: Optional[torch.Tensor]
    act_out_tensor: torch.Tensor


# The Python entry's results: every family's front policy ``outputs`` (the seed's roles, in
# its order), as names; tests/cpu/test_torch_op_policy.py checks them against the policies.
_RESULTS = DgluOutputs._fields


def _pair(values: Optional[list[int]]) -> Optional[tuple[int, ...]]:
    return None if values is None else tuple(values)


@torch.library.custom_op(
    OP_NAME, mutates_args=("dprob_tensor",), device_types="cuda", tags=(_STRIDE_TAG,)
)
def grouped_gemm_dglu_op(
    a_tensor: torch.Tensor,
    c_tensor: torch.Tensor,
    sfa_tensor: Optional[torch.Tensor],
    padded_offsets: torch.Tensor,
    alpha_tensor: torch.Tensor,
    beta_tensor: torch.Tensor,
    prob_tensor: torch.Tensor,
    dprob_tensor: torch.Tensor,
    b_tensor: Optional[torch.Tensor],
    sfb_tensor: Optional[torch.Tensor],
    generate_dbias: bool,
    b_ptrs: Optional[torch.Tensor],
    sfb_ptrs: Optional[torch.Tensor],
    n: Optional[int],
    b_dtype: Optional[torch.dtype],
    b_major: str,
    norm_const_tensor: Optional[torch.Tensor],
    acc_dtype: Optional[torch.dtype],
    d_dtype: Optional[torch.dtype],
    cd_major: str,
    mma_tiler_mn: Optional[list[int]],
    cluster_shape_mn: Optional[list[int]],
    sf_vec_size: int,
    sf_fp8_dtype_override: Optional[str],
    vector_f32: bool,
    m_aligned: int,
    discrete_col_sfd: bool,
    act_func: str,
    linear_offset: float,
    geglu_alpha: float,
    glu_clamp_max: float,
    glu_clamp_min: float,
    situ_beta1: float,
    situ_beta2: float,
    epilogue_op: Optional[str],
    use_dynamic_sched: bool,
    use_single_group_runtime_offsets: bool,
    round_dgrad_to_input_dtype: bool,
    deterministic: bool,
    act_out: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(D_row, D_col, dbias, SFD_row, SFD_col, amax, act_out): the outputs of OUTPUTS; each one
    the call does not produce is an empty (0,) tensor (a custom op's outputs cannot be
    None)."""
    arguments = dict(locals())
    import dglu

    arguments["mma_tiler_mn"] = _pair(mma_tiler_mn)
    arguments["cluster_shape_mn"] = _pair(cluster_shape_mn)
    out = dglu.grouped_gemm_dglu(**arguments)
    d_row = out["d_row_tensor"]
    return tuple(d_row if name == "d_row_tensor" else _or_absent(out.get(name), d_row) for name in OUTPUTS)


def _or_absent(tensor: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    return _absent(like) if tensor is None else tensor


def _absent(like: torch.Tensor) -> torch.Tensor:
    """The placeholder returned for an output the call does not produce."""
    return like.new_empty((0,), dtype=torch.bfloat16)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _scale_factors(like: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """An E8M0 scale-factor tensor of (rows, columns) values in the seed's permuted layout."""
    row_atoms = _ceil_div(rows, SF_ATOM_ROWS)
    column_atoms = _ceil_div(_ceil_div(columns, SF_BLOCK), 4)
    pitch = SF_ATOM_BYTES * column_atoms
    return like.new_empty_strided(
        (32, 4, row_atoms, 4, column_atoms, 1),
        (16, 4, pitch, 1, SF_ATOM_BYTES, row_atoms * pitch),
        dtype=torch.float8_e8m0fnu,
    )


@grouped_gemm_dglu_op.register_fake
def _fake(a_tensor, c_tensor, sfa_tensor, padded_offsets, *args):
    """Shapes, strides and dtypes only: D_row (M, 2N, 1) of A's rows and C's width in
    d_dtype; with FP8 operands D_col likewise and SFD_row, SFD_col in the seed's layout;
    with FP4 operands and a 16-bit D, amax (L, 2, 1) fp32; dbias (L, 2N, 1) and act_out
    (M, N, 1) bf16; else the (0,) placeholders (tests/cpu/test_torch_op.py checks these
    against the op's real outputs)."""
    options = dict(zip(_PARAMETERS[4:], args))
    rows, width = a_tensor.shape[0], c_tensor.shape[1]
    d_row = a_tensor.new_empty((rows, width, 1), dtype=options["d_dtype"] or torch.bfloat16)
    made = {"d_row_tensor": d_row}
    if a_tensor.dtype in FP8_DTYPES:
        made["d_col_tensor"] = torch.empty_like(d_row)
        made["sfd_row_tensor"] = _scale_factors(a_tensor, rows, width)
        made["sfd_col_tensor"] = _scale_factors(a_tensor, width, rows)
    if a_tensor.dtype == FP4_DTYPE and d_row.dtype in AMAX_D_DTYPES:
        made["amax_tensor"] = a_tensor.new_empty((padded_offsets.shape[0], 2, 1), dtype=torch.float32)
    if options["generate_dbias"]:
        made["dbias_tensor"] = a_tensor.new_empty((padded_offsets.shape[0], width, 1), dtype=torch.bfloat16)
    if options["act_out"]:
        made["act_out_tensor"] = a_tensor.new_empty((rows, width // 2, 1), dtype=torch.bfloat16)
    return tuple(made[name] if name in made else _absent(d_row) for name in OUTPUTS)


def grouped_gemm_dglu(
    a_tensor: torch.Tensor = None,
    c_tensor: torch.Tensor = None,
    sfa_tensor: Optional[torch.Tensor] = None,
    padded_offsets: torch.Tensor = None,
    alpha_tensor: torch.Tensor = None,
    beta_tensor: torch.Tensor = None,
    prob_tensor: torch.Tensor = None,
    dprob_tensor: torch.Tensor = None,
    b_tensor: Optional[torch.Tensor] = None,
    sfb_tensor: Optional[torch.Tensor] = None,
    generate_dbias: bool = False,
    b_ptrs: Optional[torch.Tensor] = None,
    sfb_ptrs: Optional[torch.Tensor] = None,
    n: Optional[int] = None,
    b_dtype: Optional[torch.dtype] = None,
    b_major: str = "k",
    norm_const_tensor: Optional[torch.Tensor] = None,
    acc_dtype: Optional[torch.dtype] = None,
    d_dtype: Optional[torch.dtype] = None,
    cd_major: str = "n",
    mma_tiler_mn: Optional[tuple[int, int]] = None,
    cluster_shape_mn: Optional[tuple[int, int]] = None,
    sf_vec_size: int = 16,
    sf_fp8_dtype_override: Optional[str] = None,
    vector_f32: bool = False,
    m_aligned: int = 256,
    discrete_col_sfd: bool = False,
    act_func: str = "dswiglu",
    linear_offset: float = 1.0,
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    epilogue_op: Optional[str] = None,
    use_dynamic_sched: bool = False,
    use_single_group_runtime_offsets: bool = False,
    round_dgrad_to_input_dtype: bool = False,
    deterministic: bool = False,
    act_out: bool = False,
) -> DgluOutputs | DgluActOutputs:
    """The fused op through the dispatcher (torch.compile- and CUDA-graph-safe): the
    wrapper's arguments (see the module docstring) and the seed's return order. dprob_tensor
    accumulates in place. act_out (not in the seed): also return prob * GLU(X),
    DgluActOutputs."""
    # Every parameter, in the signature's order (torch.compile traces no locals();
    # tests/cpu/test_torch_op.py checks the order against _PARAMETERS).
    results = torch.ops.dglu.grouped_gemm_dglu(
        a_tensor,
        c_tensor,
        sfa_tensor,
        padded_offsets,
        alpha_tensor,
        beta_tensor,
        prob_tensor,
        dprob_tensor,
        b_tensor,
        sfb_tensor,
        generate_dbias,
        b_ptrs,
        sfb_ptrs,
        n,
        b_dtype,
        b_major,
        norm_const_tensor,
        acc_dtype,
        d_dtype,
        cd_major,
        None if mma_tiler_mn is None else list(mma_tiler_mn),
        None if cluster_shape_mn is None else list(cluster_shape_mn),
        sf_vec_size,
        sf_fp8_dtype_override,
        vector_f32,
        m_aligned,
        discrete_col_sfd,
        act_func,
        float(linear_offset),
        float(geglu_alpha),
        float(glu_clamp_max),
        float(glu_clamp_min),
        float(situ_beta1),
        float(situ_beta2),
        epilogue_op,
        use_dynamic_sched,
        use_single_group_runtime_offsets,
        round_dgrad_to_input_dtype,
        deterministic,
        act_out,
    )
    made = {**dict(zip(OUTPUTS, results)), "dprob_tensor": dprob_tensor}
    outputs = [_produced(made[name]) for name in _RESULTS]  # the families' policy order
    return DgluActOutputs(*outputs, made["act_out_tensor"]) if act_out else DgluOutputs(*outputs)


def _produced(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """``tensor``, or None for the (0,) placeholder of an output the call did not produce."""
    return tensor if tensor.dim() > 1 else None


# The op's parameters, in its schema order: grouped_gemm_dglu's (a test checks the schema).
_PARAMETERS = tuple(inspect.signature(grouped_gemm_dglu).parameters)
