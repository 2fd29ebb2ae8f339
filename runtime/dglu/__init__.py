"""dglu: prebuilt grouped GEMM + dGLU backward kernels for Mixture-of-Experts training.

The kernels were compiled ahead of time into cubins (listed in a manifest.json); this
package only loads and launches them through cuda-python. Importing it is cheap: torch
and cuda.bindings are imported on first use, and nothing is ever compiled at run time.
Run ``python -m dglu`` to list the installed variants and the device found.
"""

__version__ = "0.1.0"  # before the imports: dglu.manifest compares variants' build with it

from .api import (
    GroupedGemmDglu,
    GroupedGemmDgluSm90,
    GroupedGemmDgluSm100,
    grouped_gemm_dglu,
    grouped_gemm_dglu_wrapper_sm90,
    grouped_gemm_dglu_wrapper_sm100,
)
from .errors import (
    CudaDriverError,
    DeviceMemoryError,
    DgluError,
    IntegrityError,
    KernelLaunchError,
    KernelLoadError,
    ManifestError,
    ParamPackingError,
    StreamDeviceError,
    VariantNotFoundError,
)
from .tuple_dict import TupleDict


__all__ = [
    "CudaDriverError",
    "DeviceMemoryError",
    "DgluError",
    "GroupedGemmDglu",
    "GroupedGemmDgluSm90",
    "GroupedGemmDgluSm100",
    "IntegrityError",
    "KernelLaunchError",
    "KernelLoadError",
    "ManifestError",
    "ParamPackingError",
    "StreamDeviceError",
    "TupleDict",
    "VariantNotFoundError",
    "grouped_gemm_dglu",
    "grouped_gemm_dglu_wrapper_sm90",
    "grouped_gemm_dglu_wrapper_sm100",
]
