"""bench.session's GPU check, through the mains that use it: without torch or a CUDA device
they exit 2 saying so, before --out is made."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from bench import mxfp8, mxfp8_decodes  # noqa: E402

MAINS = pytest.mark.parametrize(
    "main, prog", [(mxfp8.main, "bench.mxfp8"), (mxfp8_decodes.main, "bench.mxfp8_decodes")]
)


@MAINS
def test_no_gpu_exits_2_saying_so(main, prog, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"{prog}: no CUDA device; it times dglu's kernels on the GPU\n"
    assert not (tmp_path / "out").exists()


@MAINS
def test_no_torch_exits_2_saying_so(main, prog, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)  # its import fails
    assert main(["--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"{prog}: torch is not installed\n"
    assert not (tmp_path / "out").exists()
