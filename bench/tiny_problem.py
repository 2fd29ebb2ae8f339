"""The small problems the host-side measurements use, and the wrapper's arguments for a
buffer set."""

from __future__ import annotations

from typing import Any

from .inputs import BufferSet
from .shapes import Shape

# Launch cost dominates: one 128-row tile per expert and N tile, K in one step or two.
TINY = Shape("tiny", n=64, k=64, expert_rows=(256, 256))
# Uneven experts, one of them empty, for the CUDA-graph replay check.
GRAPH_CHECK = Shape("graph-check", n=128, k=256, expert_rows=(256, 0, 512, 256))


def wrapper_arguments(buffers: BufferSet) -> dict[str, Any]:
    """Keyword arguments of dglu.grouped_gemm_dglu_wrapper_sm90 for ``buffers``:
    dswiglu with dprob and dbias, default dispatch."""
    return {
        "a_tensor": buffers.a,
        "c_tensor": buffers.c,
        "b_tensor": buffers.b,
        "padded_offsets": buffers.padded_offsets,
        "alpha_tensor": buffers.alpha,
        "beta_tensor": buffers.beta,
        "prob_tensor": buffers.prob,
        "dprob_tensor": buffers.dprob,
        "act_func": "dswiglu",
        "generate_dbias": True,
    }
