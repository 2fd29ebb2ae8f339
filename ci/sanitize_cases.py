"""The calls ci/sanitize.sh runs under compute-sanitizer, and the initcheck probes.

``run``: one small call of every kernel class the installed wheel ships. The classes come
from the installed manifest (dglu/_cubins/manifest.json, read as a file: only the variant
names and keys are used, which manifest v1 and v2 share): a greedy cover picks variants
until every value of every key field (activation and its constants, C and D dtypes, dbias,
tile, weight mode, b_major, scheduler, cluster), every C/D dtype pair and every
weight mode with each b_major appears in one of
them; block-scaled (MXFP8) variants are covered apart, by activation, dtypes, dbias,
weights and scheduler, each call checked
by tests/gpu/test_blockscaled_gpu.py's case runner; ``--all`` takes every variant; ``--round-dgrad`` runs the BF16 calls with
round_dgrad_to_input_dtype=True (exact GEMM data: the rounding path of the MMA warpgroups,
which read offsets and alpha). Each call goes through the GPU suite's harness
(tests/gpu/harness.py), so it is also checked element by element; the process exits
non-zero when a check fails. The class API is used: its D_row is NaN-filled by torch
before the call, so initcheck judges what the kernels read (A, B, C, offsets, scales, the
workspaces), not torch's reads of a D that only TMA stores wrote (docs/sanitizer.md).

``probe NAME``: one call built to answer a question about initcheck (docs/sanitizer.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "gpu"))

import dglu  # noqa: E402
import torch  # noqa: E402
from dglu.contract.keys import ARCH_OF_CAPABILITY  # noqa: E402
from configs import SHIPPED, Config, key_fields  # noqa: E402
from harness import Case, case_inputs, class_op, execute, execute_arguments, run_case, weight_arguments  # noqa: E402
from inputs import Shape, initial_dbias, initial_dprob, poisoned_d  # noqa: E402

SEED = 20260601
# two m-tiles per filled expert (a 2x1 cluster needs pairs), an empty expert between them,
# two k-tiles, rows past valid_m
SMALL = Shape(n=128, k=128, expert_rows=(256, 0, 256), extra_rows=64)
# block-scaled: K and 2N not multiples of 128, an empty expert
BLOCK_SCALED_SHAPE = Shape(n=96, k=96, expert_rows=(256, 0, 256))
COVERED_FIELDS = (
    "act_func", "act_params", "c_dtype", "d_dtype", "dbias", "tile", "weight_mode",
    "b_major", "scheduler", "cluster", "c_d_dtypes", "weights", "reduction", "act_out",
)


def installed_variants() -> list[dict]:
    """The installed wheel's variants of this device's architecture, as manifest.json lists
    them (name, key, ...): a call runs only the cubins of the device it runs on."""
    arch = ARCH_OF_CAPABILITY[torch.cuda.get_device_capability()]
    path = Path(dglu.__file__).parent / "_cubins" / "manifest.json"
    return [v for v in json.loads(path.read_text())["variants"] if v["key"]["arch"] == arch]


def features(key: dict) -> set[tuple[str, object]]:
    """(field, value) pairs of a variant key that the cover must reach."""
    values = {
        "act_func": key["act_func"],
        "act_params": json.dumps(key["act_params"], sort_keys=True),
        "c_dtype": key["c_dtype"],
        "d_dtype": key["d_dtype"],
        "dbias": key["dbias"],
        "tile": (key["tile_m"], key["tile_n"]),
        "weight_mode": key["weight_mode"],
        "b_major": key["b_major"],
        "scheduler": key["scheduler"],
        "cluster": (key["cluster_m"], key["cluster_n"]),
        "c_d_dtypes": (key["c_dtype"], key["d_dtype"]),
        "weights": (key["weight_mode"], key["b_major"]),
        # the reductions of dprob and dbias (deterministic variants through their own
        # finishers): each scheduler, weight mode, dbias setting, tile and cluster is its
        # own kernel class
        "reduction": (key["deterministic"], key["scheduler"], key["weight_mode"], key["dbias"],
                      (key["tile_m"], key["tile_n"]), (key["cluster_m"], key["cluster_n"])),
        "act_out": (key["act_out"], key["act_func"]),
    }
    return {(field, values[field]) for field in COVERED_FIELDS}


BLOCK_SCALED_FIELDS = ("act_func", "ab_dtype", "c_dtype", "d_dtype", "dbias", "weights", "scheduler")


def block_scaled_features(key: dict) -> set[tuple[str, object]]:
    """(field, value) pairs of a block-scaled variant key that the cover must reach."""
    values = {**key, "weights": (key["weight_mode"], key["b_major"])}
    return {(field, values[field]) for field in BLOCK_SCALED_FIELDS}


def is_block_scaled(variant: dict) -> bool:
    return variant["key"]["ab_dtype"] != "bf16"


def cover(variants: list[dict]) -> list[dict]:
    """Variants, in manifest order of first pick, until every feature of any variant is in
    one; the BF16 and the block-scaled ones each by their own features."""
    chosen = []
    for group, featured in (
        ([v for v in variants if not is_block_scaled(v)], features),
        ([v for v in variants if is_block_scaled(v)], block_scaled_features),
    ):
        missing = set().union(set(), *(featured(v["key"]) for v in group))
        while missing:
            best = max(group, key=lambda v: len(featured(v["key"]) & missing))
            chosen.append(best)
            missing -= featured(best["key"])
    return chosen


def config_for(variant: dict) -> Config:
    """The GPU suite's Config that calls ``variant`` (every shipped variant has one)."""
    key = variant["key"]
    fields = (
        key["act_func"],
        tuple(sorted(key["act_params"].items())),
        key["c_dtype"],
        key["d_dtype"],
        key["dbias"],
        (key["tile_m"], key["tile_n"]),
        key["weight_mode"],
        key["b_major"],
        key["scheduler"],
        (key["cluster_m"], key["cluster_n"]),
        key["deterministic"],
    )
    for config in SHIPPED:
        if key_fields(config) == fields:
            return config
    raise SystemExit(
        f"variant {variant['name']} has no Config in tests/gpu/configs.py SHIPPED; "
        "add it there so the GPU suite and the sanitizer can call it"
    )


def run_block_scaled_case(variant: dict, api: str) -> None:
    """One checked call of a block-scaled variant (tests/gpu/test_blockscaled_gpu.py)."""
    import test_blockscaled_gpu as mx
    from blockscaled_configs import SHIPPED as MX_SHIPPED
    from blockscaled_configs import key_fields as mx_key_fields

    key = variant["key"]
    fields = (
        key["ab_dtype"], key["c_dtype"], key["d_dtype"], key["act_func"], tuple(sorted(key["act_params"].items())),
        key["dbias"], key["weight_mode"], key["b_major"], key["scheduler"], (key["tile_m"], key["tile_n"]),
        (key["cluster_m"], key["cluster_n"]), key["deterministic"], key["act_out"],
    )
    config = next((c for c in MX_SHIPPED if mx_key_fields(c) == fields), None)
    if config is None:
        raise SystemExit(f"variant {variant['name']} has no MxConfig in tests/gpu/blockscaled_configs.py SHIPPED")
    case = mx.MxCase(config=config, shape=BLOCK_SCALED_SHAPE, seed=SEED, api=api)
    mx.run_case(case)
    print(f"sanitize case ok: {variant['name']} ({case.describe()})", flush=True)


def run_cases(variants: Iterable[dict], api: str, round_dgrad: bool = False) -> None:
    for variant in variants:
        if is_block_scaled(variant):
            run_block_scaled_case(variant, api)
            continue
        case = Case(config=config_for(variant), shape=SMALL, seed=SEED, api=api, exact_gemm=round_dgrad,
                    round_dgrad=round_dgrad and not variant["key"]["act_out"])
        if variant["key"]["act_out"]:
            run_act_out_case(case)
        else:
            run_case(case)
        print(f"sanitize case ok: {variant['name']} ({case.describe()})", flush=True)


def run_act_out_case(case: Case) -> None:
    """An act_out variant through the class API (act_out=True): the GPU suite's harness has
    no act_out output, so D and dprob are checked against the variant without it bit for
    bit, dbias (float atomics) within one bf16 step (tests/gpu/test_act_out_gpu.py checks
    act_out's values). Every output the kernels write is the caller's, filled by torch
    first (NaN, or dbias's start values), so that initcheck judges the kernels' reads, not
    torch's reads of a D and act_out that only TMA stores wrote (docs/sanitizer.md)."""
    config, x = case.config, case_inputs(case)
    runs = {}
    for act_out in (False, True):
        d_row = poisoned_d(SMALL.m, SMALL.n, config.d_dtype)
        dprob = initial_dprob(SMALL.m, SEED)
        dbias = initial_dbias(SMALL.l, SMALL.n, SEED) if config.dbias else None
        act = torch.full((SMALL.m, SMALL.n, 1), float("nan"), dtype=torch.bfloat16, device="cuda")
        op = class_op(config, x, d_row, dprob, dbias, act_out=act_out)
        op.execute(**execute_arguments(x, d_row, dprob, dbias), **weight_arguments(x, "execute"),
                   **({"activation_tensor": act} if act_out else {}))
        runs[act_out] = (d_row, dprob, dbias, act)
    torch.cuda.synchronize()
    valid = SMALL.ends[-1]
    (plain_d, plain_dprob, plain_dbias, _), (d_row, dprob, dbias, act) = runs[False], runs[True]
    same = torch.equal(d_row[:valid], plain_d[:valid]) and torch.equal(dprob, plain_dprob)
    if config.dbias:
        same = same and torch.allclose(dbias.float(), plain_dbias.float(), rtol=2**-7, atol=0)
    if not (same and act[:valid].isfinite().all()):
        raise SystemExit(f"act_out case {case.describe()}: outputs differ from the plain variant's")


def _probe_call(d_row: torch.Tensor, config: Config, shape: Shape, c: torch.Tensor | None = None):
    """One class-API call writing ``d_row`` (C replaced by ``c`` when given); returns D_row."""
    x = case_inputs(Case(config=config, shape=shape, seed=SEED))
    if c is not None:
        x = replace(x, c=c)
    dprob = initial_dprob(shape.m, SEED, "cuda")
    execute(class_op(config, x, d_row, dprob, None, config.tile), x, d_row, dprob, None)
    torch.cuda.synchronize()
    return d_row


PROBE_SHAPE = Shape(n=256, k=128, expert_rows=(1024, 1024))
PROBE_CONFIG = Config("dswiglu", torch.bfloat16, torch.bfloat16, False, (128, 128))


def probe(name: str) -> None:
    """Probes (run each alone under initcheck; docs/sanitizer.md has the results):

    - ``tma-store-fresh``: D_row is the process's first CUDA allocation (torch.empty:
      memory no kernel has written), every row valid, so the kernel's TMA stores write all
      of it; then torch reads all of it. A report means initcheck does not see TMA stores.
    - ``tma-store-zeroed``: the same with D_row zeroed by torch first (the control).
    - ``tma-load-fresh``: C is the first allocation, never written (torch.empty); the
      kernel reads it only by TMA loads. No report means initcheck does not see TMA loads.
    - ``rows-past-valid-m``: the wrapper's D_row (torch.empty inside dglu) with 64 rows
      past valid_m, which the op leaves unwritten by contract; torch reads all of it.
    """
    m, width = PROBE_SHAPE.m, 2 * PROBE_SHAPE.n
    if name in ("tma-store-fresh", "tma-store-zeroed"):
        make = torch.empty if name == "tma-store-fresh" else torch.zeros
        d_row = make((m, width, 1), dtype=torch.bfloat16, device="cuda")
        _probe_call(d_row, PROBE_CONFIG, PROBE_SHAPE)
        twin = torch.full_like(d_row, float("nan"))
        _probe_call(twin, PROBE_CONFIG, PROBE_SHAPE)
        same = bool((twin == d_row).all())
        print(f"probe {name}: D_row fully written by the kernel (equal to a NaN-filled twin's): {same}")
        print(f"probe {name}: torch reads D_row: sum {d_row.float().sum().item():.6g}")
    elif name == "tma-load-fresh":
        c = torch.empty((m, width, 1), dtype=torch.bfloat16, device="cuda")
        d_row = torch.zeros((m, width, 1), dtype=torch.bfloat16, device="cuda")
        _probe_call(d_row, PROBE_CONFIG, PROBE_SHAPE, c=c)
        print(f"probe {name}: the kernel read an unwritten C by TMA (D sum {d_row.float().sum().item():.6g})")
    elif name == "rows-past-valid-m":
        shape = Shape(n=PROBE_SHAPE.n, k=PROBE_SHAPE.k, expert_rows=PROBE_SHAPE.expert_rows, extra_rows=64)
        x = case_inputs(Case(config=PROBE_CONFIG, shape=shape, seed=SEED))
        out = dglu.grouped_gemm_dglu_wrapper_sm90(
            a_tensor=x.a, b_tensor=x.b, c_tensor=x.c, padded_offsets=x.padded_offsets,
            alpha_tensor=x.alpha, beta_tensor=x.beta, prob_tensor=x.prob,
            dprob_tensor=initial_dprob(shape.m, SEED, "cuda"), act_func="dswiglu",
        )
        torch.cuda.synchronize()
        d_row = out["d_row_tensor"]
        print(f"probe {name}: valid rows read: {d_row[: shape.valid_m].float().sum().item():.6g}")
        print(f"probe {name}: all rows read: {d_row.float().nan_to_num().sum().item():.6g}")
    else:
        raise SystemExit(f"unknown probe {name!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the variants `run` calls")
    run = commands.add_parser("run", help="one small checked call per kernel class")
    for sub in (listing, run):
        sub.add_argument("--all", action="store_true", help="every installed variant, not a cover")
        sub.add_argument("--round-dgrad", action="store_true",
                         help="BF16 calls with round_dgrad_to_input_dtype=True (act_out ones without)")
    run.add_argument("--api", choices=("class", "wrapper"), default="class")
    probing = commands.add_parser("probe", help="one initcheck probe")
    probing.add_argument(
        "name", choices=("tma-store-fresh", "tma-store-zeroed", "tma-load-fresh", "rows-past-valid-m")
    )
    args = parser.parse_args()
    if args.command == "probe":
        probe(args.name)
        return
    variants = installed_variants()
    chosen = variants if args.all else cover(variants)
    if args.command == "list":
        for variant in chosen:
            print(variant["name"])
    else:
        run_cases(chosen, args.api, args.round_dgrad)


if __name__ == "__main__":
    main()
