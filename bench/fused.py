"""dglu's fused op on a buffer set, through the class API (default dispatch), and the gate
before timing: every output element against the GPU test suite's float64 reference and
tolerance model (tests/gpu/reference.py, tests/gpu/checks.py), so that one wrong tile
fails it; the relative L2 differences from the unfused PyTorch path are recorded beside."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from .baselines import unfused
from .inputs import BufferSet

SUITE = Path(__file__).resolve().parent.parent / "tests" / "gpu"


def build_op(samples: BufferSet, deterministic: bool = False) -> Any:
    """A compiled (loaded) dglu.GroupedGemmDgluSm90 for dswiglu with dprob and dbias;
    ``deterministic`` selects its variant without float atomics (dprob and dbias reduced
    in a fixed order)."""
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
        deterministic=deterministic,
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


def _suite():
    """The GPU suite's reference and checks modules (they import each other by name)."""
    if str(SUITE) not in sys.path:
        sys.path.insert(0, str(SUITE))
    import checks
    import reference

    return checks, reference


def element_check(fused: BufferSet, before: BufferSet) -> str | None:
    """None when every element of the op's D, dprob and dbias (in ``fused``, computed from
    ``before``'s dprob and dbias) is within the suite's tolerance; else what failed."""
    checks, reference = _suite()
    ends = fused.padded_offsets.tolist()
    expected = reference.dglu_backward(
        fused.a, fused.b, fused.c, ends, fused.alpha, fused.beta, fused.prob, "dswiglu", {}
    )
    n = fused.b.shape[0]
    context = f"bench gate, N{n} K{fused.a.shape[1]} experts {fused.padded_offsets.numel()}"
    try:
        checks.check_d(fused.d_row, expected, context)
        checks.check_dprob(fused.dprob, before.dprob, expected, n, context)
        checks.check_dbias(fused.dbias, before.dbias, fused.d_row, ends, context)
    except AssertionError as failure:
        return str(failure)
    return None


def agreement(op: Any, buffers: BufferSet) -> dict[str, Any]:
    """The gate before timing: the op into fresh outputs (D NaN-filled, dprob and dbias
    zeroed) from ``buffers``' inputs, every element checked (ok, and ``failure`` naming
    the first element out of tolerance when not); plus, for the record, the relative L2
    differences of D, dprob and dbias from the unfused path."""
    import torch

    before = replace(
        buffers, dprob=torch.zeros_like(buffers.dprob), dbias=torch.zeros_like(buffers.dbias)
    )
    fused = replace(
        before,
        d_row=torch.full_like(buffers.d_row, float("nan")),
        dprob=before.dprob.clone(),
        dbias=before.dbias.clone(),
    )
    run_fused(op, fused)
    failure = element_check(fused, before)
    reference = replace(buffers, dprob=torch.zeros_like(buffers.dprob))
    d, dbias = unfused(reference)
    m = buffers.a.shape[0]
    return {
        "d_rel_l2": relative_l2(fused.d_row.view(m, -1), d),
        "dprob_rel_l2": relative_l2(fused.dprob, reference.dprob),
        "dbias_rel_l2": relative_l2(fused.dbias.view(dbias.shape), dbias),
        "check": "every element within tests/gpu/checks.py's tolerances",
        "ok": failure is None,
        **({"failure": failure} if failure else {}),
    }
