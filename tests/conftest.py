"""Shared test setup: import paths and the `gpu` marker.

``dglu_build`` is imported from codegen/. ``dglu`` is imported from
runtime/ unless DGLU_USE_INSTALLED=1, which tests the installed wheel
instead. Tests marked ``gpu`` skip, with the reason, where no CUDA device
can be used.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

sys.path.insert(0, str(REPO_ROOT))  # bench/
sys.path.insert(0, str(REPO_ROOT / "codegen"))
if os.environ.get("DGLU_USE_INSTALLED") != "1":
    sys.path.insert(0, str(REPO_ROOT / "runtime"))


@functools.cache
def _no_gpu_reason() -> str | None:
    """Why GPU tests cannot run here, or None if a CUDA device is usable."""
    try:
        from cuda.bindings import driver
    except ImportError as err:
        return f"cuda-bindings is not installed ({err})"
    try:
        (status,) = driver.cuInit(0)
    except Exception as err:  # no libcuda at all: cuda-bindings raises rather than returning a status
        return f"no CUDA driver library ({err})"
    if status != driver.CUresult.CUDA_SUCCESS:
        return f"no usable CUDA driver (cuInit: {status.name})"
    status, count = driver.cuDeviceGetCount()
    if status != driver.CUresult.CUDA_SUCCESS or count == 0:
        return "no CUDA device"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if gpu_items and (reason := _no_gpu_reason()):
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {reason}"))
