"""Pack kernel parameters exactly as the manifest lists them.

Each parameter becomes its own little-endian byte string, checked against the manifest's
size: ``tensormap``: the 128-byte CUtensorMap; ``i32_tuple``: consecutive int32 scalars;
``pointer``: a 64-bit device address (NULL for an optional one the variant does not list);
``i32`` / ``i64`` / ``f32``: one scalar; ``f32_const``: the number the manifest gives;
``zeros``: ``size`` zero bytes; ``pointer_i32s``: an address, then int32 scalars, zero-padded
to ``size`` (a DSL tensor's pointer and dynamic extents). Scalars are EXPRESSIONs
evaluated on the call's scalars. The buffers and the ``void**`` array that cuLaunchKernelEx reads live
in KernelArguments.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping, Sequence

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


def pack_params(
    kernel: KernelSpec,
    scalars: Mapping[str, float],
    pointers: Mapping[str, int],
    tensor_maps: Mapping[str, bytes],
) -> list[bytes]:
    """One byte string per parameter of ``kernel``, each of its manifest size."""
    packed = []
    for index, param in enumerate(kernel.params):
        data = _pack_one(param, scalars, pointers, tensor_maps)
        if len(data) != param.size:
            raise ParamPackingError(
                f"kernel {kernel.symbol}, params[{index}] '{param.name}' ({param.kind}): "
                f"packed {len(data)} bytes but the manifest says size {param.size}"
            )
        packed.append(data)
    return packed


class KernelArguments:
    """Per-parameter ctypes buffers and the void** array pointing at them."""

    def __init__(self, packed: Sequence[bytes]) -> None:
        self.buffers = [ctypes.create_string_buffer(data, len(data)) for data in packed]
        self.pointer_array = (ctypes.c_void_p * len(packed))(
            *(ctypes.addressof(buffer) for buffer in self.buffers)
        )

    @property
    def address(self) -> int:
        """The address of the void** array, as cuLaunchKernelEx's kernelParams."""
        return ctypes.addressof(self.pointer_array)
