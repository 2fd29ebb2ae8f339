"""The bench's stand-in libcuda (bench/standin_libcuda.c), built for a test: a process run
with ``environment(directory)`` loads it in place of the driver, with this tree's runtime,
codegen and bench importable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "bench" / "standin_libcuda.c"


def environment(directory: Path) -> dict[str, str]:
    """Build libcuda.so.1 into ``directory`` (skip the test without a C compiler) and return
    the environment that puts it first on LD_LIBRARY_PATH."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    library = directory / "libcuda.so.1"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(SOURCE)], check=True)
    return {
        **os.environ,
        "LD_LIBRARY_PATH": os.pathsep.join([str(directory), os.environ.get("LD_LIBRARY_PATH", "")]),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT / "codegen"), str(ROOT)]),
    }
