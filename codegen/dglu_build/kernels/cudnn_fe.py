"""Where the Blackwell families' kernels come from: NVIDIA's dGLU kernels in the pinned
``nvidia-cudnn-frontend`` distribution (Apache-2.0), imported at build time, never copied
(sm100_bf16: ``MoEGroupedGemmDgluDbiasBf16Kernel``; sm100_blockscaled:
``BlockScaledMoEGroupedGemmDgluDbiasKernel``, both under ``cudnn/gemm/cutedsl/grouped/``).
This module names the pin and the files the kernels are built from, and reads their
hashes through the installed distribution's metadata without importing it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata

DISTRIBUTION = "nvidia-cudnn-frontend"
VERSION = "1.32.0"
# the kernels' modules and what they import: the grouped-GEMM package's modules (kernels,
# scheduler, helpers) and the DSL compatibility shims; every Python file under these
KERNEL_SOURCES = ("cudnn/gemm/cutedsl/grouped/", "cudnn/_cutlass_compat", "cudnn/_cutlass_helpers/")
# the license texts the wheel carries for cubins built from these sources
LICENSE_FILES = ("LICENSE.txt", "NOTICE")


class UpstreamMissing(RuntimeError):
    """The pinned distribution is not installed (or another version is)."""


def distribution() -> importlib.metadata.Distribution:
    """The installed distribution, checked against the pin."""
    try:
        found = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise UpstreamMissing(
            f"dglu's Blackwell families build NVIDIA's kernels from {DISTRIBUTION}=={VERSION}, which is not installed: "
            f"pip install 'dglu[build]' (or pip install {DISTRIBUTION}=={VERSION})"
        ) from None
    if found.version != VERSION:
        raise UpstreamMissing(
            f"dglu's Blackwell families are pinned to {DISTRIBUTION}=={VERSION}, {found.version} is installed: "
            f"pip install {DISTRIBUTION}=={VERSION}"
        )
    return found


def kernel_files(found: importlib.metadata.Distribution) -> list[str]:
    """The distribution's Python files the kernel may import (KERNEL_SOURCES), sorted."""
    names = (path.as_posix() for path in found.files or ())
    return sorted(name for name in names if name.endswith(".py") and name.startswith(KERNEL_SOURCES))


def sources() -> dict[str, str]:
    """The distribution's name and version and the sha256 of each kernel file; without the
    distribution, only the pin (a build then fails, naming it)."""
    pinned = {f"{DISTRIBUTION}:version": VERSION}
    try:
        found = distribution()
    except UpstreamMissing:
        return {**pinned, f"{DISTRIBUTION}:installed": "no"}
    files = {
        f"{DISTRIBUTION}:{name}": hashlib.sha256(found.locate_file(name).read_bytes()).hexdigest()
        for name in kernel_files(found)
    }
    return {**pinned, **files}


def license_texts() -> dict[str, bytes]:
    """LICENSE.txt and NOTICE of the distribution, by file name."""
    found = distribution()
    texts = {}
    for path in found.files or ():
        if path.name in LICENSE_FILES and "licenses" in path.parts:
            texts[path.name] = path.locate().read_bytes()
    missing = [name for name in LICENSE_FILES if name not in texts]
    if missing:
        raise UpstreamMissing(f"{DISTRIBUTION} {found.version} ships no {', '.join(missing)} under licenses/")
    return texts
