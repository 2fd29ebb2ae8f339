"""The import-time figure, measured in fresh processes on the runtime from this tree (no
GPU needed to import dglu)."""

from __future__ import annotations

from pathlib import Path

from bench.host import import_time

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def test_import_time_is_measured_in_fresh_processes_without_torch(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(RUNTIME))
    figures = import_time(runs=2)
    assert len(figures["runs_ms"]) == 2
    assert all(0 < ms < 10_000 for ms in figures["runs_ms"])
    assert min(figures["runs_ms"]) <= figures["median_ms"] <= max(figures["runs_ms"])
    assert figures["imports_torch"] is False
