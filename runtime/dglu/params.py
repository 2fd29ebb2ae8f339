"""Pack kernel parameters exactly as the manifest lists them.

Each parameter becomes its own little-endian byte string, checked against the manifest's
size: ``tensormap``: the 128-byte CUtensorMap; ``i32_tuple``: consecutive int32 scalars;
``pointer``: a 64-bit device address (NULL for an optional one the variant does not list);
``i32`` / ``i64`` / ``f32``: one scalar; ``f32_const``: the number the manifest gives;
``zeros``: ``size`` zero bytes; ``pointer_i32s``: an address, then int32 scalars, zero-padded
to ``size`` (a DSL tensor's pointer and dynamic extents). Scalars are EXPRESSIONs evaluated
on the call's scalars. ``pack_param`` packs one of them (a plan for new tensor addresses
repacks only the parameters of the tensors that moved). The parameters, in one buffer, and
the ``void**`` array that cuLaunchKernelEx reads live in KernelArguments.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ParamPackingError
from .contract.schema import KernelSpec, ParamSpec

_SCALAR_FORMATS = {"i32": "<i", "i32_tuple": "<i", "i64": "<q", "f32": "<f"}


def _pack_one(
    param: ParamSpec,
    scalars: Mapping[str, float],
    pointers: Mapping[str, int],
    tensor_maps: Mapping[str, bytes],
) -> bytes:
    if param.kind == "zeros":
        return bytes(param.size)
    if param.kind == "f32_const":
        return struct.pack("<f", param.constant)
    if param.kind == "pointer_i32s":
        address = _pack_one(param._replace(kind="pointer"), scalars, pointers, tensor_maps)
        values = _pack_one(param._replace(kind="i32_tuple"), scalars, pointers, tensor_maps)
        return (address + values).ljust(param.size, b"\0")
    if param.kind in ("tensormap", "pointer"):
        source = tensor_maps if param.kind == "tensormap" else pointers
        if param.optional and param.tensor not in source:
            return struct.pack("<Q", 0)
        if param.tensor not in source:
            raise ParamPackingError(
                f"parameter '{param.name}' ({param.kind}) needs tensor '{param.tensor}', "
                "which this call does not provide"
            )
        value = source[param.tensor]
        return value if param.kind == "tensormap" else struct.pack("<Q", value)
    fmt = _SCALAR_FORMATS[param.kind]
    try:
        return b"".join(struct.pack(fmt, expr.value(scalars)) for expr in param.values)
    except struct.error as exc:
        shown = {expr.text(): expr.value(scalars) for expr in param.values}
        raise ParamPackingError(
            f"parameter '{param.name}' ({param.kind}): {shown} does not fit: {exc}"
        ) from exc


def pack_param(
    kernel: KernelSpec,
    index: int,
    scalars: Mapping[str, float],
    pointers: Mapping[str, int],
    tensor_maps: Mapping[str, bytes],
) -> bytes:
    """Parameter ``index`` of ``kernel``, of its manifest size."""
    param = kernel.params[index]
    data = _pack_one(param, scalars, pointers, tensor_maps)
    if len(data) != param.size:
        raise ParamPackingError(
            f"kernel {kernel.symbol}, params[{index}] '{param.name}' ({param.kind}): "
            f"packed {len(data)} bytes but the manifest says size {param.size}"
        )
    return data


def pack_params(
    kernel: KernelSpec,
    scalars: Mapping[str, float],
    pointers: Mapping[str, int],
    tensor_maps: Mapping[str, bytes],
) -> list[bytes]:
    """One byte string per parameter of ``kernel``, each of its manifest size."""
    return [
        pack_param(kernel, index, scalars, pointers, tensor_maps) for index in range(len(kernel.params))
    ]


SLOT_BYTES = 16  # each parameter starts at a multiple of this in the arguments' buffer
POINTER_BYTES = 8  # an entry of the void** array


class _Layout:
    """Where a KernelArguments' parameters lie: the ctypes type of its buffer (the
    parameters' bytes, then the void** array), and the array as numbers to add the
    buffer's address to (each entry's offset, and a 1, in its 64 bits of one integer)."""

    __slots__ = ("buffer", "blob_bytes", "offsets", "ones", "array_bytes")

    def __init__(self, buffer: Any, blob_bytes: int, offsets: int, ones: int, array_bytes: int) -> None:
        self.buffer, self.blob_bytes, self.offsets, self.ones, self.array_bytes = (
            buffer, blob_bytes, offsets, ones, array_bytes
        )

    @classmethod
    def of(cls, blob_bytes: int, offsets: tuple[int, ...]) -> _Layout:
        array_bytes = POINTER_BYTES * len(offsets)
        return cls(
            ctypes.c_char * (blob_bytes + array_bytes),
            blob_bytes,
            sum((blob_offset << (64 * i)) for i, blob_offset in enumerate(offsets)),
            sum(1 << (64 * i) for i in range(len(offsets))),
            array_bytes,
        )


class KernelArguments:
    """The packed parameters in one ctypes buffer (each at a SLOT_BYTES boundary), followed
    by the void** array pointing at each of them."""

    def __init__(self, packed: Sequence[bytes]) -> None:
        slots = [data.ljust(-(-len(data) // SLOT_BYTES) * SLOT_BYTES, b"\0") for data in packed]
        offsets, offset = [], 0
        for slot in slots:
            offsets.append(offset)
            offset += len(slot)
        self.offsets, self.sizes = tuple(offsets), tuple(len(data) for data in packed)
        self._place(b"".join(slots), _Layout.of(offset, self.offsets))

    def _place(self, blob: bytes, layout: _Layout) -> None:
        """Copy ``blob`` and the void** array of its parameters' addresses into a new buffer."""
        self.blob, self._layout = blob, layout
        self.buffer = layout.buffer()
        base = ctypes.addressof(self.buffer)
        array = (layout.offsets + base * layout.ones).to_bytes(layout.array_bytes, "little")
        ctypes.memmove(self.buffer, blob + array, layout.blob_bytes + layout.array_bytes)
        self.address = base + layout.blob_bytes  # cuLaunchKernelEx's kernelParams

    def replaced(self, changes: Mapping[int, bytes]) -> KernelArguments:
        """These arguments with the first bytes of parameter ``i`` replaced by ``changes[i]``
        (of its size, as pack_param packs it, or its first 8 bytes: an address)."""
        blob = bytearray(self.blob)
        for index, data in changes.items():
            blob[self.offsets[index]:self.offsets[index] + len(data)] = data
        new = KernelArguments.__new__(KernelArguments)
        new.offsets, new.sizes = self.offsets, self.sizes
        new._place(bytes(blob), self._layout)
        return new

    @property
    def buffers(self) -> list[bytes]:
        """Each parameter's bytes, as the launch passes them."""
        return [self.blob[o:o + n] for o, n in zip(self.offsets, self.sizes, strict=True)]
