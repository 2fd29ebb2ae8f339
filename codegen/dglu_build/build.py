"""Build variants into an artifact directory, incrementally and in parallel.

After a build every variant of the directory (those asked for plus those
already there) is up to date: it is recompiled only when its build key
(dglu_build.build_key) differs from the one it was built under, or its cubin is
missing or altered. Each compiled variant is checked against its own cubin,
then stored at once (cubin, then record), so a build that fails or is killed
keeps the work it finished; the manifest is rewritten last. The directory's
format is docs/manifest.md; its safety rules are codegen.artifact_store's.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dglu_build.abi_check import AbiMismatch, check_variant_cubin
from dglu_build.artifact_store import ArtifactStore, Record, open_store
from dglu_build.build_key import SYMBOL_PREFIX, BuildInputs, current_build_inputs
from dglu_build.compile_pool import CompileFn, CompileJob, CompileOutcome, available_cores, compile_all
from dglu_build.kernels import compile_variant
from dglu_build.specs import SpecError, Variant, expand_fields


Progress = Callable[[str], None]


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
    progress: Progress | None = None,
    compile_fn: CompileFn = compile_variant,
) -> BuildResult:
    """Bring ``out_dir`` up to date with ``variants`` (and what it already holds).

    Compiles in ``jobs`` processes (default: every core); ``progress`` hears
    one line per step (default: stderr); ``compile_fn(key, symbol_prefix)``
    returns an object with ``cubin``, ``kernels`` and ``tma``
    (dglu_build.kernels.compile_variant). Raises BuildFailed, after storing the
    variants that built, if any failed.
    """
    if not variants:
        raise BuildError("variants: got none, need at least one to build")
    report = progress or print_to_stderr
    with open_store(out_dir, report) as store:
        result = build_in_store(store, variants, jobs or available_cores(), report, compile_fn)
    if result.failed:
        raise BuildFailed(result)
    return result


def build_in_store(
    store: ArtifactStore, variants: Sequence[Variant], jobs: int, report: Progress, compile_fn: CompileFn
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
    report(
        f"{store.directory}: {len(targets)} variants, {len(current)} up to date, {len(jobs_to_run)} to compile"
        + (f" in {workers} process{'es' if workers > 1 else ''}" if workers else "")
    )
    clock = _Eta(len(jobs_to_run))
    for outcome in compile_all(jobs_to_run, jobs, compile_fn):
        name = outcome.job.name
        try:
            current.append(_store_outcome(store, outcome, targets[name], inputs))
            result.compiled.append(name)
            report(f"{clock.tick()} {name} {outcome.seconds:.1f}s")
        except (AbiMismatch, BuildError) as err:
            result.failed[name] = str(err)
            report(f"{clock.tick()} FAILED {name}: {' '.join(str(err).split())[:200]}")
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
    where = f"variant {variant.name}"
    if outcome.output is None:
        raise BuildError(outcome.error or "no output")
    cubin, kernels, tma = outcome.output
    info = check_variant_cubin(cubin, variant.arch, kernels, tma, where)
    toolchain = {
        "cutlass_dsl": inputs.toolchain.get("nvidia-cutlass-dsl", "unknown"),
        "ptxas": info.toolkit,
        "python": inputs.toolchain["python"],
    }
    described = {"name": variant.name, "key": variant.key, "kernels": kernels, "tma": tma}
    return store.put(described, cubin, inputs.key_for(variant.key), toolchain)


class _Eta:
    """Progress prefix "[done/total] ... ETA": the time left from the mean time per variant so far."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.start = total, 0, time.monotonic()

    def tick(self) -> str:
        self.done += 1
        left = (time.monotonic() - self.start) / self.done * (self.total - self.done)
        return f"[{self.done}/{self.total}, ETA {_minutes(left)}]"


def _minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}:{int(seconds) % 60:02d}"


def print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
