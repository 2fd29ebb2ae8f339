"""bench.standin_host over the bench's stand-in libcuda (bench/standin_libcuda.c), built
here: the stand-in answers every driver entry point dglu's call path uses (cuda-bindings
looks each up by name: a missing one fails the call), and its counters give the real
driver-call set: a first call allocates its pooled workspace with cuMemAlloc (never
cuMemAllocAsync), a steady execute only launches its two kernels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="bench.standin_host makes torch tensors")
pytest.importorskip("cuda.bindings.driver", reason="bench.standin_host runs the real cuda-bindings")

from conftest_runtime import variant_key, write_artifacts, write_index  # noqa: E402
from standin_libcuda import environment  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a stand-in run: the built library first on LD_LIBRARY_PATH, this
    tree's runtime and bench importable, and an artifact directory of one dswiglu dbias
    variant (a random cubin: the stand-in loads anything) with its index."""
    env = environment(tmp_path_factory.mktemp("standin"))
    artifacts = tmp_path_factory.mktemp("artifacts")
    write_artifacts(artifacts, [variant_key(act_func="dswiglu", dbias=True)])
    write_index(artifacts)
    return {**env, "ARTIFACTS": str(artifacts)}


def standin_host(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.standin_host", "--artifacts", env["ARTIFACTS"], *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_first_call_allocates_its_workspace_with_cumemalloc(stand_in) -> None:
    figures = standin_host(stand_in, "--first-call")
    calls = figures["driver_calls"]
    assert calls["cuMemAlloc"] == 1 and "cuMemAllocAsync" not in calls, calls
    assert calls["cuLaunchKernelEx"] == 2 and calls["cuModuleLoadData"] == 1, calls
    assert figures["first_call_ms"] > 0 and figures["dglu_import_ms"] > 0


def test_a_steady_execute_only_launches(stand_in) -> None:
    figures = standin_host(stand_in, "--calls", "20", "--repeats", "1")
    assert figures["execute_driver_calls"] == {"cuLaunchKernelEx": 2.0}
    assert figures["wrapper_driver_calls"] == {"cuLaunchKernelEx": 2.0, "cuMemsetD32Async": 1.0}
    assert 0 < figures["execute_us"] < figures["plan_miss_us"]
