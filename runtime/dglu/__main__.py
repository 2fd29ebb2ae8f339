"""``python -m dglu``: list the installed variants, where they come from, the stale ones (with
the command that rebuilds each), and the device found."""

from __future__ import annotations

import sys
from pathlib import Path

from . import __version__
from .driver import device_count, device_info
from .errors import DgluError
from .contract.schema import MANIFEST_FILE, VariantKey
from .manifest import load_manifests, merged_variants, search_path
from .selection import arch_for_capability, build_command


def _describe_key(key: VariantKey) -> str:
    params = f" {dict(key.act_params)}" if key.act_params else ""
    return (
        f"arch={key.arch} {key.act_func}{params} dbias={key.dbias} "
        f"ab/c/d={key.ab_dtype}/{key.c_dtype}/{key.d_dtype} {key.weight_mode} "
        f"b_major={key.b_major} "
        f"tile={key.tile_m}x{key.tile_n} cluster={key.cluster_m}x{key.cluster_n} {key.scheduler}"
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
    variants, stale = merged_variants(manifests)
    stale_ones = [s.variant for s in stale]
    print(f"variants ({len(variants)}):")
    for _, manifest in manifests:
        for variant in manifest.variants:
            if variant in stale_ones:
                continue
            hidden = "" if variant in variants else "  (hidden by an earlier directory)"
            print(
                f"  {variant.name}\n    {_describe_key(variant.key)}\n"
                f"    from {manifest.path}{hidden}"
            )
    if stale:
        print(f"stale variants, never used ({len(stale)}):")
        for variant, reason in stale:
            print(
                f"  {variant.name}\n    {reason}\n    from {variant.directory}\n"
                f"    rebuild: {build_command(variant.key.as_dict())} -o {variant.directory}"
            )
    return 0


def _print_devices() -> None:
    try:
        count = device_count()
        for ordinal in range(count):
            info = device_info(ordinal)
            arch = arch_for_capability(info.capability) or "none (no dglu kernels)"
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
    print(f"dglu {__version__} ({Path(__file__).parent})")
    status = _print_variants()
    _print_devices()
    return status


if __name__ == "__main__":
    sys.exit(main())
