"""A kernel family that exists only in a manifest, driven through validation, planning and
parameter packing with the driver stood in for: the runtime holds no kernel facts.

The family differs from sm90_bf16 in everything the manifest carries: its argument roles
(x, scale, y), a derived scalar (w = 4*n), limits, a workspace counted by an EXPRESSION,
kernel roles, a cluster launch and parameter kinds.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from dglu import runner  # noqa: E402
from dglu.contract.reader import read_manifest  # noqa: E402
from dglu.contract.writer import expanded, manifest_text  # noqa: E402
from dglu.validation import describe_tensors  # noqa: E402
from conftest_runtime import bf16_front, variant_key  # noqa: E402

M, N, K = 256, 8, 64
W = 4 * N
CUBIN = b"toy cubin"


def toy_variant() -> dict:
    import dglu

    sha = hashlib.sha256(CUBIN).hexdigest()
    return {
        "name": "toy_variant",
        "family": "toy_family",
        "key": variant_key(),
        "cubin": "toy.cubin",
        "sha256": sha,
        "size": len(CUBIN),
        "build": {"dglu_version": dglu.__version__, "source_hash": "7" * 64, "toolchain": {}},
        "front": bf16_front(),  # the front door's rules: the BF16 families'
        "min_driver": 12000,
        "m_aligned": 64,
        "arguments": {
            "x": {"shape": ["m", "k"], "strides": ["k", 1], "dtypes": ["bf16"], "align": 16,
                  "io": "in"},
            "scale": {"shape": ["n"], "strides": [1], "dtypes": ["fp32"], "align": 4, "io": "in"},
            "y": {"shape": ["m", "w"], "strides": ["w", 1], "dtypes": ["fp32"], "align": 16,
                  "io": "out"},
        },
        "scalars": {"w": "4*n"},
        "limits": {"k": {"multiple_of": 32, "why": "toy rows come in 32s"}},
        "views": {},
        "workspaces": {"scratch": {"dtype": "i32", "count": "2*w", "align": 16,
                                   "zero": "each_call"}},
        "kernels": [
            {
                "role": "prologue", "symbol": "toy_prologue", "block": [32, 1, 1],
                "cluster": [1, 1, 1], "dynamic_smem_bytes": 0, "attributes": {},
                "grid": {"rule": "elementwise", "count": "m*w"},
                "params": [
                    {"name": "scratch", "kind": "pointer", "size": 8, "align": 8,
                     "tensor": "scratch"},
                    {"name": "mk", "kind": "i32", "size": 4, "align": 4, "value": "m*k"},
                    {"name": "n", "kind": "f32", "size": 4, "align": 4, "value": "n"},
                ],
            },
            {
                "role": "body", "symbol": "toy_body", "block": [128, 1, 1],
                "cluster": [2, 1, 1], "dynamic_smem_bytes": 1024,
                "attributes": {"cluster_dimension": [2, 1, 1]},
                "grid": {"rule": "persistent_tiles", "tile_m": 64, "tile_n": 4},
                "params": [
                    {"name": "tma_x", "kind": "tensormap", "size": 128, "align": 64,
                     "tensor": "x"},
                    {"name": "sizes", "kind": "i32_tuple", "size": 8, "align": 4,
                     "values": ["m", "w"]},
                    {"name": "y", "kind": "pointer", "size": 8, "align": 8, "tensor": "y"},
                    {"name": "absent", "kind": "pointer", "size": 8, "align": 8,
                     "tensor": "nowhere", "optional": True},
                ],
            },
        ],
        "tma": {"x": {"dtype": "bf16", "dims": [1, 0], "box": [64, 64], "swizzle": "128B",
                      "l2_promotion": "128B", "oob_fill": "none", "interleave": "none"}},
    }


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "toy.cubin").write_bytes(CUBIN)
    (tmp_path / "manifest.json").write_text(manifest_text([toy_variant()]))
    (variant,) = read_manifest(tmp_path).variants
    return variant, stand_ins.install(monkeypatch, [variant], tmp_path)


def tensors(k: int = K) -> dict:
    return {
        "x": ("x_arg", torch.zeros(M, k, dtype=torch.bfloat16)),
        "scale": ("scale_arg", torch.ones(N)),
        "y": ("y_arg", torch.zeros(M, W)),
    }


def test_validation_binds_and_derives_the_familys_own_scalars(toy) -> None:
    variant, _ = toy
    problem = describe_tensors(variant, tensors())
    assert dict(problem.scalars) == {"m": M, "k": K, "n": N, "w": W}
    assert problem.tensors["y"].shape == (M, W) and problem.tensors["y"].strides == (W, 1)


def test_validation_applies_the_familys_limits_and_shapes(toy) -> None:
    variant, _ = toy
    with pytest.raises(ValueError, match=r"^x_arg: K = 48 must be a multiple of 32 \(toy rows"):
        describe_tensors(variant, tensors(k=48))
    bad = {**tensors(), "y": ("y_arg", torch.zeros(M, W + 1))}
    with pytest.raises(ValueError, match=r"^y_arg: shape \(256, 33\) does not match \(M, W\)"):
        describe_tensors(variant, bad)


def test_planning_and_packing_follow_the_manifest(toy, monkeypatch) -> None:
    variant, fake = toy
    launches = []
    monkeypatch.setattr(runner, "prepare_launch", lambda *args: launches.append(args) or args)
    monkeypatch.setattr(runner, "launch_kernel", lambda launch: None)
    problem = describe_tensors(variant, tensors())
    loaded = runner.load_variant(variant, 0)
    runner.run_variant(loaded, problem, stand_ins.STREAM)

    assert fake.names("cuModuleGetFunction")[0][1] == b"toy_prologue"
    (memset,) = fake.names("cuMemsetD32Async")
    assert memset[:3] == (stand_ins.WORKSPACE_ADDRESS, 0, 2 * W)  # 2*w int32 words
    (_, prologue, grid0, _, args0), (_, body, grid1, _, args1) = launches
    assert (prologue.role, body.role) == ("prologue", "body")
    assert grid0 == ((M * W) // 32, 1, 1)
    tiles = (M // 64) * (N // 4)
    assert grid1 == (tiles // 2 * 2, 1, 1)
    assert dict(body.attributes) == {"cluster_dimension": (2, 1, 1)}
    packed0 = [bytes(b) for b in args0.buffers]
    assert packed0 == [
        struct.pack("<Q", stand_ins.WORKSPACE_ADDRESS),
        struct.pack("<i", M * K),
        struct.pack("<f", N),
    ]
    x, y = problem.tensors["x"], problem.tensors["y"]
    packed1 = [bytes(b) for b in args1.buffers]
    assert packed1 == [
        stand_ins.fake_tensor_map(variant.tma["x"], x),
        struct.pack("<ii", M, W),
        struct.pack("<Q", y.pointer),
        struct.pack("<Q", 0),
    ]


def test_the_writer_is_canonical_and_keeps_the_check_order() -> None:
    text = manifest_text([toy_variant()])
    assert text.endswith("}\n") and json.loads(text)["schema_version"] == 3
    entry = json.loads(text)["variants"][0]
    assert list(entry) == sorted(entry) and entry["front"] == "toy_family/bf16"
    assert json.loads(text)["fronts"] == {"toy_family/bf16": toy_variant()["front"]}
    assert list(entry["arguments"]) == ["x", "scale", "y"]
    assert manifest_text(expanded(json.loads(text))["variants"]) == text
