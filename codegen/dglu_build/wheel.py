"""Build the dglu wheel from a source checkout, its cubins taken from an artifact directory.

The variants are built first, incrementally, into a build directory (with
dglu-build's progress); then pip runs the checkout's PEP 517 backend in this
environment (no isolation), whose hook (build/hatch_build.py) finds the same
variants up to date in the same build directory and packs exactly them.
The wheel appears in the output directory in one rename.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dglu_build.build import BuildError

CHECKOUT_FILES = ("pyproject.toml", "build/hatch_build.py")
NOTICES_DIR = "licenses"  # under dglu/_cubins: the license texts of cubins built from others' sources
ENV_SPECS = "DGLU_SPECS"  # spec files, os.pathsep-separated; read by build/hatch_build.py
ENV_BUILD_DIR = "DGLU_BUILD_DIR"  # the artifact directory the hook builds in


def check_source(source: Path) -> None:
    """BuildError unless ``source`` is a dglu checkout whose wheel this environment can build."""
    missing = [name for name in CHECKOUT_FILES if not (source / name).is_file()]
    if missing:
        raise BuildError(f"--source: {source} is not a dglu source checkout (no {', '.join(missing)})")
    try:
        import hatchling  # noqa: F401  (pip builds with the backend of this environment)
    except ModuleNotFoundError:
        raise BuildError("building the wheel needs hatchling, part of the build extra: pip install 'dglu[build]'") from None


def build_wheel(source: Path, specs: Sequence[Path], build_dir: Path, out_dir: Path) -> Path:
    """Run pip's wheel build of ``source`` with the hook pointed at ``specs`` and ``build_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        ENV_SPECS: os.pathsep.join(str(path.resolve()) for path in specs),
        ENV_BUILD_DIR: str(build_dir.resolve()),
    }
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".dglu-wheel-") as staging:
        command = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", staging]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise BuildError(f"pip could not build the wheel (exit {done.returncode}):\n{done.stdout}{done.stderr}")
        (built,) = Path(staging).glob("*.whl")
        target = out_dir / built.name
        os.replace(built, target)
    return target


def write_notices(directory: Path, keys: Sequence[dict]) -> list[Path]:
    """Write the license texts (KernelFamily.notices) of the families of ``keys`` (variant
    keys) under ``directory``/licenses; returns the files written."""
    from dglu_build.atomic_write import write_atomic
    from dglu_build.kernels.registry import family_for

    families = {family.name: family for family in map(family_for, keys)}
    written = []
    for family in families.values():
        for name, text in family.notices().items():
            path = directory / NOTICES_DIR / name
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
            written.append(path)
    return written
