"""Import paths for the bench tests: the bench imports dglu_build (codegen/) and dglu
(runtime/), which the wheel installs and a plain checkout does not, so this tree's codegen/
and runtime/ go first (the repo root, for ``bench``, is put there by pytest). And a
bench.session main's run on the CPU."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
for source in ("runtime", "codegen"):
    sys.path.insert(0, str(ROOT / source))

Ran = tuple[int, dict[str, Any], Any]  # exit status, the JSON, capsys.readouterr()


@pytest.fixture
def run_on_fake_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Callable[..., Ran]:
    """``run(main, json_name, *argv)``: ``main`` (a bench.session run) with --out tmp_path,
    torch seeing CUDA device 0 (emptying its cache does nothing) and a fake GPU's
    environment; its exit status, the JSON ``json_name`` it wrote and what it printed."""
    torch = pytest.importorskip("torch")
    from bench import session

    environment = {"commit": "feedbee", "gpu": {"name": "Fake GPU"}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(session, "describe", lambda: environment)

    def run(main: Callable[[list[str]], int], json_name: str, *argv: str) -> Ran:
        status = main(["--out", str(tmp_path), *argv])
        return status, json.loads((tmp_path / json_name).read_text()), capsys.readouterr()

    return run
