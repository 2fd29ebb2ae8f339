"""Find and read artifact directories: a manifest.json plus the cubins it describes.

Search order (docs/manifest.md is the format):

1. each directory of ``$DGLU_CUBIN_PATH`` (``os.pathsep``-separated), in order; a listed
   directory without a manifest.json is an error;
2. the user variant directory, ``$XDG_CACHE_HOME/dglu/variants`` (``~/.cache/dglu/variants``
   when XDG_CACHE_HOME is unset), written by ``dglu-build``; skipped when it has no manifest;
3. the package's own ``dglu/_cubins/`` (shipped in the wheel); skipped when absent.

Variants keep their manifest order; directories follow the search order, and when two
directories hold a variant of the same name the earlier one wins. This module only
reads files: it never writes, least of all next to the package's own files.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from .dtypes import ELEMENT_TYPES
from .errors import ManifestError
from .grid import grid_spec_problem
from .problem import DERIVED_VIEWS, SCALAR_NAMES, TENSOR_NAMES, WORKSPACES
from .tma import TMA_OPTIONS

SCHEMA_VERSION = 1
MANIFEST_FILE = "manifest.json"
KERNEL_ROLES = ("b_descriptors", "main", "dbias_finish")
MAX_TMA_RANK = 3  # the seed views every tensor with rank 3
MAX_TMA_BOX = 256

# Field -> JSON type of a variant key (docs/manifest.md, VARIANT "key").
KEY_FIELDS: dict[str, type] = {
    "arch": str,
    "ab_dtype": str,
    "c_dtype": str,
    "d_dtype": str,
    "act_func": str,
    "act_params": dict,
    "dbias": bool,
    "weight_mode": str,
    "b_major": str,
    "tile_m": int,
    "tile_n": int,
    "cluster_m": int,
    "cluster_n": int,
    "scheduler": str,
}

# Param kind -> the field naming what it carries.
PARAM_SOURCES = {
    "tensormap": "tensor",
    "pointer": "tensor",
    "i32_tuple": "values",
    "i32": "value",
    "f32": "value",
}

_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    list: "a list",
    dict: "an object",
    float: "a number",
}
_SHA256 = re.compile(r"[0-9a-f]{64}")


class VariantKey(NamedTuple):
    """The fields that identify a variant; act_params as sorted (name, value) pairs."""

    arch: str
    ab_dtype: str
    c_dtype: str
    d_dtype: str
    act_func: str
    act_params: tuple[tuple[str, float], ...]
    dbias: bool
    weight_mode: str
    b_major: str
    tile_m: int
    tile_n: int
    cluster_m: int
    cluster_n: int
    scheduler: str

    def as_dict(self) -> dict[str, Any]:
        """The key as the manifest writes it (act_params as a mapping)."""
        fields = {name: getattr(self, name) for name in KEY_FIELDS}
        fields["act_params"] = dict(self.act_params)
        return fields


class ParamSpec(NamedTuple):
    """One kernel parameter, in the kernel's parameter order."""

    name: str
    kind: str
    size: int
    align: int
    tensor: str | None = None
    values: tuple[str, ...] = ()
    optional: bool = False  # pointer only: NULL when the call has no such tensor


class GridSpec(NamedTuple):
    """A grid rule name and its fields (see dglu.grid)."""

    rule: str
    args: Mapping[str, Any]


class KernelSpec(NamedTuple):
    """One __global__ function of a variant's cubin, in launch order."""

    role: str
    symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem_bytes: int
    grid: GridSpec
    params: tuple[ParamSpec, ...]


class TmaRule(NamedTuple):
    """How to encode the TMA descriptor of one tensor (hashable: a cache key)."""

    dtype: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str
    interleave: str


@dataclass(frozen=True, eq=False)
class Variant:
    """One prebuilt kernel variant: its key, its cubin file and how to launch it."""

    name: str
    key: VariantKey
    cubin_path: Path
    sha256: str
    size: int
    kernels: tuple[KernelSpec, ...]
    tma: Mapping[str, TmaRule]


class Manifest(NamedTuple):
    """A parsed manifest.json and the variants it lists."""

    path: Path
    toolchain: Mapping[str, str]
    variants: tuple[Variant, ...]


class _Entry:
    """A JSON object being read, with the location its error messages name."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: expected an object, got {_json_type(data)}")
        self.data = data
        self.where = where

    def take(self, field: str, expected: type) -> Any:
        """The value of a required field of JSON type ``expected``."""
        if field not in self.data:
            raise ManifestError(f"{self.where}: missing field '{field}'")
        value = self.data[field]
        if not _is_json_type(value, expected):
            raise ManifestError(
                f"{self.where}: field '{field}' must be {_TYPE_NAMES[expected]}, "
                f"got {_json_type(value)} {value!r}"
            )
        return value

    def fail(self, field: str, problem: str) -> ManifestError:
        """An error about one field of this entry."""
        return ManifestError(f"{self.where}: field '{field}' {problem}")

    def only(self, allowed: set[str] | dict[str, Any]) -> None:
        """Refuse fields this schema version does not define."""
        unknown = sorted(set(self.data) - set(allowed))
        if unknown:
            raise ManifestError(
                f"{self.where}: unknown field(s) {unknown} (schema_version {SCHEMA_VERSION} "
                f"defines {sorted(allowed)})"
            )


def _is_json_type(value: Any, expected: type) -> bool:
    if expected is int:
        return type(value) is int
    if expected is float:
        return type(value) in (int, float)
    return isinstance(value, expected)


def _json_type(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _int_triple(entry: _Entry, field: str) -> tuple[int, int, int]:
    value = entry.take(field, list)
    if len(value) != 3 or not all(type(v) is int and v > 0 for v in value):
        raise entry.fail(field, f"must be 3 positive integers, got {value!r}")
    return tuple(value)


def _choice(entry: _Entry, field: str, allowed: Any) -> str:
    value = entry.take(field, str)
    if value not in allowed:
        raise entry.fail(field, f"is {value!r}, expected one of {sorted(allowed)}")
    return value


def _read_key(data: Any, where: str) -> VariantKey:
    entry = _Entry(data, where)
    entry.only(KEY_FIELDS)
    fields = {name: entry.take(name, kind) for name, kind in KEY_FIELDS.items()}
    act_params = fields["act_params"]
    bad = {k: v for k, v in act_params.items() if not _is_json_type(v, float)}
    if bad:
        raise entry.fail("act_params", f"must map names to numbers, got {bad!r}")
    fields["act_params"] = tuple(sorted(act_params.items()))
    return VariantKey(**fields)


def _read_tma_rule(data: Any, where: str) -> TmaRule:
    entry = _Entry(data, where)
    entry.only({"dtype", "dims", "box", *TMA_OPTIONS})
    dims = entry.take("dims", list)
    if not 1 <= len(dims) <= MAX_TMA_RANK or sorted(dims) != list(range(len(dims))):
        raise entry.fail(
            "dims",
            f"must order the first 1..{MAX_TMA_RANK} tensor dimensions "
            f"(a permutation of 0..rank-1), got {dims!r}",
        )
    box = entry.take("box", list)
    if len(box) != len(dims) or not all(type(b) is int and 0 < b <= MAX_TMA_BOX for b in box):
        raise entry.fail(
            "box",
            f"must be {len(dims)} integers in 1..{MAX_TMA_BOX} (one per "
            f"dims entry), got {box!r}",
        )
    options = {name: _choice(entry, name, members) for name, (_, members) in TMA_OPTIONS.items()}
    return TmaRule(
        dtype=_choice(entry, "dtype", ELEMENT_TYPES), dims=tuple(dims), box=tuple(box), **options
    )


def _read_param(data: Any, where: str, tma_tensors: set[str]) -> ParamSpec:
    entry = _Entry(data, where)
    kind = _choice(entry, "kind", PARAM_SOURCES)
    source = PARAM_SOURCES[kind]
    entry.only(
        {"name", "kind", "size", "align", source, *(("optional",) if kind == "pointer" else ())}
    )
    spec = {"name": entry.take("name", str), "kind": kind}
    if "optional" in entry.data:
        spec["optional"] = entry.take("optional", bool)
    for field in ("size", "align"):
        spec[field] = entry.take(field, int)
        if spec[field] <= 0:
            raise entry.fail(field, f"must be positive, got {spec[field]}")
    if kind == "tensormap":
        spec["tensor"] = _choice(entry, "tensor", tma_tensors)
    elif kind == "pointer":
        spec["tensor"] = _choice(entry, "tensor", {*TENSOR_NAMES, *WORKSPACES})
    elif kind == "i32_tuple":
        values = entry.take("values", list)
        if not values or not all(v in SCALAR_NAMES for v in values):
            raise entry.fail(
                "values", f"must be problem scalars {list(SCALAR_NAMES)}, got {values!r}"
            )
        spec["values"] = tuple(values)
    else:
        spec["values"] = (_choice(entry, "value", SCALAR_NAMES),)
    return ParamSpec(**spec)


def _read_kernel(data: Any, where: str, tma_tensors: set[str]) -> KernelSpec:
    entry = _Entry(data, where)
    entry.only({"role", "symbol", "block", "cluster", "dynamic_smem_bytes", "grid", "params"})
    grid = _Entry(entry.take("grid", dict), f"{where}, grid")
    rule = grid.take("rule", str)
    args = {k: v for k, v in grid.data.items() if k != "rule"}
    problem = grid_spec_problem(rule, args)
    if problem:
        raise ManifestError(f"{grid.where}: {problem}")
    smem = entry.take("dynamic_smem_bytes", int)
    if smem < 0:
        raise entry.fail("dynamic_smem_bytes", f"must be >= 0, got {smem}")
    params = entry.take("params", list)
    return KernelSpec(
        role=_choice(entry, "role", KERNEL_ROLES),
        symbol=entry.take("symbol", str),
        block=_int_triple(entry, "block"),
        cluster=_int_triple(entry, "cluster"),
        dynamic_smem_bytes=smem,
        grid=GridSpec(rule=rule, args=args),
        params=tuple(
            _read_param(p, f"{where}, params[{i}]", tma_tensors) for i, p in enumerate(params)
        ),
    )


def _read_variant(data: Any, where: str, directory: Path) -> Variant:
    entry = _Entry(data, where)
    entry.only({"name", "key", "cubin", "sha256", "size", "kernels", "tma"})
    name = entry.take("name", str)
    where = f"{where} ('{name}')"
    entry.where = where
    cubin = entry.take("cubin", str)
    if Path(cubin).name != cubin or cubin in ("", ".", ".."):
        raise entry.fail("cubin", f"must be a file name inside {directory}, got {cubin!r}")
    sha256 = entry.take("sha256", str)
    if not _SHA256.fullmatch(sha256):
        raise entry.fail("sha256", f"must be 64 lowercase hex digits, got {sha256!r}")
    size = entry.take("size", int)
    if size <= 0:
        raise entry.fail("size", f"must be positive, got {size}")
    tma_entry = _Entry(entry.take("tma", dict), f"{where}, tma")
    tma_entry.only({*TENSOR_NAMES, *DERIVED_VIEWS})
    tma = {t: _read_tma_rule(rule, f"{where}, tma.{t}") for t, rule in tma_entry.data.items()}
    kernels = entry.take("kernels", list)
    if not kernels:
        raise entry.fail("kernels", "must list at least one kernel")
    return Variant(
        name=name,
        key=_read_key(entry.take("key", dict), f"{where}, key"),
        cubin_path=directory / cubin,
        sha256=sha256,
        size=size,
        kernels=tuple(
            _read_kernel(k, f"{where}, kernels[{i}]", set(tma)) for i, k in enumerate(kernels)
        ),
        tma=tma,
    )


def read_manifest(directory: Path) -> Manifest:
    """Parse ``directory/manifest.json``; raise ManifestError naming the file and entry."""
    path = Path(directory) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON: {exc}") from exc
    top = _Entry(data, str(path))
    if "schema_version" not in top.data:
        raise ManifestError(
            f"{path}: missing field 'schema_version' (this dglu reads {SCHEMA_VERSION})"
        )
    version = top.data["schema_version"]
    if version != SCHEMA_VERSION or type(version) is not int:
        raise ManifestError(
            f"{path}: schema_version {version!r} is not the version this dglu reads "
            f"({SCHEMA_VERSION}); rebuild the artifacts or install a matching dglu"
        )
    top.only({"schema_version", "toolchain", "variants"})
    toolchain = top.take("toolchain", dict)
    variants = tuple(
        _read_variant(v, f"{path}: variants[{i}]", path.parent)
        for i, v in enumerate(top.take("variants", list))
    )
    names = [v.name for v in variants]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ManifestError(f"{path}: variant names listed more than once: {duplicates}")
    return Manifest(path=path, toolchain=dict(toolchain), variants=variants)


class SearchEntry(NamedTuple):
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
    entries.append(SearchEntry(Path(__file__).parent / "_cubins", "package", required=False))
    return entries


def load_manifests(entries: list[SearchEntry]) -> tuple[Manifest, ...]:
    """Read the manifest of every searched directory that has one."""
    manifests = []
    for entry in entries:
        if (entry.directory / MANIFEST_FILE).is_file():
            manifests.append(read_manifest(entry.directory))
        elif entry.required:
            raise ManifestError(
                f"{entry.origin} lists {entry.directory}, which has no {MANIFEST_FILE}"
            )
    return tuple(manifests)


def merged_variants(manifests: tuple[Manifest, ...]) -> tuple[Variant, ...]:
    """All variants in search order; a name seen earlier hides later ones."""
    seen: dict[str, Variant] = {}
    for manifest in manifests:
        for variant in manifest.variants:
            seen.setdefault(variant.name, variant)
    return tuple(seen.values())


@functools.cache
def installed_manifests() -> tuple[Manifest, ...]:
    """The manifests of the default search path, read once per process."""
    return load_manifests(search_path())


def installed_variants() -> tuple[Variant, ...]:
    """Every variant this process can launch, in selection order."""
    return merged_variants(installed_manifests())
