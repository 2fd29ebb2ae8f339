"""Launch grids, computed by the rule each manifest kernel names.

- ``persistent_tiles`` (fields tile_m, tile_n): tiles = ceil(M / tile_m) * ceil(N / tile_n)
  over the compact width N; clusters = min(ceil(tiles / cluster_size), SMs // cluster_size);
  grid = (clusters * cluster_m, cluster_n, 1).
- ``elementwise`` (field count): grid = (ceil(count / block_x), 1, 1), where count names a
  problem scalar (or "l*2n", the contract document's spelling of l_n2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .problem import SCALAR_NAMES

if TYPE_CHECKING:
    from .manifest import KernelSpec

Grid = tuple[int, int, int]

COUNT_ALIASES = {"l*2n": "l_n2"}


def _persistent_tiles(kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int) -> Grid:
    cluster_m, cluster_n, cluster_z = kernel.cluster
    cluster_size = cluster_m * cluster_n * cluster_z
    tiles = math.ceil(scalars["m"] / kernel.grid.args["tile_m"]) * math.ceil(
        scalars["n"] / kernel.grid.args["tile_n"]
    )
    clusters = min(math.ceil(tiles / cluster_size), sm_count // cluster_size)
    return (clusters * cluster_m, cluster_n, 1)


def _elementwise(kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int) -> Grid:
    count_name = kernel.grid.args["count"]
    count = scalars[COUNT_ALIASES.get(count_name, count_name)]
    return (math.ceil(count / kernel.block[0]), 1, 1)


def _positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _count_name(value: Any) -> bool:
    return value in SCALAR_NAMES or value in COUNT_ALIASES


_RULES: dict[str, tuple[dict[str, Callable[[Any], bool]], Callable[..., Grid]]] = {
    "persistent_tiles": ({"tile_m": _positive_int, "tile_n": _positive_int}, _persistent_tiles),
    "elementwise": ({"count": _count_name}, _elementwise),
}


def grid_spec_problem(rule: Any, args: Mapping[str, Any]) -> str | None:
    """Why a manifest grid entry is unusable, or None when it is fine."""
    if rule not in _RULES:
        return f"unknown grid rule {rule!r} (known: {', '.join(sorted(_RULES))})"
    fields = _RULES[rule][0]
    if set(args) != set(fields):
        return f"grid rule {rule!r} needs exactly the fields {sorted(fields)}, got {sorted(args)}"
    bad = [f"{name}={args[name]!r}" for name, ok in fields.items() if not ok(args[name])]
    if bad:
        hint = (
            f"count must be one of {list(SCALAR_NAMES) + list(COUNT_ALIASES)}; tiles positive ints"
        )
        return f"grid rule {rule!r} has invalid {', '.join(bad)} ({hint})"
    return None


def launch_grid(kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int) -> Grid:
    """The grid of one launch of ``kernel`` for a problem; (0, ...) means nothing to launch."""
    cluster_size = math.prod(kernel.cluster)
    if sm_count < cluster_size:
        raise ValueError(
            f"kernel {kernel.symbol}: a cluster of {cluster_size} CTAs does not fit on "
            f"a device with {sm_count} SMs"
        )
    return _RULES[kernel.grid.rule][1](kernel, scalars, sm_count)


def is_empty(grid: Grid) -> bool:
    """True when a grid has no blocks (e.g. M = 0), so the launch is skipped."""
    return math.prod(grid) == 0
