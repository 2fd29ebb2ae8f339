"""bench.host_ab without a GPU: its arguments, its no-GPU exit and its summary line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import host_ab


def test_it_needs_two_wheel_files(tmp_path: Path) -> None:
    wheel = tmp_path / "a.whl"
    wheel.write_bytes(b"")
    with pytest.raises(SystemExit) as exit_info:
        host_ab.main([str(wheel)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        host_ab.main([str(wheel), str(tmp_path / "missing.whl")])


def test_without_a_gpu_it_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    wheels = [tmp_path / "a.whl", tmp_path / "b.whl"]
    for wheel in wheels:
        wheel.write_bytes(b"")
    assert host_ab.main([str(w) for w in wheels]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_summary_gives_b_against_a() -> None:
    a = {"execute_us": 16.0, "execute_driver_us": 8.0, "wrapper_us": 26.0, "wrapper_driver_us": 10.0}
    b = {**a, "execute_us": 12.0, "wrapper_us": 39.0}
    assert host_ab.summary({"A": a, "B": b}) == (
        "HOST AB: B execute 12.0 us against 16.0 (0.75x); wrapper 39.0 us against 26.0 (1.50x)"
    )
