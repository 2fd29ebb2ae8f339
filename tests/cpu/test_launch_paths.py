"""bench.launch_paths over the stand-in libcuda (bench/standin_libcuda.c): each named path
enqueues through the driver entry point its name says, once per call, and a launch with
attributes (a cluster) is offered only the cuLaunchKernelEx paths."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings.driver", reason="bench.launch_paths calls the real cuda-bindings")

from standin_libcuda import environment  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json, types
from cuda.bindings import driver
from bench.launch_paths import paths
from bench.standin_host import FakeCuda
from dglu.launch import prepare_launch
from dglu.params import KernelArguments

driver.cuInit(0)
fake = FakeCuda()
result = {}
for attributes in ({}, {"cluster_dimension": (2, 1, 1)}):
    kernel = types.SimpleNamespace(block=(128, 1, 1), dynamic_smem_bytes=1024, attributes=attributes)
    launch = prepare_launch(driver.CUfunction(), kernel, (4, 1, 1), 0, KernelArguments([bytes(8), bytes(128)]))
    for name, enqueue in paths(launch).items():
        before = fake.counts()
        for _ in range(3):
            enqueue()
        made = fake.counts() - before
        result[f"{bool(attributes)}:{name}"] = dict(made)
print(json.dumps(result))
"""


def test_each_path_calls_its_entry_point(tmp_path: Path) -> None:
    env = environment(tmp_path)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout.strip().splitlines()[-1])
    ex, plain = {"cuLaunchKernelEx": 3}, {"cuLaunchKernel": 3}
    assert made == {
        "False:dglu": ex, "False:bindings_ex": ex, "False:ctypes_ex": ex,
        "False:bindings_plain": plain, "False:ctypes_plain": plain,
        "True:dglu": ex, "True:bindings_ex": ex, "True:ctypes_ex": ex,
    }
