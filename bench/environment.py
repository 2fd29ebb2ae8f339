"""Where and with what a run happened: machine, GPU, driver, versions, commit, wheel.

The commit comes from $DGLU_COMMIT (the GPU machine's copy of the tree may lack .git),
else from git, else "unknown"; the wheel from $DGLU_WHEEL (bench/run.sh sets it). Every
probe that fails is recorded as None (or its error): describing the run never stops it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
NVIDIA_SMI_FIELDS = (
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.max.sm",
    "power.limit",
    "temperature.gpu",
)


def commit() -> str:
    """The commit under test: $DGLU_COMMIT, else git's HEAD, else "unknown"."""
    if os.environ.get("DGLU_COMMIT"):
        return os.environ["DGLU_COMMIT"]
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _wheel() -> dict[str, Any] | None:
    path = os.environ.get("DGLU_WHEEL")
    if not path:
        return None
    return {"file": Path(path).name, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def _nvidia_smi() -> dict[str, str] | None:
    """nvidia-smi's read-only view of the GPU's state (clocks, power limit, temperature)."""
    query = "--query-gpu=" + ",".join(NVIDIA_SMI_FIELDS)
    try:
        done = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first_gpu = done.stdout.strip().splitlines()[0]
    return dict(zip(NVIDIA_SMI_FIELDS, (value.strip() for value in first_gpu.split(","))))


def _driver_api_version() -> str | None:
    """The CUDA driver's API version (e.g. "13.0"), from cuda.bindings."""
    try:
        from cuda.bindings import driver

        _, version = driver.cuDriverGetVersion()
    except Exception:  # cuda.bindings missing or the driver not loadable: not recorded
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def _gpu() -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {
        "name": properties.name,
        "capability": f"{properties.major}.{properties.minor}",
        "sms": properties.multi_processor_count,
        "memory_bytes": properties.total_memory,
        "l2_bytes": getattr(properties, "L2_cache_size", None),
        "cuda_driver_api": _driver_api_version(),
        "torch_cuda": torch.version.cuda,
        "nvidia_smi": _nvidia_smi(),
    }


def _dglu() -> dict[str, Any]:
    try:
        import dglu
    except ImportError as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"version": dglu.__version__, "file": dglu.__file__}


def describe() -> dict[str, Any]:
    """The run's environment as the results JSON records it."""
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "commit": commit(),
        "wheel": _wheel(),
        "gpu": _gpu(),
        "torch": _version("torch"),
        "triton": _version("triton"),
        "cuda_bindings": _version("cuda-bindings") or _version("cuda-python"),
        "dglu": _dglu(),
    }
