"""``dglu-build``: compile kernel variants into artifact directories and wheels.

Commands that compile (``compile``, ``add``, ``wheel``) need the build extra
(CuTe DSL) and import it when they run; ``--help``, ``check``, ``list``,
``show``, ``verify`` and ``merge`` never do, so they work where only the
wheel is installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from dglu.contract.keys import KEY_FIELD_TABLE, KEY_TABLE

from dglu_build.abi_check import AbiMismatch
from dglu_build.artifact_store import Record, StoreError, open_store, read_manifest_file
from dglu_build.build_key import current_build_inputs
from dglu_build.compile_pool import available_cores
from dglu_build.shard import Shard

_MN = re.compile(r"([0-9]+)x([0-9]+)")
_USER_ERRORS: tuple[type[Exception], ...] = (StoreError, AbiMismatch)


def user_variant_dir() -> Path:
    """The directory the dglu runtime searches for user-built variants."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "dglu" / "variants"


@contextmanager
def _user_errors(*more: type[Exception]) -> Iterator[None]:
    """Show the expected kinds of bad input as one clear message and exit status 1."""
    try:
        yield
    except (*_USER_ERRORS, *more) as err:
        raise click.ClickException(str(err)) from None


def _progress(line: str) -> None:
    click.echo(line, err=True)


# Modules the compiling commands need beyond the wheel's own dependencies.
BUILD_EXTRA_MODULES = ("cutlass",)


def require_build_extra(command: str) -> None:
    """Exit with what to install when the build extra is missing (checked before anything is written)."""
    missing = [name for name in BUILD_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise click.ClickException(
            f"dglu-build {command} compiles kernels and needs the build extra "
            f"(no module {missing[0]!r}): pip install 'dglu[build]'"
        )


def _out_option(help_text: str):
    return click.option(
        "-o",
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        default=user_variant_dir,
        show_default="$XDG_CACHE_HOME/dglu/variants, which the dglu runtime searches",
        help=help_text,
    )


_jobs_option = click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=available_cores,
    show_default="the machine's cores",
    help="Compile in this many processes.",
)
_dir_argument = click.argument(
    "directory", type=click.Path(file_okay=False, path_type=Path), default=user_variant_dir, required=False
)
_specs_argument = click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))


class _ShardType(click.ParamType):
    name = "I/N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Shard:
        if isinstance(value, Shard):
            return value
        try:
            return Shard.parse(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Compile dglu's kernel variants ahead of time (no GPU needed).

    An artifact directory holds one cubin per variant and the manifest.json
    the dglu runtime reads. Builds are incremental (a variant is recompiled
    only when its fields, the kernel sources, the CuTe DSL version or the
    compile options change), parallel, locked against concurrent builds and
    safe to kill.

    \b
    Examples:
      dglu-build compile kernel_specs/default.yaml -o .artifacts/default
      dglu-build add --act dgeglu --tile 128x64 --dbias
      dglu-build wheel kernel_specs/default.yaml -o dist/
    """


@main.command()
@_specs_argument
@_out_option("Artifact directory to build into; what it already holds is kept up to date too.")
@_jobs_option
@click.option(
    "--arch", "archs", multiple=True, help="Build every variant for this architecture instead of the spec's (repeatable)."
)
@click.option("--shard", type=_ShardType(), help="Build only shard I of N (1-based) of the variants, e.g. 2/4.")
def compile(specs: tuple[Path, ...], out: Path, jobs: int, archs: tuple[str, ...], shard: Shard | None) -> None:
    """Compile every variant of the spec files SPECS into an artifact directory.

    With --shard I/N a build farm splits the variants over N machines (each
    gets the same deterministic share on every run); `dglu-build merge` then
    combines the shards' directories.

    \b
    Examples:
      dglu-build compile kernel_specs/default.yaml -o .artifacts/default -j 8
      dglu-build compile kernel_specs/default.yaml --shard 2/4 -o shard2
    """
    from dglu_build.build import BuildError, write_dispatch
    from dglu_build.specs import SpecError, expand_fields, load_dispatch_files, load_spec_files

    require_build_extra("compile")
    with _user_errors(SpecError, BuildError):
        variants = load_spec_files(specs)
        rules = load_dispatch_files(specs, variants)
        if archs:
            variants = [
                variant
                for arch in archs
                for original in variants
                for variant in expand_fields({**original.key, "arch": arch}, f"--arch {arch}")
            ]
        if shard:
            names = shard.select([variant.name for variant in variants])
            if not names:
                raise BuildError(f"--shard {shard}: the specs have {len(variants)} variants, so this shard is empty")
            variants = [variant for variant in variants if variant.name in set(names)]
        _build(variants, out, jobs)
        if not shard:  # a shard's directory holds a part of the variants; the wheel's build writes the table
            write_dispatch(out, rules)


class _MxN(click.ParamType):
    """``128x64`` -> (128, 64)."""

    name = "mxn"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "MxN"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        match = _MN.fullmatch(value)
        if not match:
            self.fail(f"got {value!r}, needs MxN such as 128x128", param, ctx)
        return int(match[1]), int(match[2])


class _ActParam(click.ParamType):
    """``geglu_alpha=1.702`` -> ("geglu_alpha", 1.702)."""

    name = "NAME=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[str, float]:
        if isinstance(value, tuple):
            return value
        name, _, number = value.partition("=")
        try:
            return name.strip(), float(number)
        except ValueError:
            self.fail(f"got {value!r}, needs NAME=NUMBER such as geglu_alpha=1.702", param, ctx)


def _add_field_options(command):
    """Decorate ``command`` with one option per variant key field (dglu.contract.keys
    .KEY_TABLE: names, defaults and descriptions), in the table's order: repeatable values
    (required where the field has no build default: --act), act_params' NAME=VALUE
    constants, the MxN pairs of tile and cluster (as ``tiles`` and ``clusters``), switches
    and flags."""
    for field in reversed(KEY_TABLE):
        repeatable = f"{field.description} (repeatable)."
        if field.style == "value":
            if field.build_default is None:
                default = {"required": True}
            else:
                default = {"default": [field.build_default], "show_default": True}
            command = click.option(field.option, field.name, type=field.kind, multiple=True, help=repeatable,
                                   **default)(command)
        elif field.style == "params":
            command = click.option(field.option, field.name, type=_ActParam(), multiple=True, help=repeatable)(command)
        elif field.style == "joint" and field.name.endswith("_m"):
            pair = field.name.removesuffix("_m")
            second = KEY_FIELD_TABLE[f"{pair}_n"]
            command = click.option(
                field.option, f"{pair}s", type=_MxN(), multiple=True,
                default=[f"{field.build_default}x{second.build_default}"], show_default=True, help=repeatable,
            )(command)
        elif field.style in ("switch", "flag"):
            command = click.option(
                f"{field.option}/{field.negated}", field.name, default=field.build_default, show_default=True,
                help=f"{field.description}.",
            )(command)
    return command


@main.command()
@_add_field_options
@_out_option("Artifact directory to add to.")
@_jobs_option
def add(
    act_params: tuple[tuple[str, float], ...],
    tiles: tuple[tuple[int, int], ...],
    clusters: tuple[tuple[int, int], ...],
    out: Path,
    jobs: int,
    **listed: Any,
) -> None:
    """Add the variants described by the options to an artifact directory.

    Each option may be repeated; every combination is added. Without -o the
    variants go where the dglu runtime finds them, and a call that found no
    kernel prints the command that builds it. Options take the values of the
    spec files' fields (see kernel_specs/).

    \b
    Examples:
      dglu-build add --act dgeglu --dbias
      dglu-build add --act dswiglu --act dgeglu --tile 128x64 -o .artifacts/extra
      dglu-build add --act dgeglu --act-param geglu_alpha=1.0 --act-param linear_offset=0.0
      dglu-build add --act dswiglu --dbias --deterministic
      dglu-build add --act dgeglu --act-out
      dglu-build add --ab-dtype e5m2 --d-dtype e5m2 --act dgeglu --dbias   # MXFP8
      dglu-build add --arch sm_100a --act dswiglu --tile 256x256 --cluster 2x1 --experts 12   # Blackwell
      dglu-build add --arch sm_100a --ab-dtype e4m3 --d-dtype e4m3 --act dswiglu --tile 256x256 --cluster 2x1 \
          --experts 8 --discrete-col-sfd   # Blackwell MXFP8, SFD_col per expert
    """
    from dglu_build.build import BuildError
    from dglu_build.specs import SpecError, expand_fields

    require_build_extra("add")
    # repeatable options give lists (every combination is built); switches and flags one value
    fields = {name: list(value) if isinstance(value, tuple) else value for name, value in listed.items()}
    fields["act_params"] = dict(act_params)
    shapes = [
        {"tile_m": tile_m, "tile_n": tile_n, "cluster_m": cluster_m, "cluster_n": cluster_n}
        for tile_m, tile_n in tiles
        for cluster_m, cluster_n in clusters
    ]
    with _user_errors(SpecError, BuildError):
        variants = [variant for shape in shapes for variant in expand_fields({**fields, **shape}, "dglu-build add")]
        _build(list({variant.name: variant for variant in variants}.values()), out, jobs)


def _build(variants: list, out: Path, jobs: int) -> None:
    from dglu_build.build import BuildFailed, build_artifacts
    from dglu_build.progress import progress_for

    progress = progress_for(sys.stderr)
    try:
        result = build_artifacts(variants, out, jobs=jobs, progress=progress)
    except BuildFailed as err:
        click.echo(err.result.summary(), err=True)
        raise click.ClickException(str(err)) from None
    click.echo(result.summary())


@main.command()
@_specs_argument
def check(specs: tuple[Path, ...]) -> None:
    """Validate the spec files SPECS and print the variants they give, without compiling.

    Needs only the installed wheel (no CuTe DSL). Prints the first error,
    naming the file, entry, line and field, and exits with status 1.

    \b
    Example:
      dglu-build check kernel_specs/default.yaml
    """
    from dglu_build.specs import SpecError, load_spec_files

    with _user_errors(SpecError):
        variants = load_spec_files(specs)
    for variant in variants:
        click.echo(variant.name)
    click.echo(f"{len(variants)} variants in {', '.join(map(str, specs))}: valid", err=True)


@main.command(name="list")
@_dir_argument
@click.option("--json", "as_json", is_flag=True, help="Print the variants' keys and status as JSON.")
def list_variants(directory: Path, as_json: bool) -> None:
    """List the variants built in DIRECTORY, with their key fields and whether they are up to date.

    A variant is stale when the kernel sources, the CuTe DSL or the compile
    options here differ from those it was built with; the next build into
    the directory recompiles it.

    \b
    Examples:
      dglu-build list
      dglu-build list .artifacts/default --json
    """
    with _user_errors():
        manifest, records = _read(directory)
    statuses = _statuses(records)
    if as_json:
        rows = [{"name": e["name"], "key": e["key"], "status": statuses[e["name"]]} for e in manifest["variants"]]
        click.echo(json.dumps(rows, indent=2))
        return
    toolchains = dict.fromkeys(_toolchain_text(entry) for entry in manifest["variants"])
    click.echo(f"{directory}: {len(manifest['variants'])} variants (built with {'; '.join(toolchains)})")
    for entry in manifest["variants"]:
        click.echo(f"  {entry['name']}  [{statuses[entry['name']]}]\n      {describe_key(entry['key'])}")


@main.command()
@click.argument("variant")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=user_variant_dir,
    show_default="the user variant directory",
)
@click.option("--json", "as_json", is_flag=True, help="Print the variant's manifest entry as JSON.")
def show(variant: str, directory: Path, as_json: bool) -> None:
    """Show everything the manifest says about one built VARIANT (by name).

    \b
    Example:
      dglu-build show sm90a_bf16_bf16_bf16_dswiglu_dbias_dense_k_128x128_1x1_static --dir .artifacts/default
    """
    import difflib

    with _user_errors():
        manifest, records = _read(directory)
    entries = {entry["name"]: entry for entry in manifest["variants"]}
    if variant not in entries:
        close = difflib.get_close_matches(variant, list(entries), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else f"; it has: {', '.join(entries) or 'none'}"
        raise click.ClickException(f"{directory} has no variant {variant!r}{hint}")
    entry = entries[variant]
    if as_json:
        click.echo(json.dumps(entry, indent=2))
        return
    lines = [
        entry["name"],
        f"  key:     {describe_key(entry['key'])}",
        f"  cubin:   {directory / entry['cubin']} ({entry['size']} bytes, sha256 {entry['sha256']})",
        f"  status:  {_statuses(records)[variant]}",
        f"  family:  {entry['family']}, rows of an expert aligned to {entry['m_aligned']}",
        f"  build:   dglu {entry['build']['dglu_version']}, {_toolchain_text(entry)}, "
        f"kernel sources {entry['build']['source_hash'][:16]}; needs driver {entry['min_driver']}",
    ]
    for kernel in entry["kernels"]:
        params = ", ".join(f"{param['name']}:{param['kind']}" for param in kernel["params"])
        lines += [
            f"  kernel {kernel['role']}: {kernel['symbol']}",
            f"    block {kernel['block']} cluster {kernel['cluster']} "
            f"dynamic smem {kernel['dynamic_smem_bytes']} B, grid {kernel['grid']}",
            f"    params ({len(kernel['params'])}): {params}",
        ]
    for tensor, rule in entry["tma"].items():
        lines.append(f"  tma {tensor}: {json.dumps(rule)}")
    click.echo("\n".join(lines))


@main.command()
@_dir_argument
def verify(directory: Path) -> None:
    """Re-hash every cubin of DIRECTORY against its manifest and check the manifest's ABI against each cubin.

    Exits with status 1 and names every variant that fails.

    \b
    Example:
      dglu-build verify .artifacts/default
    """
    from dglu_build.verify import verify_directory

    with _user_errors(), open_store(directory, _progress, shared=True):
        verification = verify_directory(directory)
    if verification.problems:
        raise click.ClickException(
            f"{directory}: {len(verification.problems)} problem(s), {len(verification.checked)} variants good:\n  "
            + "\n  ".join(verification.problems)
        )
    click.echo(f"{directory}: {len(verification.checked)} variants verified")


@main.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "-o", "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Artifact directory to merge into."
)
def merge(sources: tuple[Path, ...], out: Path) -> None:
    """Combine the artifact directories SOURCES (e.g. shards) into one, refusing conflicts.

    Each source must verify; a variant held by several must be the same
    build in each; all must come from one toolchain.

    \b
    Example:
      dglu-build merge shard1 shard2 shard3 shard4 -o .artifacts/release
    """
    from dglu_build.merge import merge_directories

    with _user_errors():
        manifest = merge_directories(list(sources), out, _progress)
    listed = len(manifest["variants"]) if manifest else 0
    click.echo(f"{out}: merged {len(sources)} directories; the manifest lists {listed} variants")


@main.command()
@_specs_argument
@click.option(
    "-o",
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Directory to write the wheel into.",
)
@_jobs_option
@click.option(
    "--source",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="the current directory",
    help="The dglu source checkout to build.",
)
@click.option(
    "--build-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default="SOURCE/.artifacts/wheel",
    help="Artifact directory to build the variants in (kept between runs: rebuilds are incremental).",
)
def wheel(specs: tuple[Path, ...], out: Path, jobs: int, source: Path, build_dir: Path | None) -> None:
    """Build the dglu wheel with the variants of the spec files SPECS.

    The wheel's run-time dependencies are cuda-bindings, click and pyyaml
    (`dglu-build check` runs with them); `dglu[build]` adds CuTe DSL and
    hatchling, which compiling needs. A release job passes the directory its
    shards were merged into as --build-dir, so nothing is compiled again.

    \b
    Examples:
      dglu-build wheel kernel_specs/default.yaml -o dist/
      dglu-build wheel kernel_specs/default.yaml --build-dir .artifacts/release
    """
    from dglu_build.build import BuildError
    from dglu_build.specs import SpecError, load_dispatch_files, load_spec_files
    from dglu_build.wheel import build_wheel, check_source

    require_build_extra("wheel")
    build_dir = build_dir or source / ".artifacts" / "wheel"
    with _user_errors(SpecError, BuildError):
        check_source(source)
        variants = load_spec_files(specs)
        load_dispatch_files(specs, variants)  # checked here; the wheel's build hook writes them
        _build(variants, build_dir, jobs)
        built = build_wheel(source, specs, build_dir, out)
    click.echo(f"wrote {built} ({built.stat().st_size / 1e6:.2f} MB, {len(variants)} variants)")


def _read(directory: Path) -> tuple[dict[str, Any], dict[str, Record]]:
    """The manifest and build records of ``directory``, read under its shared lock."""
    with open_store(directory, _progress, shared=True) as store:
        return read_manifest_file(directory), store.known_records()


def _statuses(records: dict[str, Record]) -> dict[str, str]:
    """Per variant: up to date, stale, or no build record (not built by dglu-build)."""
    inputs = current_build_inputs()
    return {
        name: "no build record"
        if record.build_key is None
        else "up to date"
        if record.build_key == inputs.key_for(record.entry["key"])
        else "stale"
        for name, record in records.items()
    }


def _toolchain_text(entry: dict[str, Any]) -> str:
    return ", ".join(f"{name} {version}" for name, version in entry["build"]["toolchain"].items())


def describe_key(key: dict[str, Any]) -> str:
    """A variant key on one line, e.g. ``dgeglu dbias bf16/bf16/bf16 tile 128x128 ...``."""
    params = ", ".join(f"{name}={value}" for name, value in key["act_params"].items())
    return (
        f"{key['act_func']}{f'({params})' if params else ''} {'dbias' if key['dbias'] else 'no dbias'} "
        f"ab/c/d {key['ab_dtype']}/{key['c_dtype']}/{key['d_dtype']} {key['arch']} {key['weight_mode']} "
        f"b_major {key['b_major']} tile {key['tile_m']}x{key['tile_n']} cluster {key['cluster_m']}x{key['cluster_n']} "
        f"{key['scheduler']}{' deterministic' if key.get('deterministic') else ''}"
        f"{' act_out' if key.get('act_out') else ''}"
        + (f" experts {key['experts']}" if key.get("experts") else "")
    )
