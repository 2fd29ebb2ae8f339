"""dglu's fused op on a buffer set, through the class API (default dispatch), and a check
of its outputs against the unfused PyTorch path on the same inputs."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from .baselines import unfused
from .inputs import BufferSet

# ||fused - unfused|| / ||unfused|| allowed per output: both round R or D to bf16, so they
# differ by a few 1e-3; a wrong kernel is off by O(1).
AGREEMENT_TOLERANCE = 2e-2


def build_op(samples: BufferSet) -> Any:
    """A compiled (loaded) dglu.GroupedGemmDgluSm90 for dswiglu with dprob and dbias."""
    import dglu

    op = dglu.GroupedGemmDgluSm90(
        sample_a=samples.a,
        sample_c=samples.c,
        sample_d_row=samples.d_row,
        sample_padded_offsets=samples.padded_offsets,
        sample_alpha=samples.alpha,
        sample_beta=samples.beta,
        sample_prob=samples.prob,
        sample_dprob=samples.dprob,
        sample_dbias=samples.dbias,
        sample_b=samples.b,
        act_func="dswiglu",
    )
    op.compile()
    return op


def run_fused(op: Any, buffers: BufferSet) -> None:
    """One call of the op: writes d_row, adds into dprob and dbias."""
    op.execute(
        a_tensor=buffers.a,
        c_tensor=buffers.c,
        d_row_tensor=buffers.d_row,
        padded_offsets=buffers.padded_offsets,
        alpha_tensor=buffers.alpha,
        beta_tensor=buffers.beta,
        prob_tensor=buffers.prob,
        dprob_tensor=buffers.dprob,
        dbias_tensor=buffers.dbias,
        b_tensor=buffers.b,
    )


def relative_l2(got: Any, want: Any) -> float:
    """||got - want|| / ||want|| in float64 (NaN when either holds a NaN)."""
    got, want = got.double().flatten(), want.double().flatten()
    norm = want.norm().item()
    return (got - want).norm().item() / norm if norm else (got - want).norm().item()


def agreement(op: Any, buffers: BufferSet) -> dict[str, Any]:
    """Relative L2 differences of D, dprob and dbias between the op and the unfused path,
    each computed into fresh outputs from ``buffers``' inputs; ok when all are within
    AGREEMENT_TOLERANCE (NaN never is)."""
    import torch

    fused = replace(
        buffers,
        d_row=torch.full_like(buffers.d_row, float("nan")),
        dprob=torch.zeros_like(buffers.dprob),
        dbias=torch.zeros_like(buffers.dbias),
    )
    run_fused(op, fused)
    reference = replace(buffers, dprob=torch.zeros_like(buffers.dprob))
    d, dbias = unfused(reference)
    m = buffers.a.shape[0]
    differences = {
        "d_rel_l2": relative_l2(fused.d_row.view(m, -1), d),
        "dprob_rel_l2": relative_l2(fused.dprob, reference.dprob),
        "dbias_rel_l2": relative_l2(fused.dbias.view(dbias.shape), dbias),
    }
    ok = all(math.isfinite(v) and v <= AGREEMENT_TOLERANCE for v in differences.values())
    return {**differences, "tolerance": AGREEMENT_TOLERANCE, "ok": ok}
