"""bench.mxfp8's run: the GPU check, and a results JSON in --out rewritten after each
measurement (a run cut short still leaves its figures)."""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dglu_build.atomic_write import write_atomic

from .device import error_record
from .environment import describe
from .results import error_paths

Record = dict[str, Any]


def no_gpu(prog: str) -> bool:
    """True, said on stderr as ``prog``, where torch does not import or sees no CUDA device."""
    try:
        import torch
    except ImportError:
        print(f"{prog}: torch is not installed", file=sys.stderr)
        return True
    if not torch.cuda.is_available():
        print(f"{prog}: no CUDA device; it times dglu's kernels on the GPU", file=sys.stderr)
        return True
    return False


class Session:
    """A run on the current CUDA device: its environment, its entries (one per measurement)
    and its JSON, ``assemble(environment, method, entries)`` stamped with the date, the
    duration, whether it is complete and, when it is, ``summary``'s line."""

    def __init__(
        self,
        out: Path,
        json_name: str,
        method: Record,
        assemble: Callable[[Record, Record, list[Record]], Record],
        summary: Callable[[Record], str],
    ) -> None:
        import torch

        self.started = time.monotonic()
        out.mkdir(parents=True, exist_ok=True)
        self.environment = describe()
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.path = out / json_name
        self.method, self.assemble, self.summary = method, assemble, summary
        self.entries: list[Record] = []

    def record(self) -> Record:
        """The entries so far as ``assemble`` lays them out (no date, duration or summary)."""
        return self.assemble(self.environment, self.method, self.entries)

    def write(self, complete: bool, chart: Record | None = None) -> Record:
        """The JSON, written atomically (a chart record's errors counted); returned."""
        record = self.record()
        record["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        record["duration_s"] = time.monotonic() - self.started
        record["complete"] = complete
        if chart is not None:
            record["chart"] = chart
            record["errors"] += error_paths({"chart": chart})
        if complete:
            record["summary"] = self.summary(record)
        write_atomic(self.path, (json.dumps(record, indent=2) + "\n").encode())
        return record

    def measure(
        self,
        measure: Callable[[], Record],
        entry: Callable[[Record], Record],
        progress: Callable[[Record], str],
        failed: Callable[[Record], Record] = lambda error: error,
    ) -> None:
        """``entry(measure())`` appended (where ``measure`` raises, ``failed`` of its error
        record stands for the measurement), the CUDA cache emptied, the partial JSON written,
        and ``progress``'s line with the seconds it took printed on stderr."""
        import torch

        start = time.monotonic()
        try:
            measured = measure()
        except Exception as exc:  # e.g. out of memory; the next measurement still runs
            measured = failed(error_record(exc))
        self.entries.append(entry(measured))
        torch.cuda.empty_cache()
        self.write(complete=False)
        line = progress(measured)
        print(f"{line} ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
