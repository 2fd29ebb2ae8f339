"""Launch grids, computed by the rule each manifest kernel names (docs/manifest.md, KERNEL).

- ``persistent_tiles`` (tile_m, tile_n): tiles = ceil(m / tile_m) * ceil(n / tile_n);
  clusters = min(ceil(tiles / cluster_size), SMs // cluster_size);
  grid = (clusters * cluster[0], cluster[1], 1).
- ``elementwise`` (count, an EXPRESSION): grid = (ceil(count / block[0]), 1, 1).
- ``active_clusters``: grid = (cluster[0], cluster[1], clusters), clusters on z: as many as
  fit on the device at once (dglu.occupancy, found when the kernel is loaded); the kernel
  walks its tiles from gridDim. With m = 0 the grid is empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .contract.schema import KernelSpec

Grid = tuple[int, int, int]


def _persistent_tiles(kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int) -> Grid:
    cluster_m, cluster_n, cluster_z = kernel.cluster
    cluster_size = cluster_m * cluster_n * cluster_z
    tiles = math.ceil(scalars["m"] / kernel.grid.tile_m) * math.ceil(
        scalars["n"] / kernel.grid.tile_n
    )
    clusters = min(math.ceil(tiles / cluster_size), sm_count // cluster_size)
    return (clusters * cluster_m, cluster_n, 1)


def _elementwise(kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int) -> Grid:
    return (math.ceil(kernel.grid.count.value(scalars) / kernel.block[0]), 1, 1)


_RULES = {"persistent_tiles": _persistent_tiles, "elementwise": _elementwise}


def launch_grid(
    kernel: KernelSpec, scalars: Mapping[str, int], sm_count: int, active_clusters: int | None = None
) -> Grid:
    """The grid of one launch of ``kernel`` for a problem; (0, ...) means nothing to launch.
    ``active_clusters``: the clusters resident at once (the ``active_clusters`` rule's)."""
    if kernel.grid.rule == "active_clusters":
        if active_clusters is None:
            raise ValueError(f"kernel {kernel.symbol}: its grid needs the device's active clusters")
        return (kernel.cluster[0], kernel.cluster[1], active_clusters if scalars["m"] else 0)
    cluster_size = math.prod(kernel.cluster)
    if sm_count < cluster_size:
        raise ValueError(
            f"kernel {kernel.symbol}: a cluster of {cluster_size} CTAs does not fit on "
            f"a device with {sm_count} SMs"
        )
    return _RULES[kernel.grid.rule](kernel, scalars, sm_count)


def is_empty(grid: Grid) -> bool:
    """True when a grid has no blocks (e.g. M = 0), so the launch is skipped."""
    return math.prod(grid) == 0
