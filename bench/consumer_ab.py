"""A/B timing, in one process, of dglu's fused op with each consumer's kernel (key field
``consumer``) against torch._grouped_mm on the bench shapes.

``python -m bench.consumer_ab CONSUMERS [SHAPES] [ROUNDS] [det]``: CONSUMERS and SHAPES
comma-separated (a consumer "name:c2" runs on a 2x1 cluster, "name:t64" on the 128x64
tile, "name:t256" on the 128x256 tile, "name:tMxN" on the MxN tile, "name:c2t64" both,
"name@DIR" only from the artifact directory DIR, so
that two builds of one variant name can be timed side by side; "dispatch": every
installed variant, the shipped selection's choice; SHAPES empty: all). The
variants are the installed wheel's and $DGLU_CUBIN_PATH's; each op is built while the
selection sees only one consumer's variants (dglu.call.installed_variants filtered: no
call argument chooses a consumer, so this is a measurement, not an API). Per shape: the
harness's gate (bench.fused.agreement: every element checked) per kernel, then ROUNDS
rounds timing the GEMM and each kernel in turn (bench.timing.time_calls); ``det`` adds
each consumer's deterministic variant. Prints one JSON line per shape (issue 25's runs:
bench/results/2026-12-01-wt-v3-ab.txt).

The ops share the runtime's pooled workspaces. A build that leaves a ``by_consumer``
workspace non-zero (a timing-only edit that skips the dbias finish, say) poisons it for the
next op that uses it, on this shape or a later one: from then on the gates mean nothing;
read only the times (or run such a build alone)."""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

import dglu
import dglu.call
from dglu.errors import VariantNotFoundError
from dglu.manifest import SearchEntry, installed_variants, load_manifests, merged_variants

from .baselines import grouped_gemm
from .fused import agreement, build_op, run_fused
from .inputs import make_buffer_sets
from .quack import gemm_dgated, quack_runner
from .shapes import select_shapes
from .timing import time_calls

BUDGET_MS = 80.0  # time_calls budget per candidate per round


TILES = {"t64": (128, 64), "t256": (128, 256)}
DISPATCH = "dispatch"  # the label of the shipped selection (no consumer filter)


def tile_of(token: str) -> tuple[int, int] | None:
    """The mma_tiler_mn of a label's tile token: "t64", "t256", "tMxN", or "" (open)."""
    if token in TILES or not token:
        return TILES.get(token)
    m, _, n = token.removeprefix("t").partition("x")
    return int(m), int(n)


def candidates(consumer: str, directory: str):
    """The variants of ``consumer``: the installed ones, or those of artifact ``directory``."""
    if not directory:
        return tuple(v for v in installed_variants() if v.key.consumer == consumer)
    entry = SearchEntry(Path(directory), "DGLU_CUBIN_PATH", required=True)
    variants, _ = merged_variants(load_manifests([entry]))
    return tuple(v for v in variants if v.key.consumer == consumer)


def op_for(label: str, samples, det: bool = False):
    """bench.fused.build_op's op (``label`` "name[:[c2][t64|t256]][@DIR]", see the module
    docstring)."""
    label, _, directory = label.partition("@")
    consumer, _, shape = label.partition(":")
    if consumer == DISPATCH:
        return build_op(samples, deterministic=det)
    chosen = candidates(consumer, directory)
    dglu.call.installed_variants = lambda arch=None: tuple(v for v in chosen if arch in (None, v.key.arch))
    try:
        if not shape:
            return build_op(samples, deterministic=det)
        op = dglu.GroupedGemmDgluSm90(
            sample_a=samples.a, sample_c=samples.c, sample_d_row=samples.d_row,
            sample_padded_offsets=samples.padded_offsets, sample_alpha=samples.alpha,
            sample_beta=samples.beta, sample_prob=samples.prob, sample_dprob=samples.dprob,
            sample_dbias=samples.dbias, sample_b=samples.b, act_func="dswiglu", deterministic=det,
            cluster_shape_mn=(2, 1) if shape.startswith("c2") else (1, 1),
            mma_tiler_mn=tile_of(shape.removeprefix("c2")),
        )
        op.compile()
        return op
    finally:
        dglu.call.installed_variants = installed_variants


def main() -> None:
    consumers = sys.argv[1].split(",")
    names = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    deterministic = "det" in sys.argv[4:]
    for shape in select_shapes(names):
        t0 = time.time()
        sets = make_buffer_sets(shape, torch.device("cuda"), seed=0)
        record = {"shape": shape.name}
        calls = {"gemm": [lambda s=s: grouped_gemm(s) for s in sets]}
        for consumer in consumers:
            if consumer == "quack":  # bench.quack's gemm_dgated, when quack imports
                dgated = gemm_dgated()
                if isinstance(dgated, str):
                    record["quack"] = dgated
                else:
                    runner = quack_runner(dgated)
                    calls["quack"] = [lambda s=s: runner(s) for s in sets]
                continue
            for det in (False, True) if deterministic and ":" not in consumer else (False,):
                label = consumer + ("_det" if det else "")
                try:
                    op = op_for(consumer, sets[0], det)
                except VariantNotFoundError:  # none of this consumer for the call
                    record[label] = "no variant"
                    continue
                record[label + "_variant"] = op.variant_name
                record[label + "_ok"] = agreement(op, sets[0])["ok"]
                calls[label] = [lambda s=s, op=op: run_fused(op, s) for s in sets]
        times = {label: [] for label in calls}
        for _ in range(rounds):
            for label, runners in calls.items():
                times[label].append(time_calls(runners, BUDGET_MS).median_ms)
        gemm = statistics.median(times["gemm"])
        record["gemm_ms"] = round(gemm, 4)
        for label in calls:
            if label != "gemm":
                ms = statistics.median(times[label])
                record[label + "_ms"] = round(ms, 4)
                record[label + "_over_gemm"] = round(ms / gemm, 3)
        record["rounds_ms"] = {label: [round(t, 4) for t in ts] for label, ts in times.items()}
        record["wall_s"] = round(time.time() - t0, 1)
        print("AB:", json.dumps(record), flush=True)
        del sets, calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
