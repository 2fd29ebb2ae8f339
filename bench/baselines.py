"""What a user can write in PyTorch today for the same op, and dense cuBLAS of its FLOPs.

The unfused path is torch._grouped_mm (R = A_g B_g^T, bf16 out) followed by the dSwiGLU
epilogue of docs/op_contract.md in plain torch: it produces the same outputs as
the fused op (D in the 32-column gate/input layout, dprob accumulated, dbias per expert).
"""

from __future__ import annotations

from typing import Any

from .inputs import BufferSet

COLUMN_BLOCK = 32  # C and D alternate 32 gate columns and 32 input columns


def grouped_gemm(buffers: BufferSet) -> Any:
    """R (M, N) bf16: each expert's rows of A times its B_g^T, by torch._grouped_mm."""
    import torch

    a = buffers.a.view(buffers.a.shape[0], -1)
    return torch._grouped_mm(a, buffers.b_experts.transpose(1, 2), offs=buffers.padded_offsets)


def dense_mm(buffers: BufferSet) -> Any:
    """(M, K) @ (K, N) by torch.mm: the grouped GEMM's FLOPs as one dense GEMM."""
    import torch

    a = buffers.a.view(buffers.a.shape[0], -1)
    return torch.mm(a, buffers.b_experts[0].t())


def dswiglu_epilogue(
    r: Any,
    c: Any,
    prob: Any,
    alpha: Any,
    beta: Any,
    expert_of_row: Any,
    dprob: Any,
    num_experts: int,
) -> tuple[Any, Any]:
    """D (M, 2N) in C's dtype and dbias (L, 2N) bf16 from R (M, N); adds into ``dprob``.

    ``c`` is (M, 2N), ``prob`` and ``dprob`` hold M values, ``alpha`` and ``beta`` L.
    """
    import torch

    m, n = r.shape
    blocks = c.view(m, n // COLUMN_BLOCK, 2, COLUMN_BLOCK).float()
    row_beta = beta[expert_of_row].view(m, 1)
    gate = blocks[:, :, 0].reshape(m, n) * row_beta
    x = blocks[:, :, 1].reshape(m, n) * row_beta
    scaled_r = r.float() * (alpha[expert_of_row] ** 2).view(m, 1)
    p = prob.view(m, 1)
    s = torch.sigmoid(gate)
    d_gate = scaled_r * p * x * s * (1 + gate * (1 - s))
    d_input = scaled_r * p * gate * s
    d = torch.stack(
        (d_gate.view(m, -1, COLUMN_BLOCK), d_input.view(m, -1, COLUMN_BLOCK)), dim=2
    ).view(m, 2 * n)
    dprob.view(m).add_((scaled_r * gate * s * x).sum(dim=1))
    dbias = torch.zeros(num_experts, 2 * n, dtype=torch.float32, device=r.device)
    dbias.index_add_(0, expert_of_row, d)
    return d.to(c.dtype), dbias.bfloat16()


def unfused(buffers: BufferSet, epilogue: Any = dswiglu_epilogue) -> tuple[Any, Any]:
    """Grouped GEMM, then ``epilogue`` (eager or compiled): (D, dbias); adds into dprob."""
    m = buffers.a.shape[0]
    return epilogue(
        grouped_gemm(buffers),
        buffers.c.view(m, -1),
        buffers.prob,
        buffers.alpha,
        buffers.beta,
        buffers.expert_of_row,
        buffers.dprob,
        buffers.alpha.shape[0],
    )
