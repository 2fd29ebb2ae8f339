"""Build variants into an artifact directory, incrementally and in parallel.

After a build every variant of the directory (those asked for plus those
already there) is up to date: it is recompiled only when its build key
(dglu_build.build_key) differs from the one it was built under, or its cubin is
missing or altered. Each compiled variant is checked against its own cubin,
then stored at once (cubin, then record), so a build that fails or is killed
keeps the work it finished; the manifest is rewritten last. A variant's
manifest entry (docs/manifest.md, VARIANT) is what its kernel family declares
(``CompiledVariant.entry``) plus what the build knows: name, key, the build's
versions and the driver the cubin needs. The directory's safety rules are
dglu_build.artifact_store's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dglu.contract.dispatch import DISPATCH_FILE, DispatchRule, dispatch_text
from dglu_build.abi_check import AbiMismatch, check_variant_cubin
from dglu_build.atomic_write import write_atomic
from dglu_build.artifact_store import STORED_FIELDS, ArtifactStore, Record, open_store
from dglu_build.build_key import SYMBOL_PREFIX, BuildInputs, current_build_inputs
from dglu_build.compile_pool import CompileFn, CompileJob, CompileOutcome, available_cores, compile_all
from dglu_build.progress import BuildProgress, LineProgress
from dglu_build.specs import SpecError, Variant, expand_fields

# The VARIANT fields a kernel family declares for each variant it compiles (CompiledVariant.entry).
COMPILED_FIELDS = ("family", "front", "m_aligned", "arguments", "scalars", "limits", "views", "workspaces", "kernels", "tma")
# The fields the build itself writes (the store adds STORED_FIELDS).
BUILD_FIELDS = ("name", "key", "build", "min_driver")


class BuildError(RuntimeError):
    """Variants that cannot go into an artifact directory."""


@dataclass
class BuildResult:
    """What a build did to its directory."""

    directory: Path
    manifest: dict[str, Any] | None = None
    compiled: list[str] = field(default_factory=list)
    up_to_date: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # name -> the compiler's (or the check's) message

    def summary(self) -> str:
        listed = len(self.manifest["variants"]) if self.manifest else 0
        return (
            f"{self.directory}: {len(self.compiled)} compiled, {len(self.up_to_date)} up to date, "
            f"{len(self.failed)} failed; the manifest lists {listed} variants"
        )


class BuildFailed(BuildError):
    """Some variants failed; the others were stored and listed. ``result`` says which."""

    def __init__(self, result: BuildResult) -> None:
        self.result = result
        failures = "\n".join(f"  {name}:\n    " + message.replace("\n", "\n    ") for name, message in result.failed.items())
        super().__init__(f"{len(result.failed)} variant(s) failed to build:\n{failures}")


def build_artifacts(
    variants: Sequence[Variant],
    out_dir: str | Path,
    *,
    jobs: int | None = None,
    progress: BuildProgress | Callable[[str], None] | None = None,
    compile_fn: CompileFn | None = None,
) -> BuildResult:
    """Bring ``out_dir`` up to date with ``variants`` (and what it already holds).

    Compiles in ``jobs`` processes (default: every core); ``progress`` hears
    each step (a callable gets them as lines, see LineProgress; default: lines
    on stderr); ``compile_fn(key, symbol_prefix)``
    returns an object with ``cubin`` and ``entry`` (default:
    dglu_build.kernels.compile_variant, imported only then). Raises
    BuildFailed, after storing the variants that built, if any failed.
    """
    if not variants:
        raise BuildError("variants: got none, need at least one to build")
    report = LineProgress(progress or print_to_stderr) if progress is None or callable(progress) else progress
    with open_store(out_dir, report.note) as store:
        result = build_in_store(store, variants, jobs or available_cores(), report, compile_fn or default_compile_fn())
    if result.failed:
        raise BuildFailed(result)
    return result


def default_compile_fn() -> CompileFn:
    """dglu_build.kernels.compile_variant (importing it may import CuTe DSL)."""
    from dglu_build.kernels import compile_variant

    return compile_variant


def build_in_store(
    store: ArtifactStore, variants: Sequence[Variant], jobs: int, report: BuildProgress, compile_fn: CompileFn
) -> BuildResult:
    """``build_artifacts`` on a store whose lock the caller holds."""
    inputs = current_build_inputs()
    known = store.known_records()
    targets = {**_variants_of(known, store.directory), **{variant.name: variant for variant in variants}}
    result = BuildResult(store.directory)
    current: list[Record] = []
    jobs_to_run = []
    for name in sorted(targets):
        record = known.get(name)
        if record is not None and record.build_key == inputs.key_for(targets[name].key) and store.cubin(record):
            current.append(record)
            result.up_to_date.append(name)
        else:
            jobs_to_run.append(CompileJob(name, targets[name].key, SYMBOL_PREFIX + name))
    workers = min(jobs, len(jobs_to_run))
    report.note(
        f"{store.directory}: {len(targets)} variants, {len(current)} up to date, {len(jobs_to_run)} to compile"
        + (f" in {workers} process{'es' if workers > 1 else ''}" if workers else "")
    )
    report.start(len(jobs_to_run))
    try:
        for outcome in compile_all(jobs_to_run, jobs, compile_fn):
            name = outcome.job.name
            try:
                current.append(_store_outcome(store, outcome, targets[name], inputs))
                result.compiled.append(name)
                report.finished(name, outcome.seconds)
            except (AbiMismatch, BuildError) as err:
                result.failed[name] = str(err)
                report.finished(name, outcome.seconds, str(err))
    finally:
        report.close()
    result.manifest = store.write_manifest(current)
    return result


def _variants_of(records: dict[str, Record], directory: Path) -> dict[str, Variant]:
    """The variants behind ``records``, each key passed through the spec schema again."""
    variants = {}
    for name, record in records.items():
        where = f"{directory}: variant {name}"
        try:
            (variant,) = expand_fields(dict(record.entry["key"]), where)
        except (SpecError, KeyError, TypeError, ValueError) as err:
            raise BuildError(
                f"{where} can no longer be built by these kernels ({err}); "
                f"build into another directory or delete this one"
            ) from None
        if variant.name != name:
            raise BuildError(f"{where}: its key names the variant {variant.name}")
        variants[name] = variant
    return variants


def _store_outcome(store: ArtifactStore, outcome: CompileOutcome, variant: Variant, inputs: BuildInputs) -> Record:
    """Check one compiled variant against its cubin and store it; BuildError if it failed or disagrees."""
    if outcome.output is None:
        raise BuildError(outcome.error or "no output")
    cubin, compiled = outcome.output
    where = f"variant {variant.name}"
    _check_compiled_fields(compiled, where)
    entry = {"name": variant.name, "key": variant.key, **compiled}
    info = check_variant_cubin(cubin, entry, where)
    entry["build"] = {
        "dglu_version": inputs.dglu_version,
        "source_hash": inputs.sources_of(variant.key),
        "toolchain": {
            "cutlass_dsl": inputs.toolchain.get("nvidia-cutlass-dsl", "unknown"),
            "ptxas": info.toolkit,
            "python": inputs.toolchain["python"],
        },
    }
    entry["min_driver"] = info.min_driver
    return store.put(entry, cubin, inputs.key_for(variant.key))


def _check_compiled_fields(compiled: dict[str, Any], where: str) -> None:
    """BuildError unless the family declared every COMPILED_FIELDS and none the build writes."""
    missing = [name for name in COMPILED_FIELDS if name not in compiled]
    if missing:
        raise BuildError(f"{where}: the kernel family's entry lacks {', '.join(missing)}")
    clashing = [name for name in (*BUILD_FIELDS, *STORED_FIELDS) if name in compiled]
    if clashing:
        raise BuildError(f"{where}: the kernel family's entry sets {', '.join(clashing)}, which the build writes")


def print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def write_dispatch(directory: Path, rules: Sequence[DispatchRule]) -> None:
    """Write ``rules`` (the spec files' ``dispatch:``) as ``directory``'s dispatch.json
    (dglu.contract.dispatch), or remove a stale one when there are none."""
    path = directory / DISPATCH_FILE
    if rules:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(path, dispatch_text(list(rules)).encode())
    else:
        path.unlink(missing_ok=True)
