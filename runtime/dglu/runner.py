"""Load a variant's kernels into the device's context and run them for one problem."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .driver import device_context, device_info, kernel_function, module_for
from .dtypes import torch_dtype
from .errors import CudaDriverError
from .grid import is_empty, launch_grid
from .integrity import read_verified_cubin
from .launch import launch_kernel
from .manifest import Variant
from .params import KernelArguments, pack_params
from .problem import WORKSPACES, Problem, TensorView
from .tma import encode_tensor_map


@dataclass(frozen=True)
class LoadedVariant:
    """A variant whose kernels are loaded on one device, in launch order."""

    variant: Variant
    device: int
    functions: tuple[Any, ...]


def load_variant(variant: Variant, device: int) -> LoadedVariant:
    """Load (once per context and cubin) and return the variant's kernels on ``device``."""
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


def _workspaces(loaded: LoadedVariant, problem: Problem, stream: Any) -> dict[str, Any]:
    """The variant's required workspaces, allocated on the torch ``stream``: zeroed there
    (so before any kernel of the call) where dglu.problem.WORKSPACES says so."""
    import torch

    device = torch.device("cuda", loaded.device)
    tensors = {}
    with torch.cuda.stream(stream):
        for name in required_workspaces(loaded.variant):
            spec = WORKSPACES[name]
            allocate = torch.zeros if spec.zeroed else torch.empty
            tensors[name] = allocate(
                spec.count(problem.scalars), dtype=torch_dtype(spec.dtype), device=device
            )
            if tensors[name].data_ptr() % spec.align:
                raise RuntimeError(
                    f"workspace {name}: torch allocated it at {tensors[name].data_ptr():#x}, "
                    f"which is not {spec.align}-byte aligned as the kernels need"
                )
    return tensors


def run_variant(loaded: LoadedVariant, problem: Problem, stream: Any) -> None:
    """Launch every kernel of the variant, in manifest order, on the torch ``stream``.

    When a kernel's grid is empty (M = 0: no tiles) nothing is allocated or launched: there
    is nothing to compute and the outputs keep their contents. Otherwise the workspaces are
    allocated on ``stream`` first (see _workspaces).
    """
    scalars = problem.scalars
    sm_count = device_info(loaded.device).sm_count
    grids = [launch_grid(kernel, scalars, sm_count) for kernel in loaded.variant.kernels]
    if any(is_empty(grid) for grid in grids):
        return
    views: dict[str, TensorView] = dict(problem.tensors)
    for name, tensor in _workspaces(loaded, problem, stream).items():
        views[name] = TensorView(
            loaded.device,
            tensor.data_ptr(),
            tuple(tensor.shape),
            tuple(tensor.stride()),
            WORKSPACES[name].dtype,
        )
    pointers = {name: view.pointer for name, view in views.items()}
    with device_context(loaded.device):
        for kernel, function, grid in zip(
            loaded.variant.kernels, loaded.functions, grids, strict=True
        ):
            tensor_maps = {
                p.tensor: encode_tensor_map(loaded.variant.tma[p.tensor], views[p.tensor])
                for p in kernel.params
                if p.kind == "tensormap"
            }
            arguments = KernelArguments(pack_params(kernel, scalars, pointers, tensor_maps))
            launch_kernel(function, kernel, grid, stream.cuda_stream, arguments)
