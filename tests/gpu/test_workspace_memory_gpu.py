"""Pooled workspaces are synchronous driver allocations (dglu.workspaces): a process's first
call leaves the device's default memory pool (the stream-ordered allocator's, which
cuMemAllocAsync would create on first use, ~11 ms on an H200) unused. Checked in a fresh
process, whose first call is also checked element by element (harness.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

pytestmark = pytest.mark.gpu

WORKER = """
import sys
import torch
from cuda.bindings import driver
from configs import BF16, WIDE, Config
from harness import Case, run_case
from inputs import Shape
import dglu.workspaces

seed = int(sys.argv[1])
config = Config("dswiglu", BF16, BF16, True, WIDE)  # dbias: a pooled, by_consumer workspace
run_case(Case(config, Shape(n=96, k=200, expert_rows=(256, 0, 384), extra_rows=64), seed))
torch.cuda.synchronize()
pooled = [w for pool in dglu.workspaces._pools.values() for w in pool.workspaces.values()]
_, device = driver.cuDeviceGet(torch.cuda.current_device())
_, pool = driver.cuDeviceGetDefaultMemPool(device)
high = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH
_, reserved = driver.cuMemPoolGetAttribute(pool, high)
print(f"pooled workspaces {len(pooled)}, default pool reserved {int(reserved)} bytes")
"""


def test_the_first_call_does_not_use_the_default_memory_pool(seed: int) -> None:
    if torch.cuda.get_allocator_backend() == "cudaMallocAsync":
        pytest.skip("torch's own allocator uses the default memory pool (cudaMallocAsync backend)")
    here = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(seed)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = done.stdout.strip().splitlines()[-1]
    count = int(line.split()[2].rstrip(","))
    assert count >= 1 and line.endswith("default pool reserved 0 bytes"), line
