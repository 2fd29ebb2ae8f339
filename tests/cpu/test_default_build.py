"""Every variant of kernel_specs/default.yaml (the wheel's) compiles here, on the CPU, and each
agrees with its own cubin: the ABI check the build runs, then `dglu-build verify`, whose checks
include the runtime's own manifest reader. Built once per session, in two processes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dglu_build.abi_check import check_variant_cubin
from dglu_build.build import BuildResult, build_artifacts
from dglu_build.cubin_info import read_cubin
from dglu_build.kernels.registry import families
from dglu.contract.reader import read_manifest
from dglu_build.progress import LineProgress
from dglu_build.specs import Variant, load_specs
from dglu_build.verify import verify_directory

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT = load_specs(REPO_ROOT / "kernel_specs" / "default.yaml")
BLACKWELL = ("sm_100a", "sm_103a")

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class DefaultBuild:
    result: BuildResult
    log: list[str]

    def entries(self) -> list[dict]:
        return self.result.manifest["variants"]


@pytest.fixture(scope="session")
def default_build(tmp_path_factory) -> DefaultBuild:
    log: list[str] = []
    out = tmp_path_factory.mktemp("default") / "artifacts"
    return DefaultBuild(build_artifacts(DEFAULT, out, jobs=2, progress=LineProgress(log.append)), log)


def test_every_default_variant_compiles(default_build):
    result = default_build.result
    assert result.failed == {}, "\n".join(default_build.log)
    assert sorted(result.compiled) == sorted(variant.name for variant in DEFAULT)
    assert [entry["name"] for entry in default_build.entries()] == sorted(variant.name for variant in DEFAULT)


def test_every_default_variant_agrees_with_its_cubin(default_build):
    for entry in default_build.entries():
        cubin = (default_build.result.directory / entry["cubin"]).read_bytes()
        info = check_variant_cubin(cubin, entry, entry["name"])
        assert entry["min_driver"] == info.min_driver


def test_the_default_directory_verifies_and_the_runtime_reads_it(default_build):
    verification = verify_directory(default_build.result.directory)
    assert verification.problems == []
    assert sorted(verification.checked) == sorted(variant.name for variant in DEFAULT)
    read_manifest(default_build.result.directory)


def _roles(variant: Variant) -> list[str]:
    """The kernels a variant launches, in order. BF16: B's descriptors for discrete weights,
    the fused kernel, its finisher (_finishers).
    MXFP8: the offsets' clamp, B's descriptors for discrete weights, the fused kernel
    (decoding and quantizing), dbias's finisher.
    Blackwell (cuDNN FE's kernel): its helper (per-expert descriptors, the dynamic
    scheduler's counter), the fused kernel."""
    if variant.arch in BLACKWELL:
        return [*(["helper"] if variant.weight_mode == "discrete" or variant.scheduler == "dynamic" else []), "main"]
    if variant.ab_dtype in ("e4m3", "e5m2"):
        dbias_finish = ["dbias_finish"] if variant.dbias else []
        descriptors = ["b_descriptors"] if variant.weight_mode == "discrete" else []
        return ["effective_offsets", *descriptors, "main", *dbias_finish]
    return [
        *(["b_descriptors"] if variant.weight_mode == "discrete" else []),
        "main",
        *_finishers(variant),
    ]


def _finishers(variant) -> list[str]:
    """The BF16 family's finishers: deterministic mode reduces its partial sums in one
    launch (dbias's and dprob's, or dprob's), the fast mode adds dbias_ws into dbias."""
    if variant.deterministic:
        return ["parts_finish" if variant.dbias else "dprob_finish"]
    return ["dbias_finish"] if variant.dbias else []


def test_every_default_variant_launches_the_kernels_of_its_key(default_build):
    by_name = {variant.name: variant for variant in DEFAULT}
    for entry in default_build.entries():
        variant = by_name[entry["name"]]
        assert [kernel["role"] for kernel in entry["kernels"]] == _roles(variant), entry["name"]
        (main,) = [kernel for kernel in entry["kernels"] if kernel["role"] == "main"]
        if variant.arch in BLACKWELL:  # persistent clusters on z, as many as fit (dglu.occupancy)
            assert main["grid"] == {"rule": "active_clusters"}
        else:
            assert main["grid"] == {"rule": "persistent_tiles", "tile_m": variant.tile_m, "tile_n": variant.tile_n}
        assert main["cluster"][:2] == [variant.cluster_m, variant.cluster_n]


def test_the_default_set_serves_blackwell_with_the_common_expert_counts():
    blackwell = [variant for variant in DEFAULT if variant.arch in BLACKWELL]
    assert {variant.arch for variant in blackwell} == set(BLACKWELL)
    assert {variant.experts for variant in blackwell} >= {1, 8, 16, 32, 64, 128, 256}
    for arch in BLACKWELL:
        for experts in (1, 8, 16, 32, 64, 128, 256):
            shapes = {(v.tile_m, v.tile_n, v.cluster_m) for v in blackwell if v.arch == arch and v.experts == experts}
            assert {(256, 256, 2), (128, 128, 1)} <= shapes


def test_blackwell_cubins_are_abi_8_use_no_local_memory_and_fit_shared_memory(default_build):
    """Each sm_100a/sm_103a cubin: ELF ABI 8 of its architecture, the kernel symbols of its
    entry, no stack frame (local memory) but the one its family declares for a local array
    of the kernel's own (sm100_blockscaled's MXFP8 kernels: tests/cpu/test_sm100_blockscaled_family.py
    shows it is no spill), static plus dynamic shared memory within what the DSL says an
    sm_100 block may use."""
    from cutlass.memory import get_smem_capacity_in_bytes

    capacity = get_smem_capacity_in_bytes("sm_100")
    checked = 0
    for entry in default_build.entries():
        if entry["key"]["arch"] not in BLACKWELL:
            continue
        info = read_cubin((default_build.result.directory / entry["cubin"]).read_bytes())
        assert (info.abi_version, f"sm_{info.sm}a") == (8, entry["key"]["arch"]), entry["name"]
        assert sorted(info.kernels) == sorted(kernel["symbol"] for kernel in entry["kernels"])
        for kernel in entry["kernels"]:
            found = info.kernels[kernel["symbol"]]
            declared = families()[entry["family"]].local_frame_bytes(entry["key"], kernel["role"])
            assert found.frame_bytes == declared, (entry["name"], kernel["role"])
            assert found.static_smem_bytes + kernel["dynamic_smem_bytes"] <= capacity, (entry["name"], kernel["role"])
        checked += 1
    assert checked == sum(variant.arch in BLACKWELL for variant in DEFAULT)
