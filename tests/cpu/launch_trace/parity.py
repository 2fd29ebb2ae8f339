"""Shared by the launch-parity tests (tests/cpu/test_sm100_launch_parity.py for sm100_bf16,
tests/cpu/test_sm100_blockscaled_launch_parity.py for sm100_blockscaled): the stand-in
driver and artifact fixtures, and the two checks of one traced call (traces.trace_call):
dglu's launches against those of the DSL's host code for the same cubin, and the main
kernel's descriptors against those of cuDNN FE's static configuration of the call."""

from __future__ import annotations

from pathlib import Path

import pytest

from dglu.contract.reader import read_manifest
from dglu_build.build import build_artifacts

from .traces import DRIVER_TYPES, build_stand_in, dsl_descriptor, encode_arguments

CLUSTER_ATTRIBUTE = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
NO_CLUSTER = [1, 1, 1, 0]  # a 1x1x1 cluster is no cluster: dglu leaves the attribute unset
# of a descriptor, what the DSL's host code for symbolic layouts writes right (its strides are
# not the tensor's: the static configuration's are compared instead, by check_static_descriptors)
SYMBOLIC_FIELDS = ("address", "dtype", "swizzle", "l2_promotion", "dims", "box")
# what dglu asks of every map, and every DSL map here has (traces.py: these move no decoded bit)
UNDECODED = {"interleave": 0, "oob_fill": 0}


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    """The directory of the stand-in libcuda.so.1 (skips without a C compiler)."""
    built = build_stand_in(tmp_path_factory.mktemp("stand_in"))
    if built is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    return built


def built_artifacts(variants, directory: Path) -> Path:
    """The artifacts (cubins and manifest) of ``variants``, built into ``directory``."""
    out = directory / "artifacts"
    build_artifacts(variants, out, jobs=2, progress=lambda line: None)
    return out


def manifest_entry(artifacts: Path, variant):
    (entry,) = [v for v in read_manifest(artifacts).variants if v.name == variant.name]
    return entry


def tensor_map_fields(data: bytes) -> dict:
    """A kernel parameter holding a tensor map, decoded: dglu's (the stand-in's record of its
    cuTensorMapEncodeTiled arguments) or the DSL's (hardware format). A packed 4-bit map (the
    DSL's FP4 A and B) is given in bytes, as dglu encodes it (UINT8, a byte per pair of values:
    the same bytes, swizzle and bounds, K being even)."""
    if data[:4] != b"TMAP":
        described = dsl_descriptor(data)
        if described["dtype"] == "b4":
            halved = {"dims": [described["dims"][0] // 2, *described["dims"][1:]],
                      "box": [described["box"][0] // 2, *described["box"][1:]]}
            return {**described, **halved, "dtype": "u8"}
        return described
    described = encode_arguments(data)
    for field, value in UNDECODED.items():
        assert described[field] == value, (field, described[field])
    assert set(described["element_strides"]) == {1}, described["element_strides"]
    return {**described, "dtype": DRIVER_TYPES[described["dtype"]]}


def _fields(data: bytes, names: tuple[str, ...]) -> dict:
    described = tensor_map_fields(data)
    return {name: described[name] for name in names}


def check_against_dsl(entry, theirs: list[dict], ours: list[dict]) -> None:
    """dglu's launches of ``entry`` equal the DSL host code's: kernel symbols and order; grid,
    block, dynamic shared memory; the cluster attribute (the DSL's others are 0, their
    defaults, which dglu leaves unset); every parameter byte but the descriptors' (compared by
    SYMBOLIC_FIELDS) and the struct pads the DSL leaves unwritten."""
    assert [launch["kernel"] for launch in ours] == [kernel.symbol for kernel in entry.kernels]
    assert [launch["kernel"] for launch in theirs] == [launch["kernel"] for launch in ours]
    for kernel, dsl, dglu in zip(entry.kernels, theirs, ours, strict=True):
        assert (dglu["grid"], dglu["block"], dglu["smem"]) == (dsl["grid"], dsl["block"], dsl["smem"]), kernel.role
        dsl_attrs = {a["id"]: a["u32"] for a in dsl["attrs"]}
        dglu_attrs = {a["id"]: a["u32"] for a in dglu["attrs"]}
        if CLUSTER_ATTRIBUTE in dsl_attrs:
            assert dglu_attrs.get(CLUSTER_ATTRIBUTE, NO_CLUSTER)[:3] == dsl_attrs[CLUSTER_ATTRIBUTE][:3] == list(kernel.cluster)
        assert all(value[0] == 0 for key, value in dsl_attrs.items() if key != CLUSTER_ATTRIBUTE), kernel.role
        assert set(dglu_attrs) <= {CLUSTER_ATTRIBUTE}
        assert [(p["off"], p["size"]) for p in dglu["params"]] == [(p["off"], p["size"]) for p in dsl["params"]]
        for spec, mine, reference in zip(kernel.params, dglu["params"], dsl["params"], strict=True):
            mine, reference = bytes.fromhex(mine["bytes"]), bytes.fromhex(reference["bytes"])
            if spec.kind == "tensormap":
                ours_fields, dsl_fields = _fields(mine, SYMBOLIC_FIELDS), _fields(reference, SYMBOLIC_FIELDS)
                assert ours_fields == dsl_fields, (spec.name, ours_fields, dsl_fields)
            elif spec.kind == "pointer_i32s":
                written = 8 + 4 * len(spec.values)  # the rest is padding the DSL leaves unwritten
                assert mine[:written] == reference[:written], spec.name
            else:
                assert mine == reference, spec.name


def check_static_descriptors(entry, ours: list[dict], static: list[dict]) -> None:
    """The main kernel's descriptors against those cuDNN FE's static configuration of the
    call encodes from static strides: every decoded field, the byte strides of dimensions of
    extent > 1 included (no address depends on the others: dglu writes B's expert stride
    there, the DSL 0)."""
    ((kernel, main),) = [(k, launch) for k, launch in zip(entry.kernels, ours, strict=True) if k.role == "main"]
    (static_main,) = [launch for launch in static if "cudnn_static_main" in launch["kernel"]]
    names = [spec.name for spec in kernel.params if spec.kind == "tensormap"]
    ours_maps = [bytes.fromhex(p["bytes"]) for spec, p in zip(kernel.params, main["params"], strict=True)
                 if spec.kind == "tensormap"]
    static_maps = [bytes.fromhex(p["bytes"]) for p in static_main["params"] if p["size"] == 128]
    assert names and len(static_maps) == len(names)
    for name, mine, reference in zip(names, ours_maps, static_maps, strict=True):
        ours_fields, static_fields = _squeezed(_fields(mine, SYMBOLIC_FIELDS)), _squeezed(_fields(reference, SYMBOLIC_FIELDS))
        assert ours_fields == static_fields, (name, ours_fields, static_fields)
        assert _used_strides(tensor_map_fields(mine)) == _used_strides(tensor_map_fields(reference)), name


def _squeezed(fields: dict) -> dict:
    """``fields`` without trailing dimensions of extent 1 and box 1 (no address depends on
    them): cuDNN FE's static configuration of one expert encodes B of rank 2 where its
    symbolic host code, and dglu, encode (K, N, 1)."""
    dims, box = list(fields["dims"]), list(fields["box"])
    while len(dims) > 1 and dims[-1] == box[-1] == 1:
        dims.pop(), box.pop()
    return {**fields, "dims": dims, "box": box}


def _used_strides(descriptor: dict) -> list[int | None]:
    """The byte strides past the innermost dimension, None for a dimension of extent 1, the
    trailing Nones dropped (as ``_squeezed`` drops their dimensions)."""
    strides = [stride if dim > 1 else None for stride, dim in zip(descriptor["strides"], descriptor["dims"][1:])]
    while strides and strides[-1] is None:
        strides.pop()
    return strides
