"""Find and read artifact directories: a manifest.json plus the cubins it describes.

Search order (docs/manifest.md is the format, dglu.contract.schema its reader):

1. each directory of ``$DGLU_CUBIN_PATH`` (``os.pathsep``-separated), in order; a listed
   directory without a manifest.json is an error;
2. the user variant directory, ``$XDG_CACHE_HOME/dglu/variants`` (``~/.cache/dglu/variants``
   when XDG_CACHE_HOME is unset), written by ``dglu-build``; skipped when it has no manifest;
3. the package's own ``dglu/_cubins/`` (shipped in the wheel); skipped when absent.

Variants keep their manifest order; directories follow the search order, and when two
directories hold a usable variant of the same name the earlier one wins. A variant is
stale, and never used, when another dglu version built it, or when it comes from
DGLU_CUBIN_PATH or the user directory and the package has a variant of its name built
from other kernel sources (``build.source_hash``). This module only reads files.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from .contract.dispatch import DispatchRule, read_dispatch
from .contract.reader import VariantEntry, read_manifest
from .contract.records import Record
from .contract.schema import MANIFEST_FILE, Manifest, Variant
from .errors import ManifestError

PACKAGE_ORIGIN = "package"


class SearchEntry(Record):
    """One directory of the search path and why it is searched."""

    directory: Path
    origin: str
    required: bool


def search_path(environ: Mapping[str, str] | None = None) -> list[SearchEntry]:
    """The artifact directories to read, in search order (see the module docstring)."""
    env = os.environ if environ is None else environ
    entries = [
        SearchEntry(Path(d), "DGLU_CUBIN_PATH", required=True)
        for d in env.get("DGLU_CUBIN_PATH", "").split(os.pathsep)
        if d
    ]
    cache_home = (
        Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    )
    entries.append(SearchEntry(cache_home / "dglu" / "variants", "user variants", required=False))
    entries.append(SearchEntry(Path(__file__).parent / "_cubins", PACKAGE_ORIGIN, required=False))
    return entries


def load_manifests(
    entries: list[SearchEntry], arch: str | None = None
) -> tuple[tuple[SearchEntry, Manifest], ...]:
    """Read the manifest of every searched directory that has one (only ``arch``'s
    variants, when given), lazily: a variant's fields past its identity are checked when it
    is selected (VariantEntry)."""
    manifests = []
    for entry in entries:
        if (entry.directory / MANIFEST_FILE).is_file():
            manifests.append((entry, read_manifest(entry.directory, lazy=True, arch=arch)))
        elif entry.required:
            raise ManifestError(
                f"{entry.origin} lists {entry.directory}, which has no {MANIFEST_FILE}"
            )
    return tuple(manifests)


class StaleVariant(Record):
    """A variant the runtime will not use, and why."""

    variant: Variant | VariantEntry
    reason: str


def stale_reason(
    variant: Variant | VariantEntry, origin: str, package: Mapping[str, Variant | VariantEntry], version: str
) -> str | None:
    """Why ``variant`` (found in a directory of ``origin``) must not be used by this dglu
    (of ``version``), or None."""
    if variant.build.dglu_version != version:
        return f"built by dglu {variant.build.dglu_version}, this is dglu {version}"
    shipped = package.get(variant.name)
    if origin != PACKAGE_ORIGIN and shipped and shipped.build.source_hash != variant.build.source_hash:
        return (
            f"built from other kernel sources (source_hash {variant.build.source_hash[:12]}) "
            f"than the package's variant of that name ({shipped.build.source_hash[:12]})"
        )
    return None


def merged_variants(
    manifests: tuple[tuple[SearchEntry, Manifest], ...],
) -> tuple[tuple[Variant | VariantEntry, ...], tuple[StaleVariant, ...]]:
    """The usable variants in search order (a name seen earlier hides later ones), and
    the stale ones."""
    from . import __version__

    package = {
        v.name: v for entry, m in manifests if entry.origin == PACKAGE_ORIGIN for v in m.variants
    }
    seen: dict[str, Variant | VariantEntry] = {}
    stale = []
    for entry, manifest in manifests:
        for variant in manifest.variants:
            reason = stale_reason(variant, entry.origin, package, __version__)
            if reason:
                stale.append(StaleVariant(variant, reason))
            else:
                seen.setdefault(variant.name, variant)
    return tuple(seen.values()), tuple(stale)


@functools.cache
def installed_manifests(arch: str | None = None) -> tuple[tuple[SearchEntry, Manifest], ...]:
    """The manifests of the default search path (only ``arch``'s variants, when given),
    read once per process and architecture."""
    return load_manifests(search_path(), arch)


# arch -> (the manifests, their usable variants)
_merged: dict[str | None, tuple[object, tuple[VariantEntry, ...]]] = {}


def installed_variants(arch: str | None = None) -> tuple[VariantEntry, ...]:
    """Every variant of ``arch`` (None: of every architecture) this process can launch, in
    selection order (read lazily: dglu.contract.reader.full_variant reads and checks the
    one a call selects); merged once per reading of the manifests. A call reads only its
    device's architecture's: an index's other records are not parsed."""
    manifests = installed_manifests(arch)
    merged = _merged.get(arch)
    if merged is None or merged[0] is not manifests:
        merged = _merged[arch] = (manifests, merged_variants(manifests)[0])
    return merged[1]


@functools.cache
def installed_dispatch() -> tuple[DispatchRule, ...]:
    """The dispatch rules of the searched directories that have a manifest
    (dglu.contract.dispatch), earlier directories' first; read once per process."""
    return tuple(
        rule
        for entry in search_path()
        if (entry.directory / MANIFEST_FILE).is_file()
        for rule in read_dispatch(entry.directory)
    )
