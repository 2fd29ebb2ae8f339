"""Who imports what: `import dglu` loads neither the build side nor CuTe DSL, and the build
side's non-compiling modules (the CLI, the spec schema, verify, merge) load no CuTe DSL, so
`dglu-build check/list/show/verify/merge` run where only the wheel is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & {"cutlass", "dglu_build", "torch"})))
"""


def loaded_by(*modules: str) -> list[str]:
    """Which of cutlass, dglu_build and torch importing ``modules`` (from this checkout) loads."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / part) for part in ("codegen", "runtime"))}
    done = subprocess.run([sys.executable, "-c", PROBE, *modules], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_import_dglu_loads_neither_dglu_build_nor_cutlass_nor_torch():
    assert loaded_by("dglu", "dglu.contract.keys") == []


@pytest.mark.parametrize(
    "module", ["dglu_build.cli", "dglu_build.specs", "dglu_build.build", "dglu_build.verify", "dglu_build.merge"]
)
def test_the_build_sides_non_compiling_modules_load_no_cutlass(module):
    assert loaded_by(module) == ["dglu_build"]
