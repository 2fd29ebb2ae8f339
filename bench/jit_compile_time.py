"""``python -m bench.jit_compile_time``: what a CuTe DSL JIT user pays at start-up.

In fresh processes on this (CPU-only) machine, time the import of the DSL and then
codegen.kernels.compile_variant of the spec file's variant that dglu's default dispatch
serves the benchmark's call with (dswiglu, dprob and dbias, bf16). Where cuDNN FE is
installed (the build extra), also what its users pay on Blackwell for the same call:
importing it and its own compile() of the BF16 kernel for one (N, K, L) (CUDNN_FE_CALL),
device queries stubbed (bench.cudnn_fe). Writes jit_compile_time.json into --out and
prints one summary line. Needs the build environment (nvidia-cutlass-dsl, pyyaml, torch for
cuDNN FE); run from the repo root.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SPECS = REPO_ROOT / "kernel_specs" / "default.yaml"
DEFAULT_OUT = Path(__file__).resolve().parent / "out"
JSON_NAME = "jit_compile_time.json"
# The measurement kept in the repo, which the GPU harness reports beside dglu's host costs.
COMMITTED = Path(__file__).resolve().parent / "results" / JSON_NAME
REFERENCE_FIELDS = (
    "date",
    "commit",
    "machine",
    "variant",
    "median_dsl_import_s",
    "median_compile_s",
    "median_total_s",
)
# What the benchmark's call asks of dispatch: every key field but the tile (dglu's API asks
# for 1x1 clusters and static scheduling unless told otherwise).
BENCH_REQUEST = {
    "arch": "sm_90a",
    "ab_dtype": "bf16",
    "c_dtype": "bf16",
    "d_dtype": "bf16",
    "act_func": "dswiglu",
    "act_params": (),
    "dbias": True,
    "weight_mode": "dense",
    "b_major": "k",
    "cluster_m": 1,
    "cluster_n": 1,
    "scheduler": "static",
}


def default_variant(variants: list[Any]) -> Any:
    """The spec variant dglu's default dispatch serves the benchmark's call with, chosen by
    the runtime's own rule (dglu.selection, imported from runtime/: it needs no GPU)."""
    runtime = str(REPO_ROOT / "runtime")
    if runtime not in sys.path:
        sys.path.insert(0, runtime)
    from dglu.errors import VariantNotFoundError
    from dglu.contract.schema import VariantKey
    from dglu.selection import VariantRequest, select_variant

    by_name = sorted(variants, key=lambda variant: variant.name)  # a manifest's order
    installed = [
        SimpleNamespace(
            name=variant.name,
            directory="(spec file, not built)",  # select_variant logs where its choice lives
            key=VariantKey(
                **{**variant.key, "act_params": tuple(sorted(variant.key["act_params"].items()))}
            ),
        )
        for variant in by_name
    ]
    try:
        chosen = select_variant(installed, VariantRequest(**BENCH_REQUEST))
    except VariantNotFoundError as exc:
        raise ValueError(f"--specs: no variant serves the benchmark's call: {exc}") from None
    return by_name[installed.index(chosen)]


def measure_in_this_process(specs: Path) -> dict[str, Any]:
    """Seconds to import the DSL, import dglu's kernels, and compile the default variant.

    Must run first thing in a fresh process: the DSL import is only paid once.
    """
    start = time.perf_counter()
    import cutlass.cute  # noqa: F401 (imported to time the DSL's import)

    dsl_imported = time.perf_counter()
    from dglu_build.build_key import SYMBOL_PREFIX
    from dglu_build.kernels import compile_variant
    from dglu_build.specs import load_specs

    kernels_imported = time.perf_counter()
    variant = default_variant(load_specs(specs))
    chosen = time.perf_counter()
    compiled = compile_variant(variant.key, SYMBOL_PREFIX + variant.name)
    done = time.perf_counter()
    return {
        "variant": variant.name,
        "cubin_bytes": len(compiled.cubin),
        "dsl_import_s": dsl_imported - start,
        "kernels_import_s": kernels_imported - dsl_imported,
        "compile_s": done - chosen,
        "total_s": (done - chosen) + (kernels_imported - start),
    }


# cuDNN FE's compile of the benchmark's call on Blackwell: its default 256x256 tile on a 2x1
# cluster, for one problem's N, K and L (it compiles one cubin per (N, K, L)).
CUDNN_FE_CALL = {"arch": "sm_100a", "n": 2048, "k": 4096, "experts": 8}


def measure_cudnn_fe_in_this_process() -> dict[str, Any]:
    """Seconds to import cuDNN FE's BF16 dGLU API (with the DSL and torch) and run its
    compile() for CUDNN_FE_CALL; first thing in a fresh process."""
    start = time.perf_counter()
    import torch  # noqa: F401 (its users' framework: imported before the API, timed apart)

    torch_imported = time.perf_counter()
    import cudnn.gemm.cutedsl.grouped.dglu._bf16_api  # noqa: F401

    from bench.cudnn_fe import cudnn_fe_compile
    from dglu_build.kernels.sm100_bf16.config import Config

    imported = time.perf_counter()
    key = {**BENCH_REQUEST, "act_params": {}, "arch": CUDNN_FE_CALL["arch"], "experts": CUDNN_FE_CALL["experts"],
           "tile_m": 256, "tile_n": 256, "cluster_m": 2}
    compiled = cudnn_fe_compile(Config.from_key(key), CUDNN_FE_CALL["n"], CUDNN_FE_CALL["k"])
    return {
        "variant": f"cuDNN FE GroupedGemmDgluBf16API {CUDNN_FE_CALL}",
        "cubin_bytes": len(compiled.cubin),
        "import_s": imported - torch_imported,
        "compile_s": compiled.seconds,
        "total_s": imported - torch_imported + compiled.seconds,
        "torch_import_s": torch_imported - start,
    }


def measure_fresh(specs: Path, child: str = "--child") -> dict[str, Any]:
    """A measurement in a new Python process (this interpreter, repo root): ``--child``
    measure_in_this_process, ``--child-cudnn`` measure_cudnn_fe_in_this_process."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.jit_compile_time", child, "--specs", str(specs)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the measuring process exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over ``runs`` of every timed figure, with the runs themselves."""
    timed = [name for name in runs[0] if name.endswith("_s")]
    return {
        "variant": runs[0]["variant"],
        "cubin_bytes": runs[0]["cubin_bytes"],
        **{f"median_{name}": statistics.median(run[name] for run in runs) for name in timed},
        "runs": runs,
    }


def read_reference(path: Path) -> dict[str, Any]:
    """The headline figures of a jit_compile_time.json, or why there are none."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {
            "missing": f"{path}: {exc}; make it with python -m bench.jit_compile_time "
            f"--out {path.parent} on the build machine"
        }
    return {field: record.get(field) for field in REFERENCE_FIELDS}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.jit_compile_time", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--specs", type=Path, default=DEFAULT_SPECS, help="spec file (default: %(default)s)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ["OUT"]) if os.environ.get("OUT") else DEFAULT_OUT,
        help="folder for jit_compile_time.json (default: $OUT if set, else bench/out)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes (default: 3)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-cudnn", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: got {args.repeats}, need at least 1")
    if not args.specs.is_file():
        parser.error(f"--specs: {args.specs} is not a file")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure_in_this_process(args.specs)))
        return 0
    if args.child_cudnn:
        print(json.dumps(measure_cudnn_fe_in_this_process()))
        return 0
    from dglu_build.atomic_write import write_atomic

    from .environment import commit

    load_before = os.getloadavg()  # other work on the machine slows the compile
    figures = summarize([measure_fresh(args.specs) for _ in range(args.repeats)])
    cudnn_fe = (
        summarize([measure_fresh(args.specs, "--child-cudnn") for _ in range(args.repeats)])
        if importlib.util.find_spec("cudnn") is not None
        else {"missing": "nvidia-cudnn-frontend is not installed (the build extra)"}
    )
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "hostname": platform.node(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "python": platform.python_version(),
        },
        "commit": commit(),
        "cutlass_dsl": importlib.metadata.version("nvidia-cutlass-dsl"),
        "specs": str(args.specs),
        **figures,
        "cudnn_fe": cudnn_fe,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out / JSON_NAME, (json.dumps(record, indent=2) + "\n").encode())
    print(
        f"JIT COMPILE: {record['variant']}: DSL import {record['median_dsl_import_s']:.2f} s + "
        f"kernel import {record['median_kernels_import_s']:.2f} s + compile "
        f"{record['median_compile_s']:.2f} s = {record['median_total_s']:.2f} s "
        f"(median of {args.repeats} fresh processes; {args.out / JSON_NAME})"
    )
    if "median_total_s" in cudnn_fe:
        print(
            f"CUDNN FE JIT (Blackwell, {CUDNN_FE_CALL}): import {cudnn_fe['median_import_s']:.2f} s + "
            f"compile {cudnn_fe['median_compile_s']:.2f} s = {cudnn_fe['median_total_s']:.2f} s per (N, K, L)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
