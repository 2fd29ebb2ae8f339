"""``python -m dglu``: list the installed variants, where they come from, and the device found."""

from __future__ import annotations

import sys

from . import __version__
from .driver import device_count, device_info
from .errors import DgluError
from .manifest import MANIFEST_FILE, load_manifests, merged_variants, search_path
from .selection import arch_for_capability


def _describe_key(key_fields: dict) -> str:
    tile = f"{key_fields['tile_m']}x{key_fields['tile_n']}"
    cluster = f"{key_fields['cluster_m']}x{key_fields['cluster_n']}"
    return (
        f"{key_fields['act_func']} dbias={key_fields['dbias']} ab/c/d="
        f"{key_fields['ab_dtype']}/{key_fields['c_dtype']}/{key_fields['d_dtype']} "
        f"tile={tile} cluster={cluster} {key_fields['scheduler']}"
    )


def _print_variants() -> int:
    entries = search_path()
    print("search path:")
    for entry in entries:
        state = "found" if (entry.directory / MANIFEST_FILE).is_file() else "no manifest"
        print(f"  {entry.directory}  [{entry.origin}: {state}]")
    try:
        manifests = load_manifests(entries)
    except DgluError as exc:
        print(f"error: {exc}")
        return 1
    variants = merged_variants(manifests)
    print(f"variants ({len(variants)}):")
    for manifest in manifests:
        for variant in manifest.variants:
            hidden = "" if variant in variants else "  (hidden by an earlier directory)"
            print(
                f"  {variant.name}\n    arch={variant.key.arch} "
                f"{_describe_key(variant.key.as_dict())}\n    from {manifest.path}{hidden}"
            )
    return 0


def _print_devices() -> None:
    try:
        count = device_count()
        for ordinal in range(count):
            info = device_info(ordinal)
            try:
                arch = arch_for_capability(info.capability)
            except DgluError:
                arch = "unsupported"
            major, minor = info.capability
            print(
                f"device {ordinal}: {info.name}, compute capability {major}.{minor} "
                f"(dglu arch: {arch}), {info.sm_count} SMs"
            )
        if count == 0:
            print("device: none (the CUDA driver sees no device)")
    except DgluError as exc:
        print(f"device: none ({exc})")


def main() -> int:
    print(f"dglu {__version__} ({__file__.rsplit('/', 1)[0]})")
    status = _print_variants()
    _print_devices()
    return status


if __name__ == "__main__":
    sys.exit(main())
