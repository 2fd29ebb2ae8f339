"""dglu-build for real (smoke specs compiled with CuTe DSL): incremental builds, shards and
merge, reproducibility, concurrent and killed builds, verify, list and show."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from dglu_build.cubin_info import read_cubin
from click.testing import CliRunner

from dglu_build.artifact_store import STATE_DIR, open_store
from dglu_build.cli import main
from dglu_build.specs import load_specs
from dglu.contract.index import INDEX_FILE, index_text
from dglu.contract.writer import expanded

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SPECS = REPO_ROOT / "kernel_specs" / "smoke.yaml"
SMOKE = sorted(variant.name for variant in load_specs(SMOKE_SPECS))

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch) -> Path:
    """Keep the default output (the user variant directory) inside the test's temp dir."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def dglu_build(*args, expect: int = 0) -> str:
    """Run the CLI in-process; return its stdout and stderr together."""
    result = CliRunner().invoke(main, [str(arg) for arg in args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result.output


def dglu_build_process(*args, **kwargs) -> subprocess.Popen:
    """Start ``python3 -m dglu_build`` (the same CLI) as its own process group."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "codegen"), str(REPO_ROOT / "runtime")])}
    command = [sys.executable, "-m", "dglu_build", *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)


def snapshot(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` (build records included) by relative path."""
    return {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path.name != "lock"
    }


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def manifest_names(directory: Path) -> list[str]:
    return [variant["name"] for variant in json.loads((directory / "manifest.json").read_text())["variants"]]


@pytest.fixture(scope="module")
def smoke_dir(tmp_path_factory) -> Path:
    """The smoke specs built once, in two processes; tests copy it before changing it."""
    out = tmp_path_factory.mktemp("smoke") / "artifacts"
    output = dglu_build("compile", SMOKE_SPECS, "-o", out, "-j", 2)
    assert f"{out}: {len(SMOKE)} compiled, 0 up to date, 0 failed" in output
    return out


def copy_of(directory: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(directory, target)
    return target


# --- incremental -------------------------------------------------------------------


def test_a_build_writes_the_manifest_cubins_and_records_and_verifies(smoke_dir):
    assert manifest_names(smoke_dir) == SMOKE
    assert sorted(path.stem for path in (smoke_dir / STATE_DIR / "records").iterdir()) == SMOKE
    assert f"{smoke_dir}: {len(SMOKE)} variants verified" in dglu_build("verify", smoke_dir)


def test_a_rebuild_with_nothing_changed_compiles_nothing_and_changes_nothing(smoke_dir, tmp_path):
    directory = copy_of(smoke_dir, tmp_path)
    before = snapshot(directory)
    output = dglu_build("compile", SMOKE_SPECS, "-o", directory)
    assert f"{len(SMOKE)} variants, {len(SMOKE)} up to date, 0 to compile" in output
    assert snapshot(directory) == before


def test_the_command_the_runtime_prints_adds_exactly_that_variant(smoke_dir, tmp_path):
    from dglu.selection import build_command

    directory = copy_of(smoke_dir, tmp_path)
    entry = json.loads((directory / "manifest.json").read_text())["variants"][0]["key"]
    entry = {**entry, "dbias": not entry["dbias"]}  # a variant the directory lacks
    command = shlex.split(build_command(entry))
    assert command[:2] == ["dglu-build", "add"]
    output = dglu_build(*command[1:], "-o", directory)
    assert f"{len(SMOKE) + 1} variants, {len(SMOKE)} up to date, 1 to compile" in output
    added = [v for v in json.loads((directory / "manifest.json").read_text())["variants"] if v["name"] not in SMOKE]
    assert [variant["key"] for variant in added] == [entry]
    assert "variants verified" in dglu_build("verify", directory)


def test_a_changed_compile_option_marks_variants_stale_and_rebuilds_them(smoke_dir, tmp_path, monkeypatch):
    directory = copy_of(smoke_dir, tmp_path)
    assert dglu_build("list", directory).count("[up to date]") == len(SMOKE)
    monkeypatch.setenv("CUTE_DSL_LOG_LEVEL", "1")  # every CUTE_DSL_* variable is part of the build key
    assert dglu_build("list", directory).count("[stale]") == len(SMOKE)
    output = dglu_build("add", "--act", "dswiglu", "--dbias", "-o", directory)  # already there, but stale
    assert f"{len(SMOKE)} variants, 0 up to date, {len(SMOKE)} to compile" in output
    assert dglu_build("list", directory).count("[up to date]") == len(SMOKE)


def test_list_and_show_describe_the_built_variants(smoke_dir):
    listing = json.loads(dglu_build("list", smoke_dir, "--json"))
    assert [row["name"] for row in listing] == SMOKE
    assert {row["status"] for row in listing} == {"up to date"}
    entry = json.loads(dglu_build("show", SMOKE[0], "--dir", smoke_dir, "--json"))
    # the entry with its family's front policy in it (the manifest holds the policy once)
    assert entry == expanded(json.loads((smoke_dir / "manifest.json").read_text()))["variants"][0]
    text = dglu_build("show", SMOKE[0], "--dir", smoke_dir)
    assert f"cubin:   {smoke_dir / entry['cubin']} ({entry['size']} bytes" in text
    assert all(kernel["symbol"] in text for kernel in entry["kernels"])
    wrong = dglu_build("show", SMOKE[0] + "x", "--dir", smoke_dir, expect=1)
    assert f"has no variant '{SMOKE[0]}x'; did you mean {SMOKE[0]}" in wrong


# --- reproducible --------------------------------------------------------------------


def test_a_build_elsewhere_in_one_process_is_byte_identical(smoke_dir, tmp_path):
    checkout = tmp_path / "other checkout"
    for part in ("codegen", "runtime", "kernel_specs"):
        shutil.copytree(REPO_ROOT / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__", "_cubins"))
    out = tmp_path / "out"
    paths = os.pathsep.join(str(checkout / part) for part in ("codegen", "runtime"))
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": paths}
    command = [sys.executable, "-m", "dglu_build", "compile", "kernel_specs/smoke.yaml", "-o", str(out), "-j", "1"]
    subprocess.run(command, cwd=checkout, env=env, check=True, capture_output=True)
    assert snapshot(out) == snapshot(smoke_dir)


# --- shards and merge -------------------------------------------------------------------


def test_shards_merge_into_the_same_bytes_as_one_build(smoke_dir, tmp_path):
    shards = [tmp_path / f"shard{index}" for index in (1, 2)]
    for index, shard in enumerate(shards, start=1):
        dglu_build("compile", SMOKE_SPECS, "--shard", f"{index}/2", "-o", shard)
    assert sorted(manifest_names(shards[0]) + manifest_names(shards[1])) == SMOKE
    assert manifest_names(shards[0]) == [SMOKE[0]]  # the 1st, 3rd, ... name in sorted order
    merged = tmp_path / "merged"
    assert f"the manifest lists {len(SMOKE)} variants" in dglu_build("merge", *shards, "-o", merged)
    assert snapshot(merged) == snapshot(smoke_dir)
    assert "0 to compile" in dglu_build("compile", SMOKE_SPECS, "-o", merged)
    # merging the same shards again changes nothing
    dglu_build("merge", *shards, "-o", merged)
    assert snapshot(merged) == snapshot(smoke_dir)


def _edit_json(path: Path, change) -> None:
    """Edit a JSON file; a manifest's index is rewritten with it (as dglu-build would), so
    what verify and merge then see is the edited entry itself."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    index = path.parent / INDEX_FILE
    if path.name == "manifest.json" and index.exists():
        index.write_text(index_text(path.read_text()))


def test_merge_refuses_a_different_build_of_the_same_variant(smoke_dir, tmp_path):
    other = copy_of(smoke_dir, tmp_path)
    name = SMOKE[0]

    def reswizzle(entry):
        entry["tma"]["a"]["swizzle"] = "64B"  # still verifies: a different, self-consistent build

    _edit_json(other / "manifest.json", lambda m: reswizzle(m["variants"][0]))
    _edit_json(other / STATE_DIR / "records" / f"{name}.json", lambda r: reswizzle(r["entry"]))
    out = tmp_path / "out"
    message = dglu_build("merge", smoke_dir, other, "-o", out, expect=1)
    assert f"refusing to merge:\n  {name}: {smoke_dir} and {other} hold different builds of it" in message
    assert not out.exists() or not (out / "manifest.json").exists()


def _drop_variant(directory: Path, name: str) -> None:
    _edit_json(directory / "manifest.json", lambda m: m.update(variants=[v for v in m["variants"] if v["name"] != name]))
    (directory / STATE_DIR / "records" / f"{name}.json").unlink()


def test_merge_refuses_other_toolchains_and_sources_that_do_not_verify(smoke_dir, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(smoke_dir, first)
    shutil.copytree(smoke_dir, second)
    _drop_variant(first, SMOKE[1])
    _drop_variant(second, SMOKE[0])
    _edit_json(second / "manifest.json", lambda m: m["variants"][0]["build"]["toolchain"].update(python="3.99.0"))
    _edit_json(second / STATE_DIR / "records" / f"{SMOKE[1]}.json", lambda r: r["entry"]["build"]["toolchain"].update(python="3.99.0"))
    message = dglu_build("merge", first, second, "-o", tmp_path / "out", expect=1)
    assert "different toolchains: " in message and "3.99.0" in message
    cubin = second / json.loads((second / "manifest.json").read_text())["variants"][0]["cubin"]
    flip_a_byte(cubin)
    message = dglu_build("merge", first, second, "-o", tmp_path / "out", expect=1)
    assert f"{second} does not verify:\n  variant {SMOKE[1]}: {cubin.name} has sha256" in message
    assert not (tmp_path / "out" / "manifest.json").exists()


# --- verify ----------------------------------------------------------------------------


def test_verify_names_every_tampered_variant(smoke_dir, tmp_path):
    directory = copy_of(smoke_dir, tmp_path)
    entries = json.loads((directory / "manifest.json").read_text())["variants"]
    flipped = directory / entries[0]["cubin"]
    flip_a_byte(flipped)

    def shrink_a_param(manifest):
        params = manifest["variants"][1]["kernels"][0]["params"]
        next(param for param in params if param["kind"] == "i32")["size"] = 8  # the cubin holds 4 bytes

    _edit_json(directory / "manifest.json", shrink_a_param)
    message = dglu_build("verify", directory, expect=1)
    assert f"{directory}: 2 problem(s), 0 variants good" in message
    assert f"variant {entries[0]['name']}: {flipped.name} has sha256 " in message
    assert f"variant {entries[1]['name']}: kernel " in message and "the manifest says size 8 and align 4" in message
    flipped.unlink()
    assert f"variant {entries[0]['name']}: cannot read its cubin" in dglu_build("verify", directory, expect=1)


def test_verify_checks_min_driver_against_the_cubins_toolkit(smoke_dir, tmp_path):
    directory = copy_of(smoke_dir, tmp_path)
    entry = json.loads((directory / "manifest.json").read_text())["variants"][0]
    toolkit = read_cubin((directory / entry["cubin"]).read_bytes()).toolkit  # the ptxas of this build
    major = int(toolkit.split(".")[0])
    _edit_json(directory / "manifest.json", lambda m: m["variants"][0].update(min_driver=12000))
    message = dglu_build("verify", directory, expect=1)
    needs = 1000 * major  # CUDA's minor version compatibility
    assert f"variant {SMOKE[0]}: min_driver 12000, but the cubin was built by CUDA {toolkit} (needs {needs})" in message


def test_a_directory_of_an_older_schema_is_refused_by_readers_and_rebuilt_by_a_build(smoke_dir, tmp_path):
    directory = copy_of(smoke_dir, tmp_path)
    shutil.rmtree(directory / STATE_DIR)
    _edit_json(directory / "manifest.json", lambda m: m.update(schema_version=1, toolchain={}))
    message = dglu_build("verify", directory, expect=1)
    assert f"schema_version 1, this dglu-build reads 3; rebuild it: dglu-build compile SPECS -o {directory}" in message
    output = dglu_build("add", "--act", "dswiglu", "--dbias", "-o", directory)  # one of the two it holds
    assert f"{len(SMOKE)} variants, 0 up to date, {len(SMOKE)} to compile" in output
    assert snapshot(directory) == snapshot(smoke_dir)


# --- concurrent and killed builds ------------------------------------------------------


def test_builds_into_a_locked_directory_wait_then_compile_each_variant_once(tmp_path):
    out = tmp_path / "shared"
    with open_store(out, lambda line: None):  # another build holds the directory
        builds = [dglu_build_process("compile", SMOKE_SPECS, "-o", out, "-j", 1) for _ in range(2)]
        for build in builds:
            assert "locked by pid" in next(line for line in build.stdout if "waiting for" in line)
        assert not (out / "manifest.json").exists()
    outputs = [build.communicate(timeout=300)[0] for build in builds]
    assert [build.returncode for build in builds] == [0, 0], outputs
    compiled = sorted(int(output.split(" compiled,")[0].rsplit(" ", 1)[1]) for output in outputs)
    assert compiled == [0, len(SMOKE)], outputs  # the second found the first's work up to date
    assert "variants verified" in dglu_build("verify", out)


def test_a_build_killed_midway_leaves_a_valid_directory_and_the_rerun_finishes_it(smoke_dir, tmp_path):
    out = tmp_path / "killed"
    build = dglu_build_process("compile", SMOKE_SPECS, "-o", out, "-j", 1)
    for line in build.stdout:
        if line.startswith(f"[1/{len(SMOKE)}"):
            break
    os.killpg(build.pid, signal.SIGKILL)  # the build and its compiler process, mid-compile
    build.wait()
    assert not (out / "manifest.json").exists()  # written last: nothing half-listed
    (out / f".{SMOKE[0]}.cubin.deadbeef.tmp").write_bytes(b"half a file")  # as a kill mid-write leaves
    output = dglu_build("compile", SMOKE_SPECS, "-o", out)
    assert f"{len(SMOKE)} variants, 1 up to date, {len(SMOKE) - 1} to compile" in output
    assert snapshot(out) == snapshot(smoke_dir)


# --- failures and defaults ---------------------------------------------------------------


def test_compiler_failures_are_collected_with_each_variant_and_its_message(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_DSL_COMPILER_OPT", "--no-such-flag")  # every compile fails in the compiler
    out = tmp_path / "out"
    output = dglu_build("compile", SMOKE_SPECS, "-o", out, "-j", 2, expect=1)
    assert f"{out}: 0 compiled, 0 up to date, {len(SMOKE)} failed" in output
    assert f"Error: {len(SMOKE)} variant(s) failed to build:" in output
    for name in SMOKE:
        assert f"FAILED {name}: ValueError: failed to add `cute-to-nvvm`" in output
        assert f"  {name}:\n    ValueError: " in output
    assert output.count("no-such-flag=true") >= 2 * len(SMOKE)
    assert not (out / "manifest.json").exists()


def test_the_default_output_is_the_directory_the_runtime_searches(user_cache):
    from dglu.manifest import search_path

    from dglu_build.cli import user_variant_dir

    (user_entry,) = [entry for entry in search_path() if entry.origin == "user variants"]
    assert user_entry.directory == user_variant_dir() == user_cache / "dglu" / "variants"
