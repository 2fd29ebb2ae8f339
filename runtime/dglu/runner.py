"""Load a variant's kernels into the device's context and run them for one problem.

Loaded variants are cached per (variant, device). A call's launches (grids, launch
configurations, packed parameters with their TMA descriptors) are cached per variant,
device, stream, problem sizes, tensor addresses and workspace addresses (dglu.cache), so a
repeated call only clears its workspaces and enqueues its kernels.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from . import workspaces as workspace_pool
from .cache import BoundedCache
from .driver import device_context, device_info, kernel_function, module_for
from .errors import CudaDriverError
from .grid import Grid, is_empty, launch_grid
from .integrity import read_verified_cubin
from .launch import Launch, launch_kernel, prepare_launch
from .manifest import Variant
from .params import KernelArguments, pack_params
from .problem import WORKSPACES, Problem, TensorView
from .tma import encode_tensor_map

PLAN_CAPACITY = 256  # cached launch plans (each a few kilobytes)

_loaded: BoundedCache[LoadedVariant] = BoundedCache(PLAN_CAPACITY)
_plans: BoundedCache[tuple[Launch, ...]] = BoundedCache(PLAN_CAPACITY)
_grids: BoundedCache[tuple[Grid, ...]] = BoundedCache(PLAN_CAPACITY)


@dataclass(frozen=True)
class LoadedVariant:
    """A variant whose kernels are loaded on one device, in launch order."""

    variant: Variant
    device: int
    functions: tuple[Any, ...]

    @property
    def identity(self) -> tuple[str, str, int]:
        """(variant name, cubin sha256, device): a cheap cache key for this loaded variant."""
        return (self.variant.name, self.variant.sha256, self.device)

    @functools.cached_property
    def workspace_names(self) -> list[str]:
        """The workspaces the variant's kernels require."""
        return required_workspaces(self.variant)


def load_variant(variant: Variant, device: int) -> LoadedVariant:
    """Load (once per context and cubin) and return the variant's kernels on ``device``."""
    key = (variant.name, variant.sha256, device)
    return _loaded.get_or_make(key, lambda: _load(variant, device))


def _load(variant: Variant, device: int) -> LoadedVariant:
    limit = device_info(device).max_dynamic_smem_bytes
    for kernel in variant.kernels:
        if kernel.dynamic_smem_bytes > limit:
            raise CudaDriverError(
                f"variant {variant.name}: kernel {kernel.symbol} needs {kernel.dynamic_smem_bytes} "
                f"bytes of shared memory, device {device} allows {limit}"
            )
    with device_context(device) as context:
        module = module_for(context, variant.sha256, lambda: read_verified_cubin(variant))
        functions = tuple(
            kernel_function(module, kernel.symbol, kernel.dynamic_smem_bytes)
            for kernel in variant.kernels
        )
    return LoadedVariant(variant=variant, device=device, functions=functions)


def clear_caches() -> None:
    """Forget loaded variants, launch plans and pooled workspaces (e.g. between tests)."""
    _loaded.clear()
    _plans.clear()
    _grids.clear()
    workspace_pool.release_all()


def required_workspaces(variant: Variant) -> list[str]:
    """Workspaces some kernel of the variant requires (an optional pointer only accepts one)."""
    return sorted(
        {
            p.tensor
            for k in variant.kernels
            for p in k.params
            if p.tensor in WORKSPACES and not p.optional
        }
    )


def _workspace_view(device: int, workspace: workspace_pool.Workspace) -> TensorView:
    return TensorView(
        device,
        workspace.pointer,
        (workspace.elements,),
        (1,),
        WORKSPACES[workspace.name].dtype,
    )


def _plan(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    grids: tuple[Grid, ...],
    workspaces: dict[str, workspace_pool.Workspace],
) -> tuple[Launch, ...]:
    """Every kernel's launch for the problem: TMA descriptors encoded, parameters packed."""
    scalars = problem.scalars
    views: dict[str, TensorView] = dict(problem.tensors)
    for name, workspace in workspaces.items():
        views[name] = _workspace_view(loaded.device, workspace)
    pointers = {name: view.pointer for name, view in views.items()}
    launches = []
    for kernel, function, grid in zip(
        loaded.variant.kernels, loaded.functions, grids, strict=True
    ):
        tensor_maps = {
            p.tensor: encode_tensor_map(loaded.variant.tma[p.tensor], views[p.tensor])
            for p in kernel.params
            if p.kind == "tensormap"
        }
        arguments = KernelArguments(pack_params(kernel, scalars, pointers, tensor_maps))
        launches.append(prepare_launch(function, kernel, grid, stream, arguments))
    return tuple(launches)


def run_variant(loaded: LoadedVariant, problem: Problem, stream: int) -> None:
    """Launch every kernel of the variant, in manifest order, on the stream handle ``stream``.

    When a kernel's grid is empty (M = 0: no tiles) nothing is allocated or launched: there
    is nothing to compute and the outputs keep their contents. Otherwise the stream's
    workspaces are acquired and the zeroed ones cleared on ``stream`` first
    (dglu.workspaces); one lock per stream keeps a call's memsets and launches together.
    """
    sizes = (problem.m, problem.n, problem.k, problem.l)
    grids = _grids.get_or_make((*loaded.identity, *sizes), lambda: _launch_grids(loaded, problem))
    if any(is_empty(grid) for grid in grids):
        return
    pool = workspace_pool.stream_pool(loaded.device, stream)
    with pool.lock:
        workspaces = _workspaces(loaded, problem, stream, pool)
        key = (
            *loaded.identity,
            stream,
            *sizes,
            problem.pointers_key,
            tuple((name, w.pointer) for name, w in workspaces.items()),
        )
        launches = _plans.get_or_make(
            key, lambda: _plan(loaded, problem, stream, grids, workspaces)
        )
        with device_context(loaded.device):
            workspace_pool.zero(workspaces, stream)
            for launch in launches:
                launch_kernel(launch)


def _workspaces(
    loaded: LoadedVariant, problem: Problem, stream: int, pool: workspace_pool.StreamWorkspaces
) -> dict[str, workspace_pool.Workspace]:
    """The variant's required workspaces for ``problem`` on ``stream``."""
    return workspace_pool.acquire(
        loaded.workspace_names, problem.scalars, loaded.device, stream, pool
    )


def _launch_grids(loaded: LoadedVariant, problem: Problem) -> tuple[Grid, ...]:
    sm_count = device_info(loaded.device).sm_count
    return tuple(launch_grid(k, problem.scalars, sm_count) for k in loaded.variant.kernels)
