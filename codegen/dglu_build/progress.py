"""What a build tells its user while it runs: a bar on a terminal, plain lines elsewhere.

Both report the same things: notes (the plan, waiting for a lock), then per compiled
variant done/total, the ETA from the mean time per variant so far, its name and time,
and each failure with the start of its message (the build collects the full messages).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from typing import Protocol, TextIO

FAILURE_CHARS = 200  # of a failure's message, on its one progress line


class BuildProgress(Protocol):
    """The events of a build, in order: notes, ``start``, one ``finished`` per variant, ``close``."""

    def note(self, line: str) -> None: ...

    def start(self, total: int) -> None: ...

    def finished(self, name: str, seconds: float, error: str | None = None) -> None: ...

    def close(self) -> None: ...


class _Eta:
    """done/total and the time left, from the mean time per finished variant."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.start = total, 0, time.monotonic()

    def tick(self) -> None:
        self.done += 1

    def left(self) -> str:
        if not self.done:
            return "?:??"
        seconds = int((time.monotonic() - self.start) / self.done * (self.total - self.done))
        return f"{seconds // 60}:{seconds % 60:02d}"


def _failure_line(name: str, error: str) -> str:
    return f"FAILED {name}: {' '.join(error.split())[:FAILURE_CHARS]}"


class LineProgress:
    """One line per event, e.g. ``[3/26, ETA 0:41] sm90a_..._static 1.2s``, through ``write``."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._eta = _Eta(0)

    def note(self, line: str) -> None:
        self._write(line)

    def start(self, total: int) -> None:
        self._eta = _Eta(total)

    def finished(self, name: str, seconds: float, error: str | None = None) -> None:
        self._eta.tick()
        prefix = f"[{self._eta.done}/{self._eta.total}, ETA {self._eta.left()}]"
        self._write(f"{prefix} {_failure_line(name, error)}" if error else f"{prefix} {name} {seconds:.1f}s")

    def close(self) -> None:
        pass


class BarProgress:
    """A bar redrawn in place on a terminal; notes and failures print above it, and stay."""

    BAR_WIDTH = 24

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._eta = _Eta(0)
        self._failed = 0
        self._last = ""
        self._drawn = False

    def note(self, line: str) -> None:
        if self._print_above(line):
            self._draw()

    def start(self, total: int) -> None:
        self._eta, self._failed, self._last = _Eta(total), 0, ""
        if total:
            self._draw()

    def finished(self, name: str, seconds: float, error: str | None = None) -> None:
        self._eta.tick()
        if error:
            self._failed += 1
            self._print_above(_failure_line(name, error))
        self._last = f"{name} {seconds:.1f}s"
        self._draw()

    def close(self) -> None:
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
            self._drawn = False

    def _print_above(self, line: str) -> bool:
        """Print ``line`` where the bar is; True if a bar was there (the caller redraws it below)."""
        was_drawn, self._drawn = self._drawn, False
        self._stream.write(("\r\033[K" if was_drawn else "") + line + "\n")
        self._stream.flush()
        return was_drawn

    def _draw(self) -> None:
        done, total = self._eta.done, self._eta.total
        filled = self.BAR_WIDTH * done // total if total else self.BAR_WIDTH
        bar = "#" * filled + "-" * (self.BAR_WIDTH - filled)
        failed = f", {self._failed} failed" if self._failed else ""
        line = f"[{bar}] {done}/{total}{failed}, ETA {self._eta.left()}  {self._last}"
        width = shutil.get_terminal_size((100, 24)).columns
        self._stream.write("\r\033[K" + line[: width - 1])
        self._stream.flush()
        self._drawn = True


def progress_for(stream: TextIO) -> BuildProgress:
    """A bar when ``stream`` is a terminal, plain lines otherwise (logs, pipes, CI)."""
    if stream.isatty():
        return BarProgress(stream)
    return LineProgress(lambda line: print(line, file=stream, flush=True))
