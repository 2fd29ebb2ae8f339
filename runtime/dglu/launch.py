"""Launch one kernel with cuLaunchKernelEx on a stream, with exactly the launch attributes
its manifest entry lists (``attributes``: ``cluster_dimension`` for a kernel launched in
clusters); the runtime derives none itself.

A Launch holds everything cuLaunchKernelEx reads (the launch configuration and the packed
parameters), built once and reused by every call with the same problem on the same stream:
the driver copies both when the launch is enqueued, so sharing them across threads is safe.
"""

from __future__ import annotations

from typing import Any

from .contract.records import Record
from .driver import checked
from .grid import Grid
from .contract.schema import KernelSpec
from .params import KernelArguments


class Launch(Record):
    """One prepared kernel launch."""

    function: Any
    kernel: KernelSpec
    grid: Grid
    stream: int
    arguments: KernelArguments
    config: Any  # cuda.bindings.driver.CUlaunchConfig

    def with_arguments(self, arguments: KernelArguments) -> Launch:
        """This launch with other parameters (a plan for tensors at new addresses)."""
        return Launch(self.function, self.kernel, self.grid, self.stream, arguments, self.config)


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
    attributes = []
    if "cluster_dimension" in kernel.attributes:
        cluster = driver.CUlaunchAttribute()
        cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = (
            kernel.attributes["cluster_dimension"]
        )
        attributes.append(cluster)
    if attributes:
        config.attrs = attributes
        config.numAttrs = len(attributes)
    return Launch(function, kernel, grid, stream, arguments, config)


def launch_kernel(launch: Launch) -> None:
    """Enqueue a prepared launch."""
    checked("cuLaunchKernelEx", launch.config, launch.function, launch.arguments.address, 0)
