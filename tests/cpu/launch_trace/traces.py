"""Shared by the launch-parity tests: build the stand-in libcuda.so.1, trace one call of a
variant through it (trace_calls.py in a subprocess: cuDNN FE's DSL host code, then dglu's
runtime) and read what a launch's TMA parameters say."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
B200_SMS = 148
FIRST_ALLOCATION = 0x10000  # the stand-in's first cuMemAllocAsync address: dglu's workspace
LAUNCHES = ("cuLaunchKernelEx", "_cudaLaunchKernelEx")
CAPABILITY = {"sm_100a": "100", "sm_103a": "103"}


def build_stand_in(directory: Path) -> Path | None:
    """Compile libcuda_trace.c into ``directory``/libcuda.so.1; None without a C compiler."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return None
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", directory / "libcuda.so.1", HERE / "libcuda_trace.c"], check=True)
    return directory


def trace_call(stand_in: Path, artifacts: Path, variant, problem: dict, trace: Path) -> dict[str, list[dict]]:
    """The launches of each phase ("dsl", "dglu") of one call of ``variant`` (from the
    manifest in ``artifacts``) of ``problem`` (m, n, k)."""
    clusters = B200_SMS // (variant.cluster_m * variant.cluster_n)
    case = {"variant": variant.name, **problem, "workspace": FIRST_ALLOCATION, "clusters": clusters}
    env = {
        **os.environ,
        "LD_PRELOAD": str(stand_in / "libcuda.so.1"),
        "LD_LIBRARY_PATH": str(stand_in),
        "FAKECUDA_TRACE": str(trace),
        "FAKECUDA_DRIVER_VERSION": "13040",
        "FAKECUDA_CC": CAPABILITY[variant.arch],
        "FAKECUDA_ACTIVE_CLUSTERS": str(clusters),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "runtime"), str(REPO_ROOT / "codegen")]),
    }
    done = subprocess.run([sys.executable, HERE / "trace_calls.py", json.dumps(case), artifacts],
                          env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stdout + done.stderr)
    phases: dict[str, list[dict]] = {}
    phase = None
    for record in map(json.loads, trace.read_text().splitlines()):
        if record["fn"] == "phase":
            phase = record["phase"]
            phases.setdefault(phase, [])
        elif record["fn"] in LAUNCHES:
            phases[phase].append(record)
    return phases


def dsl_descriptor(data: bytes, rank: int) -> dict:
    """What the DSL's inline TMA descriptor (hardware format, 64 bytes) says of the address
    (word 0), the byte strides past the innermost (32-bit fields from the upper half of
    word 1 on, in units of 16 bytes), the dims (32-bit fields of words 4-5, minus one) and
    the box (byte 7 of word 6, then the bytes of word 7, minus one). Word 1's lower half
    (element type, rank, swizzle, interleave, L2 promotion, OOB fill) is not decoded."""
    words = struct.unpack("<8Q", data[:64])
    fields = [words[1] >> 32, words[2] & 0xFFFFFFFF, words[2] >> 32, words[3] & 0xFFFFFFFF]
    dims = [(words[4] & 0xFFFFFFFF) + 1, (words[4] >> 32) + 1, (words[5] & 0xFFFFFFFF) + 1][:rank]
    box = [(words[6] >> 56) + 1, *(b + 1 for b in struct.pack("<Q", words[7])[: rank - 1])]
    return {"address": words[0], "strides": [16 * field for field in fields[: rank - 1]], "dims": dims, "box": box}


def encode_arguments(data: bytes) -> dict:
    """The cuTensorMapEncodeTiled arguments the stand-in wrote into a map ("TMAP" + them)."""
    if data[:4] != b"TMAP":
        raise ValueError("not a stand-in tensor map")
    dtype, rank, interleave, swizzle, l2, oob = data[4:10]
    return {
        "dtype": dtype, "interleave": interleave, "swizzle": swizzle, "l2_promotion": l2, "oob_fill": oob,
        "address": struct.unpack_from("<Q", data, 16)[0],
        "dims": list(struct.unpack_from(f"<{rank}Q", data, 24)),
        "strides": list(struct.unpack_from(f"<{rank - 1}Q", data, 64)),
        "box": list(struct.unpack_from(f"<{rank}H", data, 96)),
        "element_strides": list(data[106 : 106 + rank]),
    }


def without_unused_strides(data: bytes, dims: list[int]) -> bytes:
    """A descriptor's first 64 bytes with the stride fields of dimensions of extent 1 zeroed
    (no address depends on them; the DSL writes 0 where dglu writes B's expert stride)."""
    words = list(struct.unpack("<8Q", data[:64]))
    fields = [(1, 32), (2, 0), (2, 32), (3, 0)]  # (word, bit) of strides 1.. (see dsl_descriptor)
    for (word, bit), dim in zip(fields, dims[1:]):
        if dim == 1:
            words[word] &= ~(0xFFFFFFFF << bit) & 0xFFFFFFFFFFFFFFFF
    return struct.pack("<8Q", *words)
