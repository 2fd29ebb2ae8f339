"""Device timing: CUDA events around each call, warm-up first, the median of many.

Each candidate comes as one call per input buffer set; successive samples rotate through
the sets, so a call never finds the previous call's inputs in L2. By default every call is
captured once into a CUDA graph and the graphs are replayed: the events then enclose the
call's device work alone, with no host launch gaps (and no host-side checks that read
device memory back). A call that cannot be captured is timed as it is (method "eager").
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

WARMUP_ROUNDS = 3  # passes over every buffer set before sampling
MIN_SAMPLES = 20
MAX_SAMPLES = 500
HEAD_START_CYCLES = 50_000_000  # ~25 ms at H200 clocks: time to queue MAX_SAMPLES calls


@dataclass(frozen=True)
class Timing:
    """Summary of one candidate's samples, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int
    method: str  # "cuda_graph" or "eager"
    note: str | None = None  # why a graph was not used, when it was not

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples_ms: Sequence[float], method: str, note: str | None = None) -> Timing:
    """Median and 10th/90th percentiles of ``samples_ms``."""
    if len(samples_ms) < 2:
        raise ValueError(f"samples_ms: got {len(samples_ms)} samples, need at least 2")
    deciles = statistics.quantiles(samples_ms, n=10, method="inclusive")
    return Timing(
        median_ms=statistics.median(samples_ms),
        p10_ms=deciles[0],
        p90_ms=deciles[-1],
        samples=len(samples_ms),
        method=method,
        note=note,
    )


def sample_count(estimate_ms: float, budget_ms: float) -> int:
    """How many samples fit ``budget_ms`` at ``estimate_ms`` each, within the bounds."""
    if estimate_ms <= 0:
        return MAX_SAMPLES
    return max(MIN_SAMPLES, min(MAX_SAMPLES, int(budget_ms / estimate_ms)))


def _capture(calls: Sequence[Callable[[], Any]]) -> list[Any]:
    """One CUDA graph per call, after warming each call up on a side stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graphs = []
    for call in calls:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        graphs.append(graph)
    return graphs


def _event_samples(runners: Sequence[Callable[[], Any]], count: int) -> list[float]:
    """``count`` event-timed calls, rotating through ``runners``.

    A sleep kernel first gives the host a head start, so that calls shorter than their
    launch are still queued back to back and the events do not time the host's gaps.
    """
    import torch

    torch.cuda._sleep(HEAD_START_CYCLES)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(count)]
    for i in range(count):
        starts[i].record()
        runners[i % len(runners)]()
        ends[i].record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in zip(starts, ends)]


def time_calls(
    calls: Sequence[Callable[[], Any]], budget_ms: float, use_graphs: bool = True
) -> Timing:
    """Median device time of one call; ``calls`` hold one call per buffer set."""
    import torch

    if not calls:
        raise ValueError("calls: got none, need one call per buffer set")
    runners: Sequence[Callable[[], Any]] = calls
    method, note = "eager", None
    if use_graphs:
        try:
            graphs = _capture(calls)
            runners, method = [graph.replay for graph in graphs], "cuda_graph"
        except Exception as exc:  # the call is timed eagerly instead; the reason is kept
            torch.cuda.synchronize()
            note = f"graph capture failed, timed eagerly: {type(exc).__name__}: {exc}"
    warmup = _event_samples(runners, WARMUP_ROUNDS * len(runners))
    count = sample_count(statistics.median(warmup), budget_ms)
    return summarize(_event_samples(runners, count), method, note)
