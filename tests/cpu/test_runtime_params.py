"""dglu.params: parameters packed byte for byte as a hand-written manifest lists them."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

import pytest
from conftest_runtime import DEFAULT_KEYS, write_artifacts, write_manifest
from dglu.errors import ParamPackingError
from dglu.manifest import read_manifest
from dglu.params import KernelArguments, pack_params

SCALARS = {"m": 1280 + 100, "n": 96, "k": 200, "l": 5, "n2": 192, "l_n2": 960}
POINTERS = {
    "c": 0x7F00_0000_1000,
    "d_row": 0x7F00_0020_0000,
    "dprob": 0x7F00_0030_0100,
    "dbias_ws": 0x7F00_0040_0000,
    "dbias": 0x7F00_0050_0000,
}
TENSOR_MAPS = {"a": bytes(range(128)), "b": bytes(range(255, 127, -1))}


@pytest.fixture
def kernels(tmp_path: Path):
    write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    return read_manifest(tmp_path).variants[0].kernels


def test_main_kernel_params_byte_exact(kernels) -> None:
    packed = pack_params(kernels[0], SCALARS, POINTERS, TENSOR_MAPS)
    assert packed == [
        TENSOR_MAPS["a"],
        struct.pack("<ii", SCALARS["m"], SCALARS["k"]),
        TENSOR_MAPS["b"],
        struct.pack("<iii", SCALARS["n"], SCALARS["k"], SCALARS["l"]),
        struct.pack("<Q", POINTERS["c"]),
        struct.pack("<Q", POINTERS["d_row"]),
        struct.pack("<Q", POINTERS["dprob"]),
        struct.pack("<Q", POINTERS["dbias_ws"]),
        bytes(8),  # b_desc_ws: optional, absent from a dense call
        bytes(8),  # tile_counter: optional, absent from a static call
        struct.pack("<i", SCALARS["m"]),
    ]


def test_finish_kernel_params_byte_exact(kernels) -> None:
    packed = pack_params(kernels[1], SCALARS, POINTERS, TENSOR_MAPS)
    assert packed == [
        POINTERS["dbias_ws"].to_bytes(8, "little"),
        POINTERS["dbias"].to_bytes(8, "little"),
        SCALARS["l_n2"].to_bytes(4, "little"),
    ]


def test_optional_pointer_absent_is_null(kernels) -> None:
    pointers = {k: v for k, v in POINTERS.items() if k != "dbias_ws"}
    packed = pack_params(kernels[0], SCALARS, pointers, TENSOR_MAPS)
    assert packed[7] == bytes(8)


def test_required_pointer_absent_names_the_param(kernels) -> None:
    pointers = {k: v for k, v in POINTERS.items() if k != "dbias"}
    with pytest.raises(ParamPackingError, match="'dbias' \\(pointer\\) needs tensor 'dbias'"):
        pack_params(kernels[1], SCALARS, pointers, TENSOR_MAPS)


def test_size_mismatch_with_the_manifest_is_refused(tmp_path: Path) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    manifest["variants"][0]["kernels"][0]["params"][1]["size"] = 12
    write_manifest(tmp_path, manifest)
    kernel = read_manifest(tmp_path).variants[0].kernels[0]
    with pytest.raises(ParamPackingError) as error:
        pack_params(kernel, SCALARS, POINTERS, TENSOR_MAPS)
    message = str(error.value)
    assert kernel.symbol in message and "params[1] 'a_extents' (i32_tuple)" in message
    assert "packed 8 bytes but the manifest says size 12" in message


def test_short_tensor_map_is_refused(kernels) -> None:
    with pytest.raises(ParamPackingError, match="'tma_b' \\(tensormap\\): packed 64 bytes"):
        pack_params(kernels[0], SCALARS, POINTERS, {**TENSOR_MAPS, "b": bytes(64)})


def test_scalar_out_of_int32_range_is_refused(kernels) -> None:
    with pytest.raises(ParamPackingError, match="'a_extents' \\(i32_tuple\\).*2147483648"):
        pack_params(kernels[0], {**SCALARS, "m": 2**31}, POINTERS, TENSOR_MAPS)


def test_f32_scalar(tmp_path: Path) -> None:
    manifest = write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    manifest["variants"][0]["kernels"][1]["params"][2].update(kind="f32")
    write_manifest(tmp_path, manifest)
    kernel = read_manifest(tmp_path).variants[0].kernels[1]
    packed = pack_params(kernel, {**SCALARS, "l_n2": 0.5}, POINTERS, TENSOR_MAPS)
    assert packed[2] == struct.pack("<f", 0.5)


def test_kernel_arguments_point_at_each_buffer(kernels) -> None:
    packed = pack_params(kernels[0], SCALARS, POINTERS, TENSOR_MAPS)
    arguments = KernelArguments(packed)
    array = ctypes.cast(arguments.address, ctypes.POINTER(ctypes.c_void_p))
    read_back = [ctypes.string_at(array[i], len(data)) for i, data in enumerate(packed)]
    assert read_back == packed
    assert len({array[i] for i in range(len(packed))}) == len(packed)
