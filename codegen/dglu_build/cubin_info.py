"""Read a cubin's own description of its kernels, in pure Python.

A cubin is an ELF64 file. Its ``__global__`` functions are FUNC symbols
marked as CUDA entries; the section ``.nv.info.<kernel>`` holds records
(EIATTR_*) such as each parameter's ordinal, offset and size
(EIATTR_KPARAM_INFO), where the parameters start in the constant bank
(EIATTR_PARAM_CBANK) and the block size from ``.reqntid`` (EIATTR_REQNTID) or
``.maxntid`` (EIATTR_MAX_THREADS); the section ``.nv.info`` holds per-function records
such as the stack frame (EIATTR_FRAME_SIZE: local memory), ``.nv.shared.<kernel>`` the
static shared memory. This is the independent check of a manifest's ABI: it reads what
ptxas wrote, not what the build side claims.

Two ELF ABI versions (``e_ident[EI_ABIVERSION]``) occur. ABI 7 (CUDA 12 ptxas for
sm_90a): the architecture is ``e_flags & 0xFF`` and the toolkit ``e_version`` (129 is
12.9). ABI 8 (CUDA 12.9 ptxas for Blackwell, CUDA 13 ptxas for every target): the
architecture is ``(e_flags >> 8) & 0xFF`` and the toolkit is named by the note
``.note.nv.tkinfo`` ("Cuda compilation tools, release 13.4"). Layouts were
cross-checked against ``cuobjdump -elf`` (CUDA 12.9 and 13.4 cubins, ABI 7 and 8).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_KPARAM_INFO = struct.Struct("<IHHI")

_EM_CUDA = 190
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10
_SHT_SYMTAB = 2
_EI_ABIVERSION = 8
_ABI_ARCH_IN_SECOND_BYTE = 8  # from ELF ABI version 8 on, e_flags holds the arch in bits 8-15
_TOOLKIT_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+)")

# .nv.info record formats and the attributes read here.
_EIFMT_SVAL = 4  # a u16 byte count, then that many bytes; other formats carry a u16 value
_EIATTR_MAX_THREADS = 0x05
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_PARAM_CBANK = 0x0A
_EIATTR_REQNTID = 0x10
_EIATTR_KPARAM_INFO = 0x17
_EIATTR_CBANK_PARAM_SIZE = 0x19


class CubinError(ValueError):
    """Bytes that are not a cubin this module can read."""


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter as ptxas laid it out."""

    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class CubinKernel:
    """A ``__global__`` function of a cubin."""

    symbol: str
    params: tuple[KernelParam, ...]  # by ordinal
    param_base: int | None  # where offset 0 sits in the constant bank (EIATTR_PARAM_CBANK)
    param_bytes: int | None  # EIATTR_CBANK_PARAM_SIZE
    reqntid: tuple[int, int, int] | None  # from .reqntid
    max_threads: tuple[int, int, int] | None  # from .maxntid
    frame_bytes: int = 0  # stack frame per thread (local memory), EIATTR_FRAME_SIZE
    static_smem_bytes: int = 0  # size of its .nv.shared.<kernel> section


@dataclass(frozen=True)
class CubinInfo:
    """What a cubin says about itself."""

    sm: int  # e.g. 90 for sm_90 / sm_90a, 103 for sm_103a
    toolkit: str  # CUDA toolkit of ptxas, e.g. "12.9"
    kernels: dict[str, CubinKernel]
    abi_version: int = 7  # e_ident[EI_ABIVERSION]

    @property
    def min_driver(self) -> int:
        """The oldest CUDA driver that loads the cubin, as cuDriverGetVersion counts it
        (1000 * major + 10 * minor): the first of its toolkit's major version, e.g. 13.4 ->
        13000. CUDA's minor version compatibility: a driver loads the machine code (no PTX)
        that any toolkit of its own major version built (seen on the H200: a 13.0 driver runs
        ptxas 13.4's sm_90a cubins)."""
        major = int(self.toolkit.split(".")[0])
        return 1000 * major


def read_cubin(data: bytes) -> CubinInfo:
    """Parse the cubin ``data``; raises CubinError if it is not one."""
    if len(data) < _ELF_HEADER.size or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a little-endian ELF64 file")
    header = _ELF_HEADER.unpack_from(data)
    machine, version, shoff, flags = header[2], header[3], header[6], header[7]
    shentsize, shnum, shstrndx = header[11], header[12], header[13]
    if machine != _EM_CUDA:
        raise CubinError(f"ELF machine is {machine}, not CUDA ({_EM_CUDA})")
    sections = [_SECTION_HEADER.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names = _section(data, sections[shstrndx])
    by_name = {_cstring(names, sh[0]): sh for sh in sections}
    abi_version = data[_EI_ABIVERSION]
    sm = (flags >> 8) & 0xFF if abi_version >= _ABI_ARCH_IN_SECOND_BYTE else flags & 0xFF

    symbols = _symbols(data, sections)
    frames = _frame_sizes(data, by_name.get(".nv.info"), symbols)
    kernels = {}
    for symbol in (name for name, (_, entry) in symbols.items() if entry):
        info = by_name.get(f".nv.info.{symbol}")
        records = _nv_info_records(_section(data, info)) if info else []
        shared = by_name.get(f".nv.shared.{symbol}")
        kernels[symbol] = _kernel(symbol, records, frames.get(symbol, 0), shared[5] if shared else 0)
    return CubinInfo(sm=sm, toolkit=_toolkit(data, by_name, version), kernels=kernels, abi_version=abi_version)


def _toolkit(data: bytes, by_name: dict[str, tuple], version: int) -> str:
    """The ptxas toolkit: named by .note.nv.tkinfo where there is one, else e_version (ABI 7)."""
    note = by_name.get(".note.nv.tkinfo")
    if note is None:
        return f"{version // 10}.{version % 10}"
    match = _TOOLKIT_RELEASE.search(_section(data, note))
    if match is None:
        raise CubinError(".note.nv.tkinfo names no 'Cuda compilation tools, release X.Y'")
    return f"{int(match[1])}.{int(match[2])}"


def _section(data: bytes, header: tuple) -> bytes:
    offset, size = header[4], header[5]
    if offset + size > len(data):
        raise CubinError("a section runs past the end of the file")
    return data[offset : offset + size]


def _cstring(table: bytes, offset: int) -> str:
    return table[offset : table.index(b"\0", offset)].decode()


def _symbols(data: bytes, sections: list[tuple]) -> dict[str, tuple[int, bool]]:
    """Each FUNC symbol's (symbol table index, whether it is a CUDA entry), in symbol order."""
    symbols = {}
    for sh in sections:
        if sh[1] != _SHT_SYMTAB:
            continue
        table, strings = _section(data, sh), _section(data, sections[sh[6]])
        for index, offset in enumerate(range(0, len(table), _SYMBOL.size)):
            name, info, other = _SYMBOL.unpack_from(table, offset)[:3]
            if info & 0xF == _STT_FUNC:
                symbols[_cstring(strings, name)] = (index, bool(other & _STO_CUDA_ENTRY))
    return symbols


def _frame_sizes(data: bytes, info: tuple | None, symbols: dict[str, tuple[int, bool]]) -> dict[str, int]:
    """Stack frame bytes per function, from the global .nv.info's EIATTR_FRAME_SIZE records
    (payload: symbol index, bytes)."""
    if info is None:
        return {}
    by_index = {index: name for name, (index, _) in symbols.items()}
    frames = {}
    for attr, payload in _nv_info_records(_section(data, info)):
        if attr == _EIATTR_FRAME_SIZE and isinstance(payload, bytes):
            index, size = struct.unpack_from("<II", payload)
            if index in by_index:
                frames[by_index[index]] = size
    return frames


def _nv_info_records(section: bytes) -> list[tuple[int, bytes | int]]:
    """(attribute, payload bytes or u16 value) of each .nv.info record."""
    records, pos = [], 0
    while pos + 4 <= len(section):
        fmt, attr, value = struct.unpack_from("<BBH", section, pos)
        pos += 4
        if fmt == _EIFMT_SVAL:
            records.append((attr, section[pos : pos + value]))
            pos += value
        else:
            records.append((attr, value))
    if pos != len(section):
        raise CubinError(f".nv.info section of {len(section)} bytes ends inside a record")
    return records


def _kernel(symbol: str, records: list[tuple[int, bytes | int]], frame_bytes: int, static_smem_bytes: int) -> CubinKernel:
    params, param_base, param_bytes, reqntid, max_threads = [], None, None, None, None
    for attr, payload in records:
        if attr == _EIATTR_KPARAM_INFO:
            _, ordinal, offset, packed = _KPARAM_INFO.unpack(payload)
            params.append(KernelParam(ordinal=ordinal, offset=offset, size=(packed >> 18) & 0x3FFF))
        elif attr == _EIATTR_PARAM_CBANK:
            param_base = struct.unpack_from("<H", payload, 4)[0]
        elif attr == _EIATTR_CBANK_PARAM_SIZE:
            param_bytes = payload
        elif attr == _EIATTR_REQNTID:
            reqntid = struct.unpack("<3I", payload)
        elif attr == _EIATTR_MAX_THREADS:
            max_threads = struct.unpack("<3I", payload)
    params.sort(key=lambda param: param.ordinal)
    return CubinKernel(symbol, tuple(params), param_base, param_bytes, reqntid, max_threads, frame_bytes, static_smem_bytes)
