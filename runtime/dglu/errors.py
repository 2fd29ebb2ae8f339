"""Exceptions raised by dglu, one class per kind of failure a caller can act on."""

from __future__ import annotations


class DgluError(Exception):
    """Base class of every error dglu raises on purpose."""


class ManifestError(DgluError, ValueError):
    """A manifest.json that cannot be used: unreadable, wrong schema, malformed entry."""


class IntegrityError(DgluError):
    """A cubin file that does not match the size or sha256 its manifest records."""


class VariantNotFoundError(DgluError, NotImplementedError):
    """No prebuilt kernel variant matches a call (the message says how to build one)."""


class CudaDriverError(DgluError, RuntimeError):
    """A CUDA driver call failed, or there is no usable driver or device."""


class ParamPackingError(DgluError):
    """A kernel parameter cannot be packed as the manifest describes it."""
