"""``python -m bench.host_ab WHEEL_A WHEEL_B``: the host cost of two dglu wheels side by
side on one GPU machine. Host figures move between machines (leases) by more than a
microsecond, so a runtime change is told apart only by two wheels timed in one run.

Each wheel is installed into a directory of its own (``pip install --no-deps --target``);
then ``--rounds`` rounds of fresh processes alternate between them (A, B, then B, A, ...),
all pinned to one CPU (``--cpu``: a lease's cores differ, and a process's figures with
them), each measuring bench.host.steady_state on the tiny problem: host CPU microseconds
per steady ``execute`` and wrapper call, and the part of it in driver calls. Prints the
rounds, per wheel the minimum and the median over them, and last one summary line
starting with "HOST AB:" (B / A of the minima: the figures least disturbed by the rest of
the machine).

Exit status: 0 when every round measured; 1 when one failed; 2 for bad arguments or no GPU.
Usage (GPU machine, from the repo root):
    python -m bench.host_ab OLD.whl NEW.whl [--rounds 5] [--calls 2000] [--cpu N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("execute_us", "execute_driver_us", "wrapper_us", "wrapper_driver_us")


def measure(calls: int) -> dict[str, float]:
    """This process's steady-state host figures (the installed dglu on cuda:0)."""
    import torch

    from .host import steady_state

    with tempfile.TemporaryDirectory() as scratch:
        found = steady_state(torch.device("cuda", 0), calls, 50.0, Path(scratch) / "profile.txt")
    return {
        "execute_us": found["execute"]["cpu_us"],
        "execute_driver_us": found["execute_driver_us"],
        "wrapper_us": found["wrapper"]["cpu_us"],
        "wrapper_driver_us": found["wrapper_driver_us"],
    }


def install(wheel: Path, into: Path) -> Path:
    """``wheel`` installed into a new directory under ``into``; its path."""
    site = Path(tempfile.mkdtemp(dir=into, prefix="site-"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True)
    return site


def round_of(site: Path, calls: int, cpu: int) -> dict[str, float]:
    """One fresh process's figures, on CPU ``cpu``, with the dglu installed in ``site``."""
    path = os.pathsep.join([str(site), str(ROOT), str(ROOT / "codegen")])
    done = subprocess.run([sys.executable, "-m", "bench.host_ab", "--child", "--calls", str(calls)],
                          env={**os.environ, "PYTHONPATH": path}, cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    if done.returncode:
        raise RuntimeError(f"a round with {site} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def summary(minima: dict[str, dict[str, float]]) -> str:
    """The "HOST AB:" line: B's figures, A's, and B / A."""
    a, b = minima["A"], minima["B"]
    parts = [f"{name.removesuffix('_us')} {b[name]:.1f} us against {a[name]:.1f} ({b[name] / a[name]:.2f}x)"
             for name in ("execute_us", "wrapper_us")]
    return "HOST AB: B " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.host_ab", description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="*", type=Path, help="WHEEL_A WHEEL_B")
    parser.add_argument("--rounds", type=int, default=5, help="processes per wheel (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per figure (default: %(default)s)")
    parser.add_argument("--cpu", type=int, default=max(os.sched_getaffinity(0)),
                        help="the CPU every round runs on (default: %(default)s)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.calls)))
        return 0
    if len(args.wheels) != 2 or not all(wheel.is_file() for wheel in args.wheels) or args.rounds < 1:
        parser.error(f"needs two wheel files and --rounds >= 1, got {[str(w) for w in args.wheels]}")
    import torch

    if not torch.cuda.is_available():
        print("bench.host_ab: no CUDA device; it times dglu's calls on the GPU machine", file=sys.stderr)
        return 2
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as scratch:
        try:
            sites = {label: install(wheel, Path(scratch)) for label, wheel in zip("AB", args.wheels)}
            for index in range(args.rounds):
                for label in ("AB" if index % 2 == 0 else "BA"):
                    runs[label].append(round_of(sites[label], args.calls, args.cpu))
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"bench.host_ab: {exc}", file=sys.stderr)
            return 1
    record: dict[str, Any] = {"wheels": {"A": str(args.wheels[0]), "B": str(args.wheels[1])}, "cpu": args.cpu,
                              "runs": runs}
    for statistic in (min, statistics.median):
        record[statistic.__name__] = {label: {name: statistic(r[name] for r in found) for name in FIGURES}
                                      for label, found in runs.items()}
    print(json.dumps(record, indent=1))
    print(summary(record["min"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
