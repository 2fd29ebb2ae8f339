"""cubin_info reads both ELF ABI versions ptxas writes: 7 (CUDA 12 for sm_90a) and 8
(CUDA 12.9 for Blackwell, CUDA 13 for every target). The cubins here are assembled
byte by byte, so each field the reader takes is set on purpose and nothing else is."""

from __future__ import annotations

import struct

import pytest
from dglu_build.cubin_info import CubinError, read_cubin

EM_CUDA = 190
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOTE, SHT_NOBITS = 1, 2, 3, 7, 8
EIFMT_SVAL, EIFMT_HVAL = 4, 3
KPARAM_INFO, MAX_THREADS, REQNTID, FRAME_SIZE, CBANK_PARAM_SIZE = 0x17, 0x05, 0x10, 0x11, 0x19


def _record(attr: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return struct.pack("<BBH", EIFMT_HVAL, attr, payload)
    return struct.pack("<BBH", EIFMT_SVAL, attr, len(payload)) + payload


def _kparam(ordinal: int, offset: int, size: int) -> bytes:
    return _record(KPARAM_INFO, struct.pack("<IHHI", 0, ordinal, offset, size << 18))


def _tkinfo(release: str) -> bytes:
    strings = b"\0ptxas\0Cuda compilation tools, release " + release.encode() + b", V0.0.0\0-O 3\0"
    desc = struct.pack("<IIII", 2, 0, 1, 7) + strings
    return struct.pack("<III", 12, len(desc), 2000) + b"NVIDIA Corp\0" + desc


def _cubin(abi: int, e_flags: int, e_version: int, kernel: str, tkinfo: bytes | None, frame: int) -> bytes:
    """An ELF64 cubin: one entry function ``kernel`` with two params (8 + 128 bytes) and a
    256-thread bound, its frame size in .nv.info, 3072 bytes of .nv.shared."""
    strtab = b"\0" + kernel.encode() + b"\0"
    symtab = bytes(24) + struct.pack("<IBBHQQ", 1, 0x12, 0x10, 0, 0, 0)  # FUNC, CUDA entry
    block = (MAX_THREADS if abi >= 8 else REQNTID, struct.pack("<3I", 256, 1, 1))
    kernel_info = _kparam(0, 0, 8) + _kparam(1, 64, 128) + _record(*block) + _record(CBANK_PARAM_SIZE, 192)
    global_info = _record(FRAME_SIZE, struct.pack("<II", 1, frame))
    sections = [
        (".strtab", SHT_STRTAB, strtab, 0),
        (".symtab", SHT_SYMTAB, symtab, 1),
        (".nv.info", SHT_PROGBITS, global_info, 0),
        (f".nv.info.{kernel}", SHT_PROGBITS, kernel_info, 0),
        (f".nv.shared.{kernel}", SHT_NOBITS, bytes(3072), 0),
    ]
    if tkinfo is not None:
        sections.append((".note.nv.tkinfo", SHT_NOTE, tkinfo, 0))
    names = b"\0"
    name_offsets = []
    for name, *_ in [*sections, (".shstrtab",)]:
        name_offsets.append(len(names))
        names += name.encode() + b"\0"
    sections.append((".shstrtab", SHT_STRTAB, names, 0))
    body, offsets, position = b"", [], 64
    for _, kind, data, _ in sections:
        offsets.append(position + len(body))
        body += data if kind != SHT_NOBITS else b""
    shoff = 64 + len(body)
    headers = bytes(64)  # the null section
    for index, (_, kind, data, link) in enumerate(sections):
        headers += struct.pack("<IIQQQQIIQQ", name_offsets[index], kind, 0, 0, offsets[index], len(data), link, 0, 1, 24 if kind == SHT_SYMTAB else 0)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41 if abi >= 8 else 0x33, abi]) + bytes(7)
    header = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, EM_CUDA, e_version, 0, 0, shoff, e_flags, 64, 0, 0, 64, len(sections) + 1, len(sections))
    return header + body + headers


def test_abi_8_takes_the_arch_from_the_second_byte_and_the_toolkit_from_the_note():
    info = read_cubin(_cubin(8, 0x06006702, 1, "k_main", _tkinfo("13.4"), frame=0))
    assert (info.abi_version, info.sm, info.toolkit, info.min_driver) == (8, 103, "13.4", 13000)
    kernel = info.kernels["k_main"]
    assert [(p.ordinal, p.offset, p.size) for p in kernel.params] == [(0, 0, 8), (1, 64, 128)]
    assert kernel.max_threads == (256, 1, 1) and kernel.reqntid is None
    assert (kernel.frame_bytes, kernel.static_smem_bytes) == (0, 3072)


def test_abi_8_sm_100a_and_sm_90a_from_cuda_12_9_and_13():
    assert read_cubin(_cubin(8, 0x0600640A, 1, "k", _tkinfo("12.9"), 0)).sm == 100
    info = read_cubin(_cubin(8, 0x06005A04, 1, "k", _tkinfo("13.4"), 0))
    assert (info.sm, info.toolkit) == (90, "13.4")


def test_abi_7_keeps_the_low_byte_and_e_version():
    info = read_cubin(_cubin(7, 0x005A055A, 129, "k", None, frame=24))
    assert (info.abi_version, info.sm, info.toolkit, info.min_driver) == (7, 90, "12.9", 12000)
    assert info.kernels["k"].reqntid == (256, 1, 1)
    assert info.kernels["k"].frame_bytes == 24  # local memory, which the compile check refuses


def test_a_tkinfo_note_without_a_release_is_refused():
    note = _tkinfo("13.4").replace(b"Cuda compilation tools", b"Something else tools")
    with pytest.raises(CubinError, match="tkinfo"):
        read_cubin(_cubin(8, 0x06006402, 1, "k", note, 0))
