"""The wheel, built from the repo by `dglu-build wheel` (smoke specs) through its PEP 517
backend, installed into a fresh venv: it must import without CuTe DSL, hold the manifest
and cubins it claims, and come out byte-identical when built again."""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dglu_build.specs import load_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SPECS = "kernel_specs/smoke.yaml"
CUBINS = "dglu/_cubins/"

pytestmark = pytest.mark.slow

# Prints what importing dglu brought in, as JSON.
IMPORT_PROBE = """
import importlib.resources, json, sys
import dglu
print(json.dumps({
    "file": dglu.__file__,
    "cutlass": sorted(m for m in sys.modules if m == "cutlass" or m.startswith("cutlass.")),
    "dglu_build": sorted(m for m in sys.modules if m.split(".")[0] == "dglu_build"),
    "manifest": (importlib.resources.files("dglu") / "_cubins" / "manifest.json").is_file(),
}))
"""
RUN_TIME_DEPENDENCIES = ["cuda-bindings", "click", "pyyaml"]


def run(args: list, **kwargs) -> str:
    """Run a command; on failure show its output in the test report."""
    done = subprocess.run([str(arg) for arg in args], capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


def clean_env(**extra: str) -> dict:
    """The environment without anything that would put the repo on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DGLU_USE_INSTALLED")}
    return {**env, **extra}


def dglu_build_wheel(dist: Path, build_dir: Path) -> Path:
    """The README's build command (`dglu-build wheel`, here as `python3 -m dglu_build wheel`)."""
    command = [sys.executable, "-m", "dglu_build", "wheel", SMOKE_SPECS, "-o", dist, "--build-dir", build_dir]
    checkout = os.pathsep.join(str(REPO_ROOT / part) for part in ("codegen", "runtime"))  # as the editable install has it
    output = run(command, cwd=REPO_ROOT, env=clean_env(PYTHONPATH=checkout))
    (built,) = dist.glob("*.whl")
    assert f"wrote {built} (" in output
    return built


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build") / "artifacts"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, build_dir) -> Path:
    return dglu_build_wheel(tmp_path_factory.mktemp("dist"), build_dir)


def test_building_again_gives_a_byte_identical_wheel(wheel, build_dir, tmp_path):
    again = dglu_build_wheel(tmp_path, build_dir)
    assert again.name == wheel.name
    assert again.read_bytes() == wheel.read_bytes()


@pytest.fixture(scope="module")
def wheel_manifest(wheel) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        return json.loads(archive.read(CUBINS + "manifest.json"))


def test_wheel_build_names_a_spec_file_that_does_not_exist(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "--no-build-isolation", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(DGLU_SPECS="kernel_specs/nope.yaml"),
    )
    assert done.returncode != 0
    assert re.search(r"DGLU_SPECS: spec file \S*kernel_specs/nope\.yaml does not exist", done.stdout + done.stderr)
    assert not list(tmp_path.glob("*.whl"))


def test_wheel_ships_the_manifest_index_of_its_manifest(wheel):
    from dglu.contract.index import INDEX_FILE, index_text

    with zipfile.ZipFile(wheel) as archive:
        manifest = archive.read(CUBINS + "manifest.json").decode()
        assert archive.read(CUBINS + INDEX_FILE).decode() == index_text(manifest)


def test_wheel_is_pure_python(wheel):
    assert re.fullmatch(r"dglu-[0-9][\w.]*-py3-none-any\.whl", wheel.name)


def test_wheel_holds_the_smoke_variants_with_matching_hashes(wheel, wheel_manifest):
    expected = sorted(variant.name for variant in load_specs(REPO_ROOT / SMOKE_SPECS))
    assert [variant["name"] for variant in wheel_manifest["variants"]] == expected
    with zipfile.ZipFile(wheel) as archive:
        cubins = {name for name in archive.namelist() if name.startswith(CUBINS) and name.endswith(".cubin")}
        assert cubins == {CUBINS + variant["cubin"] for variant in wheel_manifest["variants"]}
        for variant in wheel_manifest["variants"]:
            data = archive.read(CUBINS + variant["cubin"])
            assert hashlib.sha256(data).hexdigest() == variant["sha256"]
            assert len(data) == variant["size"]


def _tracked_python_files(folder: str) -> set[str]:
    listed = run(["git", "ls-files", f"{folder}/*.py"], cwd=REPO_ROOT).split()
    return set(listed)


def test_wheel_holds_the_runtime_and_dglu_builds_code_and_nothing_else_of_the_repo(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    runtime = {name.removeprefix("runtime/") for name in _tracked_python_files("runtime/dglu")}
    assert "dglu/contract/keys.py" in runtime and runtime <= names
    build_side = {name.removeprefix("codegen/") for name in _tracked_python_files("codegen")}
    assert "dglu_build/kernels/__init__.py" in build_side and build_side <= names
    top_level = {name.split("/")[0] for name in names}
    assert top_level == {"dglu", "dglu_build", wheel.name.split("-py3")[0] + ".dist-info"}
    assert not [name for name in names if "/.dglu-build/" in name or "__pycache__" in name]


def test_wheel_needs_cuda_bindings_click_and_pyyaml_at_run_time_and_cutlass_only_to_build(wheel):
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        metadata = email.parser.Parser().parsestr(archive.read(metadata_name).decode())
    requires = metadata.get_all("Requires-Dist")
    run_time = [req for req in requires if "extra ==" not in req]
    assert sorted(re.match(r"[\w-]+", req).group() for req in run_time) == sorted(RUN_TIME_DEPENDENCIES)
    cutlass = [req for req in requires if req.startswith("nvidia-cutlass-dsl")]
    assert cutlass and all(re.search(r"extra == ['\"]build['\"]", req) for req in cutlass)
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [archive.read(name).decode() for name in archive.namelist() if name.endswith("entry_points.txt")]
    assert "[console_scripts]\ndglu-build = dglu_build.cli:main" in entry_points


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv holding the wheel and its run-time dependencies (this environment's versions), no CuTe DSL."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", wheel], env=clean_env())
    pinned = [f"{name}=={importlib.metadata.version(name)}" for name in RUN_TIME_DEPENDENCIES]
    run([python, "-m", "pip", "install", "--quiet", *pinned], env=clean_env())
    return venv


def test_installed_wheel_imports_in_a_fresh_venv_without_cutlass_or_dglu_build(wheel_venv, tmp_path):
    python = wheel_venv / "bin" / "python"
    probe = json.loads(run([python, "-c", IMPORT_PROBE], cwd=tmp_path, env=clean_env()))
    assert Path(probe["file"]).is_relative_to(wheel_venv)
    assert probe["cutlass"] == [] and probe["dglu_build"] == []
    assert probe["manifest"]
    assert "cutlass" not in run([python, "-m", "pip", "list"], env=clean_env())
    # the installed runtime accepts the wheel's manifest (no GPU needed to list it)
    listing = run([python, "-m", "dglu"], cwd=tmp_path, env=clean_env(XDG_CACHE_HOME=str(tmp_path / "cache")))
    assert all(variant.name in listing for variant in load_specs(REPO_ROOT / SMOKE_SPECS))


def test_dglu_build_check_runs_with_the_wheel_alone_and_compiling_says_what_to_install(wheel_venv, tmp_path):
    dglu_build = wheel_venv / "bin" / "dglu-build"
    checked = run([dglu_build, "check", REPO_ROOT / "kernel_specs" / "default.yaml"], cwd=tmp_path, env=clean_env())
    assert checked.split() == [variant.name for variant in load_specs(REPO_ROOT / "kernel_specs" / "default.yaml")]
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO_ROOT / SMOKE_SPECS).read_text().replace("dbias: false", "dbias: no"))
    done = subprocess.run([dglu_build, "check", bad], capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert done.returncode == 1 and f"{bad}: variants[1] (line " in done.stderr and "field 'dbias'" in done.stderr
    command = [dglu_build, "compile", REPO_ROOT / SMOKE_SPECS, "-o", tmp_path / "out"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=clean_env())
    assert done.returncode == 1
    assert "needs the build extra (no module 'cutlass'): pip install 'dglu[build]'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_importing_the_wheel_loads_no_cutlass_even_where_it_is_installed(wheel, tmp_path):
    importlib.metadata.version("nvidia-cutlass-dsl")  # the premise: CuTe DSL is importable here
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    probe = json.loads(run([sys.executable, "-c", IMPORT_PROBE], cwd=tmp_path, env=clean_env(PYTHONPATH=str(tmp_path / "site"))))
    assert Path(probe["file"]).is_relative_to(tmp_path / "site")
    assert probe["cutlass"] == [] and probe["dglu_build"] == []
