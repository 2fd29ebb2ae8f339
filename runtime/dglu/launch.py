"""Launch one kernel with cuLaunchKernelEx on a stream, its cluster shape set as an attribute."""

from __future__ import annotations

from typing import Any

from .driver import checked
from .grid import Grid
from .manifest import KernelSpec
from .params import KernelArguments


def launch_kernel(
    function: Any, kernel: KernelSpec, grid: Grid, stream: int, arguments: KernelArguments
) -> None:
    """Enqueue ``function`` with the manifest's block, cluster and dynamic shared memory."""
    from cuda.bindings import driver

    cluster = driver.CUlaunchAttribute()
    cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = (
        kernel.cluster
    )

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = kernel.block
    config.sharedMemBytes = kernel.dynamic_smem_bytes
    config.hStream = driver.CUstream(stream)
    config.attrs = [cluster]
    config.numAttrs = 1
    checked("cuLaunchKernelEx", config, function, arguments.address, 0)
