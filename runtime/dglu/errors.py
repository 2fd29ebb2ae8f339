"""Exceptions raised by dglu, one class per kind of failure a caller can act on."""

from __future__ import annotations


from .contract.errors import DgluError, ManifestError

__all__ = [
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
]


class IntegrityError(DgluError):
    """A cubin file that does not match the size or sha256 its manifest records."""


class VariantNotFoundError(DgluError, NotImplementedError):
    """No prebuilt kernel variant matches a call (the message says how to build one)."""


class CudaDriverError(DgluError, RuntimeError):
    """A CUDA driver call failed, or there is no usable driver or device. ``error_name`` is
    the driver's CUresult name (e.g. "CUDA_ERROR_OUT_OF_MEMORY") when a call failed."""

    def __init__(self, message: str, error_name: str | None = None) -> None:
        super().__init__(message)
        self.error_name = error_name


class ParamPackingError(DgluError):
    """A kernel parameter cannot be packed as the manifest describes it."""


class KernelLoadError(CudaDriverError):
    """A variant's cubin or one of its kernels could not be loaded into the device's context."""


class KernelLaunchError(CudaDriverError):
    """The driver refused to enqueue one of a call's kernels or clears."""


class DeviceMemoryError(DgluError, MemoryError):
    """The device has no room for an output or workspace a call needs."""


class StreamDeviceError(DgluError, ValueError):
    """``current_stream`` belongs to another device or CUDA context than the call's tensors."""
