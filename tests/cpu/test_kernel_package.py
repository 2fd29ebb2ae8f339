"""The kernel package's pure-Python side: feasibility checks and the declared manifest fields."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dglu_build.kernels import check_variant
from dglu_build.kernels.declaration import Int32, Pointer, TmaAtom, TmaTensor, check_signature, manifest_params
from dglu_build.kernels.sm90_bf16 import interface
from dglu_build.kernels.sm90_bf16.config import MIN_STAGES, Config

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "arch": "sm_90a", "ab_dtype": "bf16", "c_dtype": "bf16", "d_dtype": "bf16", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static",
}


def key(**changes) -> dict:
    return {**BASE, **changes}


def test_checking_a_key_does_not_import_cutlass():
    code = (
        "import sys; from dglu_build.kernels import check_variant; "
        f"check_variant({BASE!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cutlass'))"
    )
    env = {"PYTHONPATH": f"{ROOT / 'codegen'}:{ROOT / 'runtime'}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"arch": "sm_80"}, r"arch, ab_dtype: no kernel family builds \('sm_80', 'bf16'\)"),
        ({"arch": "sm_100a"}, r"experts: the kernel compiles its expert count in"),
        ({"c_dtype": "fp8"}, r"c_dtype: family sm90_bf16 does not build 'fp8'"),
        ({"tile_n": 96}, r"tile_m, tile_n: family sm90_bf16 does not build \(128, 96\)"),
        ({"b_major": "n"}, r"b_major 'n' is for discrete weights"),
        ({"cluster_m": 2, "scheduler": "dynamic"}, r"use scheduler 'static' with cluster_m 2"),
        ({"cluster_m": 2, "weight_mode": "discrete"}, r"use cluster_m 1 with discrete weights"),
        ({"act_func": "dgeglu"}, r"act_params: dgeglu takes \['geglu_alpha', .*got \[\]"),
    ],
)
def test_unbuildable_keys_are_refused_with_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        check_variant(key(**changes))


def test_family_rules_also_refuse_keys_outside_the_families_table():
    with pytest.raises(ValueError, match="tile_n must be a multiple of 64, got 96"):
        Config.from_key(key(tile_n=96))
    with pytest.raises(ValueError, match="tile_m must be 128 with consumer 'cooperative', got 64"):
        Config.from_key(key(tile_m=64))
    with pytest.raises(ValueError, match="tile_m must be 128 with consumer 'cooperative_rf', got 64"):
        Config.from_key(key(tile_m=64, tile_n=256, consumer="cooperative_rf"))
    with pytest.raises(ValueError, match="tile_m must be 64 or 128 with consumer 'pingpong', got 256"):
        Config.from_key(key(tile_m=256, consumer="pingpong"))
    with pytest.raises(ValueError, match="tile 128x192 with C bf16 and D bf16 leaves shared memory for 2 pipeline "
                                         "stages; it needs 3: use a narrower tile_n"):
        Config.from_key(key(tile_n=192))


def test_pingpong_64x256_gives_each_warpgroup_an_m64n256_tile():
    # one warpgroup on a 64x256 tile: 128 accumulators a thread, as the 128x128 ping-pong;
    # 227 KiB - 1 KiB reserve - 16 KiB slot ring (64 rows) = 210 KiB: five 40 KiB stages
    config = Config.from_key(key(tile_m=64, tile_n=256, cluster_m=2, consumer="pingpong"))
    assert config.accumulators_per_thread == 128
    assert config.slots.bytes == 16384
    assert config.num_stages == 5


def test_stages_fill_the_shared_memory_left_by_the_epilogue():
    # 227 KiB - 1 KiB reserve - 64 KiB staging - 32 KiB slot ring = 130 KiB: four 32 KiB stages
    assert Config.from_key(key()).num_stages == 4
    assert Config.from_key(key(tile_n=64, c_dtype="fp32", d_dtype="fp32")).num_stages >= MIN_STAGES


@pytest.mark.parametrize("weight_mode, b_major", [("dense", "k"), ("discrete", "k"), ("discrete", "n")])
@pytest.mark.parametrize("dbias", [True, False])
@pytest.mark.parametrize("scheduler", ["static", "dynamic"])
def test_declared_kernels_name_only_declared_tensors(weight_mode, b_major, dbias, scheduler):
    config = Config.from_key(key(weight_mode=weight_mode, b_major=b_major, dbias=dbias, scheduler=scheduler))
    entry = interface.entry(config)
    tensors = {*entry["arguments"], *entry["views"], *entry["workspaces"]}
    roles = [kernel.role for kernel in interface.kernels(config)]
    assert roles == [*(["b_descriptors"] if weight_mode == "discrete" else []), "main",
                     *(["dbias_finish"] if dbias else [])]
    for kernel in interface.kernels(config):
        for param in kernel.params:
            if isinstance(param, (TmaTensor, TmaAtom)):
                assert param.tensor in entry["tma"]
                assert len(interface.tma_extents(config, param.tensor)) == len(entry["tma"][param.tensor]["dims"])
            elif isinstance(param, Pointer) and not param.optional:
                assert param.tensor in tensors, (kernel.role, param.tensor)
    assert ("b_ptrs" in entry["arguments"]) == ("b" not in entry["arguments"]) == (weight_mode == "discrete")
    assert ("dbias" in entry["arguments"]) == ("dbias_ws" in entry["workspaces"]) == dbias
    assert ("b_desc_ws" in entry["workspaces"]) == ("b_expert" in entry["views"]) == (weight_mode == "discrete")
    assert ("tile_counter" in entry["workspaces"]) == (scheduler == "dynamic")


def test_b_strides_follow_b_major():
    k_major = interface.arguments(Config.from_key(key()))["b"]["strides"]
    n_major = interface.views(Config.from_key(key(weight_mode="discrete", b_major="n")))["b_expert"]["strides"]
    assert (k_major, n_major) == (["k", 1, "n*k"], [1, "n", "n*k"])


def test_manifest_params_of_a_declaration():
    params = (TmaTensor("a"), TmaAtom("b"), Pointer("ws", optional=True), Int32("n"))
    assert manifest_params(params, lambda tensor: ["m", "k"]) == [
        {"name": "tma_a", "kind": "tensormap", "size": 128, "align": 64, "tensor": "a"},
        {"name": "a_extents", "kind": "i32_tuple", "size": 8, "align": 4, "values": ["m", "k"]},
        {"name": "tma_b", "kind": "tensormap", "size": 128, "align": 64, "tensor": "b"},
        {"name": "ws", "kind": "pointer", "size": 8, "align": 8, "tensor": "ws", "optional": True},
        {"name": "n", "kind": "i32", "size": 4, "align": 4, "value": "n"},
    ]


def test_check_signature_compares_the_kernels_annotations():
    # postponed annotations: the names of the DSL's types, which need not be importable here
    def kernel(atom: cute.CopyAtom, tensor: cute.Tensor, n: int): ...  # noqa: F821

    def good(atom: cute.CopyAtom, tensor: cute.Tensor, ws: cute.Pointer): ...  # noqa: F821

    check_signature(good, (TmaTensor("a"), Pointer("ws")))
    with pytest.raises(TypeError, match=r"takes \['CopyAtom', 'Tensor', 'int'\]; its declaration says "
                                        r"\['CopyAtom', 'Tensor', 'Int32'\]"):
        check_signature(kernel, (TmaTensor("a"), Int32("n")))
