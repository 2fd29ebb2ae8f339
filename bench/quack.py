"""The nearest Hopper peer beside dglu in the same run: Dao-AILab's quack ``gemm_dgated``.

quack-kernels (JIT CuTe DSL) is no dependency of dglu: the candidate runs when
``quack.gemm_interface`` imports (bench/README.md, the ``quack_dgated`` row, says how to
bring it to the GPU machine), and is recorded as skipped, with the import's error, when it
does not.

The call is the same problem as the fused op's: the grouped GEMM of A's expert row ranges
(``cu_seqlens_m``, the offsets with a leading 0) by each expert's B_g, then dSwiGLU on
C (M, 2N), scaled by prob per row, with prob's gradient reduced per row. quack also writes
the post-activation (M, N), which dglu does not, and has no dbias, alpha or beta; its
default configuration (``tuned=False``: autotuning takes tens of seconds per shape).
"""

from __future__ import annotations

from typing import Any

from .inputs import BufferSet

ACTIVATION = "swiglu"


def gemm_dgated() -> Any:
    """quack's ``gemm_dgated``, or the reason it cannot run here (a string)."""
    try:
        from quack.gemm_interface import gemm_dgated as quack_gemm_dgated
    except Exception as exc:  # not installed, or its CuTe DSL does not load
        return f"skipped: quack is not importable ({type(exc).__name__}: {exc})"
    return quack_gemm_dgated


def quack_runner(dgated: Any) -> Any:
    """A runner of quack's call on a buffer set (its cu_seqlens_m made once per set)."""
    import torch

    starts: dict[int, Any] = {}

    def run(buffers: BufferSet) -> Any:
        cu_seqlens = starts.get(id(buffers))
        if cu_seqlens is None:
            zero = torch.zeros(1, dtype=torch.int32, device=buffers.padded_offsets.device)
            cu_seqlens = starts[id(buffers)] = torch.cat((zero, buffers.padded_offsets))
        m = buffers.a.shape[0]
        return dgated(
            buffers.a.view(m, -1),
            buffers.b_experts.transpose(1, 2),
            buffers.c.view(m, -1),
            activation=ACTIVATION,
            colvec_scale=buffers.prob.view(m),
            colvec_reduce=True,
            cu_seqlens_m=cu_seqlens,
            tuned=False,
        )

    return run
