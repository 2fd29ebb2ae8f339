"""Importing dglu is cheap, and ``python -m dglu`` reports variants and the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dglu
import pytest
from conftest_runtime import DEFAULT_KEYS, variant_name, write_artifacts, write_manifest
from dglu.manifest import load_manifests, search_path

RUNTIME_DIR = Path(dglu.__file__).resolve().parent.parent


def run_python(
    code_or_module: list[str], env_changes: dict[str, str]
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(RUNTIME_DIR), **env_changes}
    return subprocess.run(
        [sys.executable, *code_or_module], capture_output=True, text=True, env=env, timeout=120
    )


def test_import_loads_no_heavy_module(tmp_path: Path) -> None:
    code = (
        "import json, sys, dglu; print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'cuda', 'cutlass', 'numpy'))))"
    )
    result = run_python(["-c", code], {"XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_wrapper_imports_no_frontend_it_does_not_use(tmp_path: Path) -> None:
    """The wrapper's modules leave out the class API, torch's op registration and JAX;
    the class API's names still resolve (from dglu and dglu.api), importing dglu.op."""
    code = (
        "import json, sys, dglu; dglu.grouped_gemm_dglu; "
        "unused = ('dglu.op', 'dglu.torch', 'dglu.jax', 'jax'); "
        "before = sorted(m for m in unused if m in sys.modules); "
        "from dglu import api; same = dglu.GroupedGemmDglu is api.GroupedGemmDglu; "
        "print(json.dumps([before, same, 'dglu.op' in sys.modules]))"
    )
    result = run_python(["-c", code], {"XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [[], True, True]


def test_module_lists_variants_and_device(tmp_path: Path) -> None:
    write_artifacts(tmp_path / "art", DEFAULT_KEYS[:3])
    env = {"DGLU_CUBIN_PATH": str(tmp_path / "art"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = run_python(["-m", "dglu"], env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"{tmp_path / 'art'}  [DGLU_CUBIN_PATH: found]" in out
    assert f"{tmp_path / 'cache' / 'dglu' / 'variants'}  [user variants: no manifest]" in out
    packaged = load_manifests(search_path({})[-1:])
    assert f"variants ({3 + sum(len(m.variants) for _, m in packaged)}):" in out
    for key in DEFAULT_KEYS[:3]:
        params = f" {key['act_params']}" if key["act_params"] else ""
        described = (
            f"arch=sm_90a {key['act_func']}{params} dbias={key['dbias']} ab/c/d=bf16/bf16/bf16"
        )
        assert f"  {variant_name(key)}\n    {described} dense b_major=k tile=" in out
    assert f"from {tmp_path / 'art' / 'manifest.json'}" in out
    assert out.splitlines()[-1].startswith(("device 0: ", "device: none"))


def test_module_lists_stale_user_variants_with_their_rebuild_command(tmp_path: Path) -> None:
    user = tmp_path / "cache" / "dglu" / "variants"
    manifest = write_artifacts(user, DEFAULT_KEYS[:2])
    manifest["variants"][1]["build"]["dglu_version"] = "0.0.1"
    write_manifest(user, manifest)
    result = run_python(["-m", "dglu"], {"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    stale_name = variant_name(DEFAULT_KEYS[1])
    at = lines.index("stale variants, never used (1):")
    assert lines[at + 1 : at + 4] == [
        f"  {stale_name}",
        f"    built by dglu 0.0.1, this is dglu {dglu.__version__}",
        f"    from {user}",
    ]
    assert lines[at + 4].startswith("    rebuild: dglu-build add --arch sm_90a ")
    assert lines[at + 4].endswith(f" --no-dbias --weight-mode dense --b-major k --tile 128x128 "
                                  f"--cluster 1x1 --scheduler static -o {user}")
    listed = lines[lines.index(next(l for l in lines if l.startswith("variants ("))) : at]
    assert f"  {variant_name(DEFAULT_KEYS[0])}" in listed and f"  {stale_name}" not in listed


@pytest.mark.parametrize("version", [1, 9])
def test_module_reports_a_manifest_of_another_schema(tmp_path: Path, version: int) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    write_manifest(tmp_path, {**manifest, "schema_version": version})
    result = run_python(
        ["-m", "dglu"],
        {"DGLU_CUBIN_PATH": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert result.returncode == 1
    error = next(line for line in result.stdout.splitlines() if line.startswith("error: "))
    assert f"schema_version {version}, but this dglu reads schema_version 3" in error
    assert "dglu-build compile KERNEL_SPECS.yaml -o DIR" in error


def test_module_reports_a_listed_directory_without_manifest(tmp_path: Path) -> None:
    result = run_python(
        ["-m", "dglu"],
        {"DGLU_CUBIN_PATH": str(tmp_path / "none"), "XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    assert result.returncode == 1
    assert f"error: DGLU_CUBIN_PATH lists {tmp_path / 'none'}, which has no manifest.json" in (
        result.stdout
    )
