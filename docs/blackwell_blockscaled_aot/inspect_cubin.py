"""Reference (not project code): what a Blackwell (ELF ABI 8) cubin says about its kernels:
arch from e_flags, toolkit from .note.nv.tkinfo, each entry symbol with its KPARAM_INFO table
(ordinal, offset, size) next to the PTX .entry parameter it comes from, and .maxntid/.reqntid
and cluster directives from the PTX.   python inspect_cubin.py X.cubin [X.ptx]"""
import json
import re
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "codegen"))
from dglu_build.cubin_info import read_cubin  # noqa: E402  (reads KPARAM_INFO; its arch/toolkit are ABI-7 only)

data = Path(sys.argv[1]).read_bytes()
abi, flags = data[8], struct.unpack_from("<I", data, 48)[0]
arch = (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF
tk = re.search(rb"release (\d+\.\d+)", data)
info = read_cubin(data)
ptx = Path(sys.argv[2]).read_text() if len(sys.argv) > 2 else ""
report = {"elf_abi": abi, "e_flags": hex(flags), "arch": arch, "toolkit": tk.group(1).decode() if tk else None, "kernels": {}}
for sym, k in info.kernels.items():
    entry = re.search(r"\.entry\s+" + re.escape(sym) + r"\s*\((.*?)\)\s*(.*?)\{", ptx, re.S)
    decls = re.findall(r"\.param\s+(.*?)\s+(\S+?)(?:\[(\d+)\])?\s*[,)]?\s*$", entry.group(1), re.M) if entry else []
    params = []
    for i, p in enumerate(k.params):
        d = decls[i] if i < len(decls) else ("", "", "")
        params.append({"ordinal": p.ordinal, "offset": p.offset, "size": p.size, "ptx": (d[0] + (f"[{d[2]}]" if d[2] else "")).strip()})
    directives = " ".join(entry.group(2).split()) if entry else ""
    report["kernels"][sym] = {"symbol_len": len(sym), "param_bytes": sum(p.size for p in k.params) and k.params[-1].offset + k.params[-1].size,
                              "params": params, "ptx_directives": directives}
json.dump(report, sys.stdout, indent=1)
print()
