"""Kernel parameter declarations, in pure Python: one per kernel, used twice.

A kernel declares its parameters once, as a tuple of the kinds below, in its parameter
order. From it the family's compile step builds the kernel's launch arguments
(``launch_arguments``: DSL values by tensor or scalar name) and checks the kernel's own
signature against it (``check_signature``); the manifest's KERNEL entry is generated
from it (``manifest_kernel``, docs/manifest.md).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

POINTER_BYTES = 8
TENSORMAP_BYTES = 128  # a CUtensorMap
TENSORMAP_ALIGN = 64
I32_BYTES = 4
I64_BYTES = 8


class TmaTensor(NamedTuple):
    """A TMA atom and the tensor it partitions: a CUtensorMap, then the tensor's
    int32 extents (its dynamic shape), named ``tma_<tensor>`` and ``<tensor>_extents``;
    ``extents`` (EXPRESSIONs) where they are not the tensor's leading ones."""

    tensor: str
    extents: tuple[str | int, ...] | None = None


class TmaAtom(NamedTuple):
    """A TMA atom alone (e.g. a descriptor template to copy): a CUtensorMap."""

    tensor: str


class Pointer(NamedTuple):
    """A raw device pointer to a tensor; ``optional``: NULL when the variant lists no such tensor."""

    tensor: str
    optional: bool = False


class Int32(NamedTuple):
    """One int32 scalar of the problem."""

    scalar: str


class Int64(NamedTuple):
    """One int64 scalar of the problem."""

    scalar: str


class Zeros(NamedTuple):
    """Bytes a kernel takes that every launch leaves zero (a TiledMma's state, the unused
    scalars of a helper)."""

    name: str
    size: int
    align: int


class PointerExtents(NamedTuple):
    """A pointer and int32 values (EXPRESSIONs: a tensor's dynamic extents and strides) in
    one struct of ``size`` bytes, pointer-aligned, the rest zero."""

    tensor: str
    values: tuple[str | int, ...]
    size: int = 16


class Float32Constant(NamedTuple):
    """An fp32 parameter whose value the variant fixes (a compiled-in activation constant
    the kernel takes at run time)."""

    name: str
    value: float


Param = TmaTensor | TmaAtom | Pointer | Int32 | Int64 | Zeros | PointerExtents | Float32Constant

# signature annotations, by name, that each kind of parameter takes in a @cute.kernel
_ANNOTATIONS = {
    TmaTensor: ("CopyAtom", "Tensor"),
    TmaAtom: ("CopyAtom",),
    Pointer: ("Pointer",),
    Int32: ("Int32",),
}


@dataclass(frozen=True)
class KernelDeclaration:
    """One ``__global__`` function of a variant: its role, parameters and launch shape."""

    role: str
    params: tuple[Param, ...]
    block: int  # threads per block (x)
    grid: Mapping[str, Any]  # the manifest's grid rule
    cluster_m: int = 1
    cluster_n: int = 1


def _name(param: Param) -> str:
    return param.scalar if isinstance(param, Int32) else param.tensor


def launch_arguments(params: Sequence[Param], values: Mapping[str, Any]) -> list[Any]:
    """The kernel's arguments in declared order; ``values`` maps each name to its DSL
    value, a TMA tensor's to its (atom, tensor) pair."""
    arguments = []
    for param in params:
        value = values[_name(param)]
        if isinstance(param, TmaTensor):
            arguments.extend(value)
        else:
            arguments.append(value[0] if isinstance(param, TmaAtom) else value)
    return arguments


def check_signature(kernel: Callable, params: Sequence[Param]) -> None:
    """Raise TypeError unless the (bound) ``kernel``'s parameters take ``params`` in order.

    Trailing parameters that default to None and that ``params`` does not cover are a
    variant's absent ones: left None, they are compile-time constants to the DSL, not
    kernel parameters."""
    taken = list(inspect.signature(kernel).parameters.values())
    declared = [kind for param in params for kind in _ANNOTATIONS[type(param)]]
    while len(taken) > len(declared) and taken[-1].default is None:
        taken.pop()
    annotations = [_type_name(p.annotation) for p in taken]
    if annotations != declared:
        raise TypeError(f"{kernel.__qualname__} takes {annotations}; its declaration says {declared}")


def _type_name(annotation: Any) -> str:
    """``Int32`` of cutlass.Int32, of ``cutlass.Int32 | None`` (a parameter a variant may
    leave out: the DSL casts a plain Int32's None), or of their strings (postponed
    annotations)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    (text,) = (member.strip() for member in text.split("|") if member.strip() != "None")
    return text.rsplit(".", 1)[-1]


def manifest_params(params: Sequence[Param], extents: Callable[[str], list[str]]) -> list[dict]:
    """The manifest's PARAM entries; ``extents(tensor)`` names a TMA tensor's extents."""
    entries: list[dict] = []
    for param in params:
        if isinstance(param, (TmaTensor, TmaAtom)):
            entries.append(
                {"name": f"tma_{param.tensor}", "kind": "tensormap", "size": TENSORMAP_BYTES,
                 "align": TENSORMAP_ALIGN, "tensor": param.tensor}
            )
        if isinstance(param, TmaTensor):
            values = list(param.extents) if param.extents is not None else extents(param.tensor)
            entries.append(
                {"name": f"{param.tensor}_extents", "kind": "i32_tuple", "size": I32_BYTES * len(values),
                 "align": I32_BYTES, "values": values}
            )
        elif isinstance(param, Pointer):
            entry = {"name": param.tensor, "kind": "pointer", "size": POINTER_BYTES, "align": POINTER_BYTES,
                     "tensor": param.tensor}
            entries.append({**entry, "optional": True} if param.optional else entry)
        elif isinstance(param, Int32):
            entries.append({"name": param.scalar, "kind": "i32", "size": I32_BYTES, "align": I32_BYTES,
                            "value": param.scalar})
        elif isinstance(param, Int64):
            entries.append({"name": param.scalar, "kind": "i64", "size": I64_BYTES, "align": I64_BYTES,
                            "value": param.scalar})
        elif isinstance(param, Zeros):
            entries.append({"name": param.name, "kind": "zeros", "size": param.size, "align": param.align})
        elif isinstance(param, PointerExtents):
            entries.append({"name": param.tensor, "kind": "pointer_i32s", "size": param.size, "align": POINTER_BYTES,
                            "tensor": param.tensor, "values": list(param.values)})
        elif isinstance(param, Float32Constant):
            entries.append({"name": param.name, "kind": "f32_const", "size": I32_BYTES, "align": I32_BYTES,
                            "value": param.value})
    return entries


def symbol_of(symbols: Sequence[str], prefix: str, role: str) -> str:
    """The cubin symbol of the kernel ``role``: ``<prefix>_<role>`` plus the DSL's trace suffix."""
    found = [s for s in symbols if re.fullmatch(re.escape(f"{prefix}_{role}") + r"_\d+", s)]
    if len(found) != 1:
        raise RuntimeError(f"expected one kernel {prefix}_{role}_<n> in the cubin, found {found} among {list(symbols)}")
    return found[0]


def manifest_kernel(
    kernel: KernelDeclaration, symbol: str, dynamic_smem_bytes: int, extents: Callable[[str], list[str]]
) -> dict:
    """The manifest's KERNEL entry of a declared kernel, given what the compile found."""
    cluster = [kernel.cluster_m, kernel.cluster_n, 1]
    return {
        "role": kernel.role,
        "symbol": symbol,
        "block": [kernel.block, 1, 1],
        "cluster": cluster,
        "dynamic_smem_bytes": dynamic_smem_bytes,
        "attributes": {"cluster_dimension": cluster} if kernel.cluster_m * kernel.cluster_n > 1 else {},
        "grid": dict(kernel.grid),
        "params": manifest_params(kernel.params, extents),
    }
