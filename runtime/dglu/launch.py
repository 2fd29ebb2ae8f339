"""Launch one kernel with cuLaunchKernelEx on a stream, its cluster shape (when it has one)
set as an attribute.

A kernel without clusters is launched without the attribute: a cluster launch, even of
1x1x1 clusters, ran the persistent kernels 10-15% slower on the H200 (dsv3-like 1.82 ms
against 1.65 ms, same cubin; bench/RESULTS.md).

A Launch holds everything cuLaunchKernelEx reads (the launch configuration and the packed
parameters), built once and reused by every call with the same problem on the same stream:
the driver copies both when the launch is enqueued, so sharing them across threads is safe.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .driver import checked
from .grid import Grid
from .manifest import KernelSpec
from .params import KernelArguments


class Launch(NamedTuple):
    """One prepared kernel launch."""

    function: Any
    kernel: KernelSpec
    grid: Grid
    stream: int
    arguments: KernelArguments
    config: Any  # cuda.bindings.driver.CUlaunchConfig


def prepare_launch(
    function: Any, kernel: KernelSpec, grid: Grid, stream: int, arguments: KernelArguments
) -> Launch:
    """The launch of ``function`` with the manifest's block, cluster and dynamic shared memory."""
    from cuda.bindings import driver

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = kernel.block
    config.sharedMemBytes = kernel.dynamic_smem_bytes
    config.hStream = driver.CUstream(stream)
    if tuple(kernel.cluster) != (1, 1, 1):
        cluster = driver.CUlaunchAttribute()
        cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = (
            kernel.cluster
        )
        config.attrs = [cluster]
        config.numAttrs = 1
    return Launch(function, kernel, grid, stream, arguments, config)


def launch_kernel(launch: Launch) -> None:
    """Enqueue a prepared launch."""
    checked("cuLaunchKernelEx", launch.config, launch.function, launch.arguments.address, 0)
