"""dglu: prebuilt grouped GEMM + dGLU backward kernels for Mixture-of-Experts training.

The kernels were compiled ahead of time into cubins (listed in a manifest.json); this
package only loads and launches them through cuda-python. Importing it is cheap: its names
are imported on first use (PEP 562), torch and cuda.bindings when a call needs them, so
``import dglu.contract`` (the build side's import) runs the standard library alone.
Nothing is ever compiled at run time. Run ``python -m dglu`` to list the installed
variants and the device found.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    **dict.fromkeys(("GroupedGemmDglu", "GroupedGemmDgluSm90", "GroupedGemmDgluSm100"), ".op"),
    **dict.fromkeys(
        (
            "grouped_gemm_dglu",
            "grouped_gemm_dglu_wrapper_sm90",
            "grouped_gemm_dglu_wrapper_sm100",
            "wrapper_variant",
        ),
        ".api",
    ),
    **dict.fromkeys(
        (
            "CudaDriverError",
            "DeviceMemoryError",
            "DgluError",
            "IntegrityError",
            "KernelLaunchError",
            "KernelLoadError",
            "ManifestError",
            "ParamPackingError",
            "StreamDeviceError",
            "VariantNotFoundError",
        ),
        ".errors",
    ),
    "TupleDict": ".tuple_dict",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dglu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
