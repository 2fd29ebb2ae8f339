"""The manifest's data model, schema version 3 (docs/manifest.md): its constants and the
immutable records a reader fills (dglu.contract.reader reads, dglu.contract.writer writes)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from .front import FrontPolicy
from typing import TYPE_CHECKING, Any

from .expressions import Expr
from .keys import KEY_FIELD_DEFAULTS, key_record
from .records import Record

if TYPE_CHECKING:
    from .reader import VariantEntry

SCHEMA_VERSION = 3  # 3: the front policies once, at the top level (``fronts``)
MANIFEST_FILE = "manifest.json"
REBUILD_HINT = (
    "rebuild the directory with `dglu-build compile KERNEL_SPECS.yaml -o DIR` "
    "(or reinstall the dglu wheel for its own cubins)"
)
BASE_SCALARS = ("m", "n", "k", "l")
IO_KINDS = ("in", "out", "accumulate")
# what an accumulated output the wrapper allocates holds before the kernels run: zeros (a sum)
# or -inf (a max, as cuDNN FE's wrapper starts amax: an expert with no rows keeps it)
STARTS = ("zero", "-inf")
ZERO_KINDS = ("each_call", "by_consumer", "never")
# rule -> its fields; "active_clusters": (cluster[0], cluster[1], the clusters that fit on
# the device at once, found at load time with cuOccupancyMaxActiveClusters)
GRID_RULES = {"persistent_tiles": ("tile_m", "tile_n"), "elementwise": ("count",), "active_clusters": ()}
LAUNCH_ATTRIBUTES = ("cluster_dimension",)
# param kind -> the fields that say what it holds (besides name, kind, size, align)
PARAM_SOURCES: dict[str, tuple[str, ...]] = {
    "tensormap": ("tensor",),
    "pointer": ("tensor",),
    "i32_tuple": ("values",),
    "i32": ("value",),
    "i64": ("value",),
    "f32": ("value",),
    "f32_const": ("value",),  # a number the variant fixes
    "zeros": (),  # size bytes of zeros (e.g. a TiledMma's state)
    "pointer_i32s": ("tensor", "values"),  # a pointer, then int32 values, zero-padded to size
}
TMA_ENUMS: dict[str, tuple[str, ...]] = {
    "swizzle": ("none", "32B", "64B", "128B"),
    "l2_promotion": ("none", "64B", "128B", "256B"),
    "oob_fill": ("none", "nan_request_zero_fma"),
    "interleave": ("none", "16B", "32B"),
}
MAX_TMA_RANK = 5
MAX_TMA_BOX = 256
ORDERED_MAPS = ("arguments", "scalars")  # JSON objects whose order means something


def _key_as_dict(self: Any) -> dict[str, Any]:
    """The key as the manifest writes it (act_params as a mapping)."""
    fields = self._asdict()
    fields["act_params"] = dict(self.act_params)
    return fields


# The fields that identify a variant: a Record of the KeyField table's fields in its order
# (those with a default last); act_params as sorted (name, value) pairs.
VariantKey = key_record("VariantKey", __name__, "The fields that identify a variant (dglu.contract.keys.KEY_TABLE).",
                        KEY_FIELD_DEFAULTS, as_dict=_key_as_dict)


class Build(Record):
    """What a variant was built from."""

    dglu_version: str
    source_hash: str
    toolchain: Mapping[str, str]


class Argument(Record):
    """One tensor argument: seed-rank shape and strides (EXPRESSIONs or 1), dtypes, align."""

    shape: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    dtypes: tuple[str, ...]
    align: int
    io: str
    rank_drop: bool = False
    allocation: str | None = None  # how to allocate it, for layout errors (scale factors)
    start: str = "zero"  # an accumulated output's value before the kernels run (STARTS)


class Limit(Record):
    """Bounds of one scalar, and why the kernels need them."""

    why: str
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None


class ViewRule(Record):
    """A descriptor view derived from the argument or workspace ``of``."""

    of: str
    dtype: str
    shape: tuple[Expr, ...]
    strides: tuple[Expr, ...]
    address_align_down: int


class WorkspaceRule(Record):
    """Scratch memory the runtime provides."""

    dtype: str
    count: Expr
    align: int
    zero: str  # "each_call", "by_consumer" or "never" (docs/manifest.md)


class GridSpec(Record):
    """A grid rule: ``persistent_tiles`` (tile_m, tile_n) or ``elementwise`` (count)."""

    rule: str
    tile_m: int = 0
    tile_n: int = 0
    count: Expr | None = None


class ParamSpec(Record):
    """One kernel parameter, in the kernel's parameter order."""

    name: str
    kind: str
    size: int
    align: int
    tensor: str | None = None
    values: tuple[Expr, ...] = ()
    optional: bool = False  # pointer only: NULL when the variant lists no such tensor
    constant: float = 0.0  # f32_const only


class KernelSpec(Record):
    """One __global__ function of a variant's cubin, in launch order."""

    role: str
    symbol: str
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dynamic_smem_bytes: int
    attributes: Mapping[str, tuple[int, ...]]
    grid: GridSpec
    params: tuple[ParamSpec, ...]


class TmaRule(Record):
    """How to encode the TMA descriptor of one tensor (hashable: a cache key)."""

    dtype: str
    dims: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: str
    l2_promotion: str
    oob_fill: str
    interleave: str


class Variant(Record):
    """One prebuilt kernel variant, as its manifest entry describes it."""

    name: str
    family: str
    key: VariantKey
    cubin: str
    sha256: str
    size: int
    build: Build
    front: FrontPolicy  # what the front door accepts for the family (dglu.contract.front)
    min_driver: int
    m_aligned: int
    arguments: Mapping[str, Argument]  # in check order
    scalars: Mapping[str, Expr]  # derived scalars, in evaluation order
    limits: Mapping[str, Limit]
    views: Mapping[str, ViewRule]
    workspaces: Mapping[str, WorkspaceRule]
    kernels: tuple[KernelSpec, ...]
    tma: Mapping[str, TmaRule]
    directory: Path  # where the manifest was read
    flags: tuple[str, ...] = ()  # int32 scalars (0 or 1) set from the call's options of these names

    @property
    def cubin_path(self) -> Path:
        """The cubin file of this variant."""
        return self.directory / self.cubin


class Manifest(Record):
    """A parsed manifest.json and the variants it lists (VariantEntry when read lazily)."""

    path: Path
    variants: tuple[Variant | VariantEntry, ...]
