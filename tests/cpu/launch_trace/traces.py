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
FIRST_ALLOCATION = 0x10000  # the stand-in's first allocation's address: dglu's workspace
LAUNCHES = ("cuLaunchKernelEx", "_cudaLaunchKernelEx")
CAPABILITY = {"sm_100a": "100", "sm_103a": "103"}


def build_stand_in(directory: Path) -> Path | None:
    """Compile libcuda_trace.c into ``directory``/libcuda.so.1; None without a C compiler."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return None
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", directory / "libcuda.so.1", HERE / "libcuda_trace.c"], check=True)
    return directory


def trace_call(
    stand_in: Path, artifacts: Path, variant, problem: dict, trace: Path, static: bool = True
) -> dict[str, list[dict]]:
    """The launches of each phase ("dsl", "static" unless not ``static``, "dglu") of one call
    of ``variant`` (from the manifest in ``artifacts``) of ``problem`` (m, n, k)."""
    clusters = B200_SMS // (variant.cluster_m * variant.cluster_n)
    case = {"variant": variant.name, **problem, "workspace": FIRST_ALLOCATION, "clusters": clusters, "static": static}
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


# The DSL's inline descriptor is the hardware format (tests/gpu/test_sm100_tma_descriptors.py
# checks it against a real driver's cuTensorMapEncodeTiled), which no public document
# describes. What dsl_descriptor reads of it was inferred from the descriptors of maps whose
# encode arguments are known (dglu's, of the same tensors): word 0 the address; word 1 bits 4-6
# the rank - 1, bits 7-12 the element type (HARDWARE_TYPES, its own numbering, seen for seven
# types: BF16 is 10, the driver's enum 9), bits 13-14 the swizzle (the driver's enum, all four
# values seen) and bits 17-18 the L2 promotion (only 128B is seen: the bits holding the
# driver's 2, the guess that fits the swizzle's encoding), its upper half and words 2-3 the byte
# strides past the innermost (32-bit fields in units of 16 bytes); words 4-5 the dims (32-bit
# fields, minus one); byte 7 of word 6 and the bytes of word 7 the box (minus one). Not
# located: interleave, OOB fill and element strides (every map here has none, none and 1s, so
# no bit moves with them), a fifth dimension (no map here has one), and the meaning of bit 1
# (always set) and bit 21 (the encoder's own, moving with the strides).
HARDWARE_TYPES = {0: "u8", 1: "u16", 4: "u64", 6: "f16", 7: "f32", 10: "bf16", 11: "b4"}  # b4: packed 4-bit
DRIVER_TYPES = {0: "u8", 1: "u16", 4: "u64", 6: "f16", 7: "f32", 9: "bf16"}  # CUtensorMapDataType
DECODED_RANKS = range(1, 5)


def dsl_descriptor(data: bytes) -> dict:
    """What the DSL's inline TMA descriptor says (see above): address, dtype, swizzle,
    l2_promotion, strides (bytes), dims and box."""
    words = struct.unpack("<8Q", data[:64])
    rank = ((words[1] >> 4) & 0x7) + 1
    if rank not in DECODED_RANKS:
        raise ValueError(f"a descriptor of rank {rank}: only ranks 1 to 4 are decoded")
    stride_fields = [words[1] >> 32, words[2] & 0xFFFFFFFF, words[2] >> 32, words[3] & 0xFFFFFFFF]
    dim_fields = [words[4] & 0xFFFFFFFF, words[4] >> 32, words[5] & 0xFFFFFFFF, words[5] >> 32]
    box = [(words[6] >> 56) + 1, *(b + 1 for b in struct.pack("<Q", words[7])[: rank - 1])]
    return {
        "address": words[0],
        "dtype": HARDWARE_TYPES[(words[1] >> 7) & 0x3F],
        "swizzle": (words[1] >> 13) & 0x3,
        "l2_promotion": (words[1] >> 17) & 0x3,
        "strides": [16 * field for field in stride_fields[: rank - 1]],
        "dims": [field + 1 for field in dim_fields[:rank]],
        "box": box,
    }


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
