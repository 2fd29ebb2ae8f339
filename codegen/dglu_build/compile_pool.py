"""Compile variants in worker processes and hand back each outcome as it finishes.

Workers are spawned (not forked: the DSL's compiler state does not survive a
fork) and each imports CuTe DSL once. A compile that raises becomes a failed
outcome carrying the compiler's message; a worker that dies fails the
variants it had not finished. Nothing here writes files.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

CompileFn = Callable[[dict, str], Any]  # (variant key, symbol prefix) -> object with cubin and entry


@dataclass(frozen=True)
class CompileJob:
    """One variant to compile."""

    name: str
    key: dict[str, Any]
    symbol_prefix: str


@dataclass(frozen=True)
class CompileOutcome:
    """A finished job: its output (cubin, the kernel family's manifest fields) or the compiler's message."""

    job: CompileJob
    output: tuple[bytes, dict[str, Any]] | None
    error: str | None
    seconds: float


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def compile_all(jobs: list[CompileJob], workers: int, compile_fn: CompileFn) -> Iterator[CompileOutcome]:
    """Run ``jobs`` in up to ``workers`` processes; yield outcomes in the order they finish."""
    if not jobs:
        return
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context)
    try:
        futures = {pool.submit(_run, compile_fn, job): job for job in jobs}
        for future in as_completed(futures):
            try:
                yield future.result()
            except BrokenProcessPool as err:
                yield CompileOutcome(futures[future], None, f"the compiler process died ({err})", 0.0)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _run(compile_fn: CompileFn, job: CompileJob) -> CompileOutcome:
    """In a worker: compile one job, turning any exception into a message."""
    start = time.monotonic()
    try:
        result = compile_fn(job.key, job.symbol_prefix)
        output = (bytes(result.cubin), dict(result.entry))
        return CompileOutcome(job, output, None, time.monotonic() - start)
    except Exception as err:  # the compiler's failure is reported with the variant, not raised
        message = f"{type(err).__name__}: {err}".strip()
        origin = traceback.extract_tb(err.__traceback__)[-1]
        message += f"\n  (raised at {origin.filename}:{origin.lineno})"
        return CompileOutcome(job, None, message, time.monotonic() - start)
