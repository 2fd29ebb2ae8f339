"""bench.session's GPU check, through bench.mxfp8's main: without torch or a CUDA device it
exits 2 saying so, before --out is made."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from bench import mxfp8  # noqa: E402


def test_no_gpu_exits_2_saying_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mxfp8.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == "bench.mxfp8: no CUDA device; it times dglu's kernels on the GPU\n"
    assert not (tmp_path / "out").exists()


def test_no_torch_exits_2_saying_so(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # its import fails
    assert mxfp8.main(["--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "bench.mxfp8: torch is not installed\n"
    assert not (tmp_path / "out").exists()
