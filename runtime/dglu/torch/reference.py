"""The op's math in plain torch (dense weights), for tests and for running on the CPU.

``grouped_gemm_dglu_reference`` computes what the kernel computes (docs: op_contract.md):
per expert g, R = alpha_g^2 A_g B_g^T and X = beta_g C_g (the saved C scaled, for every
activation), then D (the gate and up gradients of prob * GLU at X, interleaved), dprob +=
R . GLU(X) row sums, dbias = D's per-expert column sums; ``act_out_reference`` is the
act_out variants' prob * GLU(X). ``glu_derivatives`` are the derivatives of
``Activation.forward`` written out (the tests check them against autograd of the forward).
``use_reference_on_cpu`` registers it as the CPU kernel of the custom op: the seam through
which the MLP runs, and is tested, on the CPU.
"""

from __future__ import annotations

import torch

from .activations import Activation
from .layouts import merge_blocked, split_blocked


def glu_derivatives(
    activation: Activation, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """d GLU / d gate and d GLU / d up, elementwise (clamp masks keep equality)."""
    if activation.act_func == "dswiglu":
        s = torch.sigmoid(gate)
        return up * s * (1 + gate * (1 - s)), gate * s
    if activation.act_func == "dgeglu":
        a, high, low = activation.geglu_alpha, activation.glu_clamp_max, activation.glu_clamp_min
        gc, uc = gate.clamp(max=high), up.clamp(low, high)
        s = torch.sigmoid(a * gc)
        d_gate = (uc + activation.linear_offset) * s * (1 + a * gc * (1 - s)) * (gate <= high)
        return d_gate, gc * s * ((up >= low) & (up <= high))
    b1, b2 = activation.situ_beta1, activation.situ_beta2
    s, tg, tu = torch.sigmoid(gate), torch.tanh(gate / b1), torch.tanh(up / b2)
    d_gate = b2 * tu * ((1 - tg * tg) * s + b1 * tg * s * (1 - s))
    return d_gate, b1 * tg * s * (1 - tu * tu)


def grouped_gemm_dglu_reference(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    padded_offsets: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    prob: torch.Tensor,
    activation: Activation,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """D (M, 2N), the dprob increment (M,) and dbias (L, 2N), all in ``compute_dtype``.

    a (M, K[, 1]), b (N, K, L), c (M, 2N[, 1]), prob (M[, 1, 1]); rows past
    padded_offsets[-1] get zeros.
    """
    m = a.shape[0]
    n, _, experts = b.shape
    a2 = a.reshape(m, -1).to(compute_dtype)
    c2 = c.reshape(m, -1).to(compute_dtype)
    p = prob.reshape(m).to(compute_dtype)
    d = torch.zeros(m, 2 * n, dtype=compute_dtype, device=a.device)
    dprob = torch.zeros(m, dtype=compute_dtype, device=a.device)
    dbias = torch.zeros(experts, 2 * n, dtype=compute_dtype, device=a.device)
    ends = padded_offsets.tolist()
    alphas, betas = alpha.tolist(), beta.tolist()
    for g, (start, end) in enumerate(zip([0, *ends], ends)):
        if end == start:
            continue
        rows = slice(start, end)
        r = alphas[g] ** 2 * (a2[rows] @ b[:, :, g].to(compute_dtype).T)
        gate, up = (half * betas[g] for half in split_blocked(c2[rows]))
        d_gate, d_up = glu_derivatives(activation, gate, up)
        rp = r * p[rows, None]
        d[rows] = merge_blocked(rp * d_gate, rp * d_up)
        dprob[rows] = (r * activation.forward(gate, up)).sum(dim=1)
        dbias[g] = d[rows].sum(dim=0)
    return d, dprob, dbias


def act_out_reference(
    c: torch.Tensor,
    padded_offsets: torch.Tensor,
    beta: torch.Tensor,
    prob: torch.Tensor,
    activation: Activation,
    compute_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """prob * GLU(X) (M, N) in ``compute_dtype``, X = beta_g C_g: what an act_out variant
    writes; rows past padded_offsets[-1] get zeros."""
    m = c.shape[0]
    c2 = c.reshape(m, -1).to(compute_dtype)
    p = prob.reshape(m).to(compute_dtype)
    out = torch.zeros(m, c2.shape[1] // 2, dtype=compute_dtype, device=c.device)
    ends = padded_offsets.tolist()
    for g, (start, end) in enumerate(zip([0, *ends], ends)):
        gate, up = (half * beta[g].item() for half in split_blocked(c2[start:end]))
        out[start:end] = p[start:end, None] * activation.forward(gate, up)
    return out


_registered = False


def use_reference_on_cpu() -> None:
    """Make ``torch.ops.dglu.grouped_gemm_dglu`` run the reference on CPU tensors (float32
    arithmetic, outputs in the op's dtypes), for tests and debugging. Idempotent."""
    global _registered
    if _registered:
        return
    from .op import OUTPUTS, grouped_gemm_dglu_op

    @grouped_gemm_dglu_op.register_kernel("cpu")
    def _cpu(a_tensor, c_tensor, sfa_tensor, padded_offsets, alpha_tensor, beta_tensor,
             prob_tensor, dprob_tensor, b_tensor, sfb_tensor, generate_dbias, b_ptrs, sfb_ptrs,
             n, b_dtype, b_major, norm_const_tensor, acc_dtype, d_dtype, cd_major, mma_tiler_mn,
             cluster_shape_mn, sf_vec_size, sf_fp8_dtype_override, vector_f32, m_aligned,
             discrete_col_sfd, act_func, linear_offset, geglu_alpha, glu_clamp_max,
             glu_clamp_min, situ_beta1, situ_beta2, epilogue_op, use_dynamic_sched,
             use_single_group_runtime_offsets, round_dgrad_to_input_dtype, deterministic,
             act_out):
        if b_tensor is None:
            raise NotImplementedError("b_ptrs: the CPU reference needs dense b_tensor")
        if sfa_tensor is not None or norm_const_tensor is not None:
            raise NotImplementedError("sfa_tensor: the CPU reference runs the BF16 contract only")
        activation = Activation(act_func, geglu_alpha, glu_clamp_max, glu_clamp_min,
                                linear_offset, situ_beta1, situ_beta2)
        d, dprob, dbias = grouped_gemm_dglu_reference(
            a_tensor, b_tensor, c_tensor, padded_offsets, alpha_tensor, beta_tensor,
            prob_tensor, activation, compute_dtype=torch.float32,
        )
        dprob_tensor.add_(dprob.view(dprob_tensor.shape))
        d_row = d.to(d_dtype or torch.bfloat16).unsqueeze(-1)
        made = {"d_row_tensor": d_row}
        if generate_dbias:
            made["dbias_tensor"] = dbias.to(torch.bfloat16).unsqueeze(-1)
        if act_out:
            made["act_out_tensor"] = act_out_reference(c_tensor, padded_offsets, beta_tensor, prob_tensor,
                                                       activation, torch.float32).to(torch.bfloat16).unsqueeze(-1)
        # the op's outputs in its order; placeholders, one tensor each (a custom op's outputs must not alias)
        return tuple(made[name] if name in made else d_row.new_empty((0,), dtype=torch.bfloat16) for name in OUTPUTS)

    _registered = True
