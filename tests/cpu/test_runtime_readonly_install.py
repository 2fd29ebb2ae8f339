"""An installed, read-only dglu finds and verifies its own cubins and writes nothing there."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from conftest_runtime import DEFAULT_KEYS, write_artifacts

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import dglu.manifest as manifest
from dglu.integrity import read_verified_cubin

variants = manifest.installed_variants()
assert variants, "no variants found"
for variant in variants:
    read_verified_cubin(variant)
print(len(variants), "variants verified")
"""


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns) for path in root.rglob("*")}


def _make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def test_read_only_install_finds_verifies_and_writes_nothing(tmp_path: Path) -> None:
    site = tmp_path / "site"
    shutil.copytree(REPO_ROOT / "runtime" / "dglu", site / "dglu", ignore=shutil.ignore_patterns("__pycache__", "_cubins"))
    manifest = write_artifacts(site / "dglu" / "_cubins", DEFAULT_KEYS)
    _make_read_only(site)
    before = _snapshot(site)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DGLU_CUBIN_PATH", "PYTHONPATH")},
        "PYTHONPATH": str(site),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # an empty user variant directory
        "PYTHONDONTWRITEBYTECODE": "1",  # Python's own caches are not dglu's writes
    }
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == f"{len(manifest['variants'])} variants verified"
    listing = subprocess.run([sys.executable, "-m", "dglu"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert str(site / "dglu" / "_cubins") in listing.stdout
    assert _snapshot(site) == before
