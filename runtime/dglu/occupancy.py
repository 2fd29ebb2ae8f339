"""How many clusters of a kernel fit on its device at once (cuOccupancyMaxActiveClusters):
the grid size of a kernel whose manifest grid rule is ``active_clusters``. Asked once per
loaded kernel, with the kernel's own block, cluster and dynamic shared memory."""

from __future__ import annotations

from typing import Any

from .contract.schema import KernelSpec
from .driver import checked


def max_active_clusters(function: Any, kernel: KernelSpec) -> int:
    """The clusters of ``kernel`` (loaded as ``function``) that are resident at once."""
    from cuda.bindings import driver

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = kernel.cluster
    config.blockDimX, config.blockDimY, config.blockDimZ = kernel.block
    config.sharedMemBytes = kernel.dynamic_smem_bytes
    cluster = driver.CUlaunchAttribute()
    cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = kernel.cluster
    config.attrs = [cluster]
    config.numAttrs = 1
    clusters = checked("cuOccupancyMaxActiveClusters", function, config)
    if clusters < 1:
        raise ValueError(f"kernel {kernel.symbol}: no cluster of {list(kernel.cluster)} CTAs fits on this device")
    return clusters
