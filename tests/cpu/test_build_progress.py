"""dglu-build's progress: a bar redrawn in place on a terminal, one line per event elsewhere;
both count done/total with an ETA and show each failure."""

from __future__ import annotations

import io
import re

from dglu_build.progress import BarProgress, LineProgress, progress_for


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run_build(progress) -> None:
    """The events of a build of three variants, the second of which fails."""
    progress.note("DIR: 3 variants, 0 up to date, 3 to compile in 2 processes")
    progress.start(3)
    progress.finished("first", 1.25)
    progress.finished("second", 0.5, "ValueError: no\n   such flag")
    progress.finished("third", 2.0)
    progress.close()


def test_plain_lines_give_count_eta_name_and_time_and_each_failure():
    lines: list[str] = []
    run_build(LineProgress(lines.append))
    assert lines[0] == "DIR: 3 variants, 0 up to date, 3 to compile in 2 processes"
    assert [re.sub(r"ETA \d+:\d\d", "ETA t", line) for line in lines[1:]] == [
        "[1/3, ETA t] first 1.2s",
        "[2/3, ETA t] FAILED second: ValueError: no such flag",
        "[3/3, ETA t] third 2.0s",
    ]
    assert lines[-1].startswith("[3/3, ETA 0:00]")


def test_a_bar_is_redrawn_in_place_with_notes_and_failures_printed_above_it():
    terminal = Terminal()
    run_build(BarProgress(terminal))
    text = terminal.getvalue()
    kept = [line.rsplit("\r\033[K", 1)[-1] for line in text.split("\n")]  # what stays on screen, line by line
    assert kept[0] == "DIR: 3 variants, 0 up to date, 3 to compile in 2 processes"
    assert kept[1] == "FAILED second: ValueError: no such flag"
    assert re.fullmatch(r"\[#{24}\] 3/3, 1 failed, ETA 0:00  third 2\.0s", kept[2])
    assert kept[3:] == [""]  # close ends the bar's line
    frames = re.findall(r"\r\033\[K(\[[#-]+\] \d/3[^\r\n]*)", text)
    assert [frame.split("] ")[1].split(",")[0] for frame in frames] == ["0/3", "1/3", "2/3", "3/3"]
    assert frames[1].startswith("[" + "#" * 8 + "-" * 16 + "] 1/3, ETA ")


def test_the_bar_is_for_terminals_and_lines_for_everything_else():
    assert isinstance(progress_for(Terminal()), BarProgress)
    stream = io.StringIO()
    progress = progress_for(stream)
    assert isinstance(progress, LineProgress)
    run_build(progress)
    assert "\r" not in stream.getvalue() and stream.getvalue().count("\n") == 4
