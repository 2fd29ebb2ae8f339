"""Check a variant's launch description (docs/manifest.md) before it ships.

The KERNEL entries say how to launch each kernel; the cubin says what
ptxas built. They must agree on the symbols, the block size and, parameter
by parameter, on size and placement: ptxas places parameter i at the first
offset past parameter i-1 that is aligned (counted from the start of the
constant bank) to the parameter's alignment. Every tensormap parameter
also needs a TMA rule to encode its descriptor from.
"""

from __future__ import annotations

from dglu_build.cubin_info import CubinError, CubinInfo, CubinKernel, read_cubin

# kind -> (size, align) of its PTX parameter; i32_tuple's size is 4 per value; None: the
# entry's own (zeros: a struct of any size; pointer_i32s: a pointer, its int32 values, padding).
PARAM_LAYOUT: dict[str, tuple[int | None, int | None]] = {
    "tensormap": (128, 64),
    "pointer": (8, 8),
    "i32": (4, 4),
    "i64": (8, 8),
    "f32": (4, 4),
    "f32_const": (4, 4),
    "i32_tuple": (None, 4),
    "zeros": (None, None),
    "pointer_i32s": (None, 8),
}
TMA_RULE_FIELDS = ("dtype", "dims", "box", "swizzle", "l2_promotion", "oob_fill", "interleave")


class AbiMismatch(ValueError):
    """A launch description that disagrees with its cubin or with itself."""


def check_variant_cubin(cubin: bytes, entry: dict, where: str) -> CubinInfo:
    """Check a variant's manifest ``entry`` (its key's arch, ``kernels`` and ``tma``) against
    its cubin; return what the cubin says."""
    try:
        info = read_cubin(cubin)
    except CubinError as err:
        raise AbiMismatch(f"{where}: the cubin is unreadable: {err}") from None
    arch = entry["key"]["arch"]
    arch_sm = int("".join(ch for ch in arch if ch.isdigit()))
    if info.sm != arch_sm:
        raise AbiMismatch(f"{where}: cubin is for sm_{info.sm}, the variant's arch is {arch}")
    check_kernels(entry["kernels"], info, where)
    check_tma_rules(entry["kernels"], entry["tma"], where)
    return info


def check_kernels(kernels: list[dict], cubin: CubinInfo, where: str) -> None:
    """Raise AbiMismatch, naming ``where``, at the first disagreement."""
    listed = sorted(entry["symbol"] for entry in kernels)
    if listed != sorted(cubin.kernels):
        raise AbiMismatch(f"{where}: the manifest lists kernels {listed}, the cubin has {sorted(cubin.kernels)}")
    for entry in kernels:
        symbol = entry["symbol"]
        found = cubin.kernels[symbol]
        _check_block(entry, found, f"{where}: kernel {symbol}")
        _check_params(entry["params"], found, f"{where}: kernel {symbol}")


def _check_block(entry: dict, found: CubinKernel, where: str) -> None:
    declared = tuple(found.reqntid or found.max_threads or ())
    if declared and tuple(entry["block"]) != declared:
        raise AbiMismatch(f"{where}: block {entry['block']} but the cubin requires {list(declared)}")


def _check_params(params: list[dict], found: CubinKernel, where: str) -> None:
    if len(params) != len(found.params):
        raise AbiMismatch(f"{where}: {len(params)} params in the manifest, {len(found.params)} in the cubin")
    base = found.param_base or 0
    end = 0
    for index, (param, actual) in enumerate(zip(params, found.params)):
        label = f"{where}: param {index} ({param.get('name')!r})"
        _check_kind(param, label)
        if param["size"] != actual.size:
            raise AbiMismatch(f"{label}: size {param['size']} but the cubin has {actual.size}")
        expected = _align_up(base + end, param["align"]) - base
        if actual.offset != expected:
            raise AbiMismatch(
                f"{label}: the cubin places it at offset {actual.offset}, "
                f"but align {param['align']} after offset {end} gives {expected}"
            )
        end = actual.offset + actual.size
    if found.param_bytes is not None and end != found.param_bytes:
        raise AbiMismatch(f"{where}: params end at {end} but the cubin has {found.param_bytes} bytes of params")


def _align_up(offset: int, align: int) -> int:
    return -(-offset // align) * align


def _check_kind(param: dict, label: str) -> None:
    kind = param.get("kind")
    if kind not in PARAM_LAYOUT:
        raise AbiMismatch(f"{label}: unknown kind {kind!r}; known: {', '.join(PARAM_LAYOUT)}")
    size, align = PARAM_LAYOUT[kind]
    if kind == "i32_tuple":
        size = 4 * len(param.get("values", []))
    elif kind in ("zeros", "pointer_i32s"):
        size, align = param.get("size"), align or param.get("align")
    if (param.get("size"), param.get("align")) != (size, align):
        raise AbiMismatch(
            f"{label}: a {kind} has size {size} and align {align}, "
            f"the manifest says size {param.get('size')} and align {param.get('align')}"
        )


def check_tma_rules(kernels: list[dict], tma: dict[str, dict], where: str) -> None:
    """Each tensormap parameter's tensor has a complete TMA rule."""
    for entry in kernels:
        for param in entry["params"]:
            if param["kind"] != "tensormap":
                continue
            rule = tma.get(param["tensor"])
            label = f"{where}: kernel {entry['symbol']}: param {param['name']!r}"
            if rule is None:
                raise AbiMismatch(f"{label}: no TMA rule for tensor {param['tensor']!r}; rules exist for {sorted(tma)}")
            missing = [field for field in TMA_RULE_FIELDS if field not in rule]
            if missing:
                raise AbiMismatch(f"{label}: TMA rule of {param['tensor']!r} lacks {', '.join(missing)}")
            if sorted(rule["dims"]) != list(range(len(rule["box"]))):
                raise AbiMismatch(
                    f"{label}: TMA rule of {param['tensor']!r}: dims {rule['dims']} must order "
                    f"the {len(rule['box'])} dimensions of box {rule['box']}"
                )
