"""GPU test session: fresh random inputs each run, from one seed shown in the report header.

Set DGLU_TEST_SEED to rerun with the seed of an earlier run; each test derives its own
seed from it and its node id (shown in any failure message). The randomized sweep
(test_sweep.py) draws from a fixed base seed instead (sweep.py; DGLU_SWEEP_SEED overrides).
"""

from __future__ import annotations

import os
import secrets
import zlib

import pytest

SESSION_SEED = int(os.environ.get("DGLU_TEST_SEED") or secrets.randbelow(2**31))


def pytest_report_header(config: pytest.Config) -> str:
    return f"dglu GPU tests: seed {SESSION_SEED} (rerun with DGLU_TEST_SEED={SESSION_SEED})"


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed: the session seed mixed with the test's id."""
    value = (SESSION_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31
    print(f"seed {value} (session seed {SESSION_SEED})")
    return value


# Modules that know Blackwell; the others check the Hopper matrix (configs.SHIPPED).
BLACKWELL_MODULES = ("test_sm100_gpu", "test_sm100_tma_descriptors", "test_sm100_blockscaled_gpu",
                     "test_sm100_blockscaled_options_gpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a Blackwell GPU, the Hopper suite's tests skip (its shapes, tiles and activations
    are the sm90 families'); test_sm100_gpu.py runs instead."""
    try:
        import torch

        blackwell = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10
    except Exception:  # no torch or no device: the gpu marker skips everything anyway
        return
    if not blackwell:
        return
    skip = pytest.mark.skip(reason="Hopper matrix: on Blackwell, tests/gpu/test_sm100_gpu.py runs")
    for item in items:
        if item.module.__name__ not in BLACKWELL_MODULES:
            item.add_marker(skip)
