"""The op's math in plain torch (dense weights), for tests and for running on the CPU.

``grouped_gemm_dglu_reference`` computes what the kernel computes (docs: op_contract.md):
per expert g, R = alpha_g^2 A_g B_g^T, then D (the gate and up gradients of prob * GLU at
the saved C, interleaved), dprob += R . GLU(C) row sums, dbias = D's per-expert column
sums. The derivative is taken by autograd of ``Activation.forward``, independently of the
kernel's hand-written formulas (torch's clamp keeps the gradient at equality, like the
kernel). dswiglu scales C by beta_g first, the other activations ignore beta.
``use_reference_on_cpu`` registers it as the CPU kernel of the custom op: the seam through
which the MLP runs, and is tested, on the CPU.
"""

from __future__ import annotations

import torch

from .activations import Activation
from .layouts import merge_blocked, split_blocked


def _glu_gradients(
    activation: Activation, gate: torch.Tensor, up: torch.Tensor, r: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """d(R . GLU)/d(gate), d(R . GLU)/d(up) and the row sums of R * GLU (no prob)."""
    with torch.enable_grad():
        gate = gate.detach().requires_grad_(True)
        up = up.detach().requires_grad_(True)
        glu = activation.forward(gate, up)
        d_gate, d_up = torch.autograd.grad(glu, (gate, up), grad_outputs=r)
    return d_gate, d_up, (r * glu.detach()).sum(dim=1)


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
        gate, up = split_blocked(c2[rows])
        if activation.act_func == "dswiglu":
            gate, up = gate * betas[g], up * betas[g]
        d_gate, d_up, dprob[rows] = _glu_gradients(activation, gate, up, r)
        d[rows] = p[rows, None] * merge_blocked(d_gate, d_up)
        dbias[g] = d[rows].sum(dim=0)
    return d, dprob, dbias


_registered = False


def use_reference_on_cpu() -> None:
    """Make ``torch.ops.dglu.grouped_gemm_dglu`` run the reference on CPU tensors (float32
    arithmetic, outputs in the op's dtypes), for tests and debugging. Idempotent."""
    global _registered
    if _registered:
        return
    from .op import grouped_gemm_dglu_op

    @grouped_gemm_dglu_op.register_kernel("cpu")
    def _cpu(a_tensor, c_tensor, padded_offsets, alpha_tensor, beta_tensor, prob_tensor,
             dprob_tensor, b_tensor, b_ptrs, n, b_dtype, b_major, act_func, geglu_alpha,
             glu_clamp_max, glu_clamp_min, linear_offset, situ_beta1, situ_beta2,
             generate_dbias, use_dynamic_sched, mma_tiler_mn, cluster_shape_mn, d_dtype):
        if b_tensor is None:
            raise NotImplementedError("b_ptrs: the CPU reference needs dense b_tensor")
        activation = Activation(act_func, geglu_alpha, glu_clamp_max, glu_clamp_min,
                                linear_offset, situ_beta1, situ_beta2)
        d, dprob, dbias = grouped_gemm_dglu_reference(
            a_tensor, b_tensor, c_tensor, padded_offsets, alpha_tensor, beta_tensor,
            prob_tensor, activation, compute_dtype=torch.float32,
        )
        dprob_tensor.add_(dprob.view(dprob_tensor.shape))
        d_row = d.to(d_dtype or torch.bfloat16).unsqueeze(-1)
        outputs = [d_row]
        if generate_dbias:
            outputs.append(dbias.to(torch.bfloat16).unsqueeze(-1))
        return outputs

    _registered = True
