"""Check a cubin against its manifest entry (size, then sha256) before it is loaded."""

from __future__ import annotations

import hashlib

from .errors import IntegrityError
from .contract.reader import VariantEntry
from .contract.schema import Variant

_REMEDY = "rebuild the artifacts or reinstall dglu"


def read_verified_cubin(variant: Variant | VariantEntry) -> bytes:
    """The cubin bytes of ``variant``; IntegrityError if missing, truncated or altered."""
    path = variant.cubin_path
    try:
        image = path.read_bytes()
    except OSError as exc:
        raise IntegrityError(
            f"{path}: cannot read the cubin of variant {variant.name}: {exc.strerror}"
        ) from exc
    if len(image) != variant.size:
        raise IntegrityError(
            f"{path}: {len(image)} bytes, but its manifest records {variant.size} "
            f"({'truncated' if len(image) < variant.size else 'grown'}); {_REMEDY}"
        )
    digest = hashlib.sha256(image).hexdigest()
    if digest != variant.sha256:
        raise IntegrityError(
            f"{path}: sha256 {digest} does not match its manifest's {variant.sha256} "
            f"(the file was modified); {_REMEDY}"
        )
    return image
