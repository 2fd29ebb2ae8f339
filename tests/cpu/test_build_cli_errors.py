"""dglu-build's bad input: each is named with what was given and what is needed, before
anything is compiled or written; and the commands that do not compile never import CuTe DSL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dglu_build.artifact_store import StoreError, check_entry
from dglu_build.cli import main
from dglu_build.shard import Shard
from dglu_build.specs import load_specs

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SPECS = REPO_ROOT / "kernel_specs" / "smoke.yaml"
COMMANDS = sorted(main.commands)


@pytest.fixture(autouse=True)
def user_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def failing(*args, status: int) -> str:
    """Run the CLI expecting exit ``status``; return what it printed."""
    result = CliRunner().invoke(main, [str(arg) for arg in args], catch_exceptions=False)
    assert result.exit_code == status, result.output
    return result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["compile", SMOKE_SPECS, "--shard", "0/2", "-o", "OUT"], "Invalid value for '--shard': got '0/2', needs I/N with 1 <= I <= N"),
        (["compile", SMOKE_SPECS, "--shard", "3/2", "-o", "OUT"], "Invalid value for '--shard': got '3/2', needs I/N"),
        (["compile", SMOKE_SPECS, "--shard", "half", "-o", "OUT"], "Invalid value for '--shard': got 'half', needs I/N"),
        (["compile", SMOKE_SPECS, "-j", "0", "-o", "OUT"], "Invalid value for '-j' / '--jobs': 0 is not in the range x>=1"),
        (["compile", "-o", "OUT"], "Missing argument 'SPECS...'"),
        (["add", "--act", "dgeglu", "--tile", "128by128", "-o", "OUT"], "Invalid value for '--tile': got '128by128', needs MxN such as 128x128"),
        (["add", "--act", "dgeglu", "--cluster", "2", "-o", "OUT"], "Invalid value for '--cluster': got '2', needs MxN"),
        (["add", "--act", "dgeglu", "--act-param", "geglu_alpha", "-o", "OUT"], "Invalid value for '--act-param': got 'geglu_alpha', needs NAME=NUMBER"),
        (["add", "--tile", "128x64", "-o", "OUT"], "Missing option '--act'"),
        (["merge", "nowhere", "-o", "OUT"], "Directory 'nowhere' does not exist"),
    ],
)
def test_bad_options_are_named_with_what_they_need(tmp_path, args, expected):
    out = tmp_path / "out"
    assert expected in failing(*[out if arg == "OUT" else arg for arg in args], status=2)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["add", "--act", "relu"], "dglu-build add: field 'act_func': got 'relu', allowed: 'dswiglu', 'dgeglu'"),
        (["add", "--act", "dgeglu", "--tile", "128x100"], "dglu-build add: fields (tile_m, tile_n): got (128, 100), allowed: "),
        (["add", "--act", "dgeglu", "--ab-dtype", "fp8"], "dglu-build add: field 'ab_dtype': got 'fp8', allowed with arch 'sm_90a': 'bf16'"),
        (["add", "--act", "dswiglu", "--act-param", "geglu_alpha=1"], "unknown parameter 'geglu_alpha' for dswiglu; allowed: none"),
        (["add", "--act", "dgeglu", "--act-param", "geglu_alpha=nan"], "geglu_alpha: got float nan, needs a finite number"),
        (["compile", SMOKE_SPECS, "--arch", "sm_80"], "--arch sm_80: field 'arch': got 'sm_80', allowed: 'sm_100a', 'sm_103a', 'sm_90a'"),
        (["compile", SMOKE_SPECS, "--shard", "3/3"], "--shard 3/3: the specs have 2 variants, so this shard is empty"),
        (["compile", "nope.yaml"], "nope.yaml: cannot read spec file: No such file or directory"),
    ],
)
def test_bad_values_are_rejected_before_anything_is_written(tmp_path, args, expected):
    out = tmp_path / "out"
    assert expected in failing(*args, "-o", out, status=1)
    assert not out.exists()


def test_a_bad_spec_file_is_named_with_its_entry_and_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SMOKE_SPECS.read_text().replace("dbias: false", "dbias: no"))
    message = failing("compile", spec, "-o", tmp_path / "out", status=1)
    assert f"{spec}: variants[1] (line " in message and "field 'dbias': got string 'no', needs a boolean" in message
    assert not (tmp_path / "out").exists()


def test_an_output_path_that_is_a_file_is_refused(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert f"Directory '{not_a_dir}' is a file" in failing("add", "--act", "dgeglu", "-o", not_a_dir, status=2)
    assert f"Directory '{not_a_dir}' is a file" in failing("merge", tmp_path, "-o", not_a_dir, status=2)
    assert not_a_dir.read_text() == "x"


def test_reading_commands_name_a_directory_without_a_manifest(tmp_path):
    for command in (["list", tmp_path], ["verify", tmp_path], ["show", "x", "--dir", tmp_path]):
        assert f"{tmp_path}: no manifest.json (not an artifact directory)" in failing(*command, status=1)
    assert f"{tmp_path / 'absent'}: no such directory" in failing("verify", tmp_path / "absent", status=1)


def test_a_manifest_naming_files_outside_its_directory_is_refused(tmp_path):
    manifest = {"schema_version": 3, "fronts": {}, "variants": [{"name": "x", "cubin": "../../etc/passwd", "sha256": "0"}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    message = failing("verify", tmp_path, status=1)
    assert "variants[0]: cubin '../../etc/passwd' is not a .cubin file name inside the directory" in message
    with pytest.raises(StoreError, match=r"variant name '\.\./x' is not a name dglu-build writes"):
        check_entry({"name": "../x", "cubin": "x.cubin"}, "entry")


def test_shards_split_sorted_names_disjointly_and_evenly():
    names = [f"v{index:02d}" for index in range(10)]
    shares = [Shard(index, 4).select(list(reversed(names))) for index in range(1, 5)]
    assert shares[0] == ["v00", "v04", "v08"]
    assert sorted(sum(shares, [])) == names
    assert sorted(len(share) for share in shares) == [2, 2, 3, 3]


def test_help_of_every_command_shows_an_example_without_importing_cutlass():
    probe = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from dglu_build.cli import main\n"
        f"for command in {COMMANDS!r}:\n"
        "    result = CliRunner().invoke(main, [command, '--help'])\n"
        "    assert result.exit_code == 0 and 'Example' in result.output and 'dglu-build ' + command in result.output, command\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cutlass'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "codegen"), str(REPO_ROOT / "runtime")])}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert COMMANDS == ["add", "check", "compile", "list", "merge", "show", "verify", "wheel"]



# --- dglu-build check --------------------------------------------------------------------


def test_check_prints_the_variants_of_valid_specs(tmp_path):
    result = CliRunner().invoke(main, ["check", str(SMOKE_SPECS)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [variant.name for variant in load_specs(SMOKE_SPECS)]
    assert f"2 variants in {SMOKE_SPECS}: valid" in result.stderr


def test_check_prints_the_first_error_and_exits_1(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SMOKE_SPECS.read_text().replace("act_func: dgeglu", "act_func: relu"))
    message = failing("check", SMOKE_SPECS, spec, status=1)
    assert f"Error: {spec}: variants[1] (line " in message and "field 'act_func': got 'relu', allowed: 'dswiglu'" in message
    assert "sm90a_" not in message  # the variants are printed only when every file is valid


def test_compiling_without_the_build_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr("dglu_build.cli.BUILD_EXTRA_MODULES", ("dglu_no_such_module",))
    expected = "needs the build extra (no module 'dglu_no_such_module'): pip install 'dglu[build]'"
    for command, args in [("compile", [SMOKE_SPECS]), ("add", ["--act", "dswiglu"]), ("wheel", [SMOKE_SPECS])]:
        message = failing(command, *args, "-o", tmp_path / "out", status=1)
        assert f"Error: dglu-build {command} compiles kernels and {expected}" in message
    assert not (tmp_path / "out").exists()
