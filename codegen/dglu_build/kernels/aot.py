"""Ahead-of-time compilation shared by the families: trace a host entry that launches a
variant's declared kernels, compile it for its architecture with no GPU, and describe the
kernels the cubin holds for the manifest."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import inspect

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream, make_ptr

from ..cubin_info import read_cubin
from .declaration import KernelDeclaration, check_signature, manifest_kernel, symbol_of

PLACEHOLDER_BYTES = 16 * 1024
PLACEHOLDER_EXTENTS = {"m": 1024, "n": 256, "k": 256, "l": 4}


def placeholder_arguments(host: Callable, pointers: Mapping[str, tuple[Any, int]], extents: Mapping[str, int]) -> list:
    """Placeholders for a host entry's arguments: ``pointers`` (name -> (element type,
    assumed alignment)), then the int32 ``extents``, then the stream; checked against the
    (unbound) ``host``'s signature. Nothing is dereferenced at compile time."""
    names = [*pointers, *extents, "stream"]
    taken = list(inspect.signature(host).parameters)[1:]
    if taken != names:
        raise TypeError(f"{host.__qualname__} takes {taken}; the placeholders are for {names}")
    gmem = cute.AddressSpace.gmem
    return [
        *(make_ptr(dtype, PLACEHOLDER_BYTES, gmem, assumed_align=align) for dtype, align in pointers.values()),
        *(cutlass.Int32(value) for value in extents.values()),
        make_fake_stream(),
    ]


def _compile(host: Callable, args: list, arch: str, dump_dir: Path) -> bytes:
    """Compile ``host`` for ``arch``; return the cubin."""
    compiled = cute.compile(
        host, *args, options=f"--gpu-arch {arch} --keep-cubin --keep-ptx --dump-dir={dump_dir}"
    )
    cubin = compiled.__cubin__
    if not isinstance(cubin, bytes) or not compiled.__ptx__:
        raise RuntimeError(f"CuTe DSL produced no cubin/PTX (dump dir {dump_dir})")
    return cubin


def compile_kernels(
    host: Callable,
    args: list,
    arch: str,
    declared: Sequence[KernelDeclaration],
    functions: Mapping[str, Any],
    symbol_prefix: str,
    smem_bytes: Callable[[str], int],
    extents: Callable[[str], list[str]],
) -> tuple[bytes, list[dict]]:
    """Compile the host entry that launches ``declared`` (the DSL kernel of each role in
    ``functions``); returns the cubin and the manifest's KERNEL entries, whose symbols are
    read back from the cubin. ``smem_bytes(role)``: a kernel's dynamic shared memory, known
    once the host was traced; ``extents(tensor)``: a TMA tensor's extents."""
    for kernel in declared:
        function = functions[kernel.role]
        check_signature(function, kernel.params)
        # the DSL appends a per-trace suffix ("_0"): the symbol is read back from the cubin
        function.set_name_prefix(f"{symbol_prefix}_{kernel.role}", remove_cutlass_symbol=True, keep_mangled_name=False)
    with tempfile.TemporaryDirectory(prefix="dglu-cute-") as tmp:
        cubin = _compile(host, args, arch, Path(tmp))
    symbols = list(read_cubin(cubin).kernels)
    entries = [
        manifest_kernel(kernel, symbol_of(symbols, symbol_prefix, kernel.role), smem_bytes(kernel.role), extents)
        for kernel in declared
    ]
    return cubin, entries


def compile_family_variant(
    family: str,
    interface: ModuleType,
    config: Any,
    builder: Any,
    pointers: Mapping[str, tuple[Any, int]],
    extents: Mapping[str, int],
    arch: str,
    symbol_prefix: str,
) -> tuple[bytes, dict]:
    """One variant of a family into one cubin, and the variant's manifest fields.

    ``interface`` is the family's declaration module (``kernels(config)``,
    ``entry(config)``, ``tma_extents(config, tensor)``); ``builder`` builds the kernels
    (``host``, ``kernel_functions()`` and, once the host is traced, the main kernel's
    ``smem_bytes``); ``pointers`` and ``extents`` are the host entry's placeholders."""
    cubin, kernels = compile_kernels(
        builder.host,
        placeholder_arguments(type(builder).host, pointers, extents),
        arch,
        interface.kernels(config),
        builder.kernel_functions(),
        symbol_prefix,
        lambda role: builder.smem_bytes if role == "main" else 0,
        lambda tensor: interface.tma_extents(config, tensor),
    )
    return cubin, {"family": family, **interface.entry(config), "kernels": kernels}
