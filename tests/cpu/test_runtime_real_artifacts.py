"""The runtime reads what the build writes: smoke.yaml plus variants with fp32 C and
dsituglu, discrete N-major weights, the dynamic scheduler, a 2x1 cluster and the register-
epilogue consumers (ping-pong 128x128 and 64x256 2x1, cooperative_rf 128x256 with act_out), compiled
for real (needs CuTe DSL).

Everything a GPU launch would do short of the driver calls: parse the manifest, verify the
cubins, select each variant from its own key, pack every kernel's parameters into exactly
the sizes the cubin's own parameter table (EIATTR_KPARAM_INFO) declares, and find the
workspaces, descriptors and grids each mode needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="compiling the smoke specs needs nvidia-cutlass-dsl")

from dglu.contract.reader import read_manifest  # noqa: E402
from dglu.grid import launch_grid  # noqa: E402
from dglu.integrity import read_verified_cubin  # noqa: E402
from dglu.params import pack_params  # noqa: E402
from dglu.problem import TensorView  # noqa: E402
from dglu.selection import VariantRequest, select_variant  # noqa: E402
from dglu.tma import global_layout  # noqa: E402

from dglu_build.build import build_artifacts  # noqa: E402
from dglu_build.cubin_info import read_cubin  # noqa: E402
from dglu_build.specs import load_specs, parse_specs  # noqa: E402

SMOKE_SPECS = Path(__file__).resolve().parents[2] / "kernel_specs" / "smoke.yaml"
FLAG = "round_dgrad_to_input_dtype"  # the BF16 variants' runtime flag
SCALARS = {"m": 1380, "n": 96, "k": 200, "l": 5, "n2": 192, "l_n2": 960, FLAG: 1}
EXTRA_SPEC = SMOKE_SPECS.read_text().split("variants:")[0] + (
    "variants:\n"
    "  - {act_func: dsituglu, c_dtype: fp32, d_dtype: bf16, dbias: true, tile_n: 64}\n"
    "  - {act_func: dgeglu, weight_mode: discrete, b_major: n, dbias: true}\n"
    "  - {act_func: dswiglu, scheduler: dynamic, dbias: false}\n"
    "  - {act_func: dswiglu, cluster_m: 2, dbias: true}\n"
    "  - {act_func: dswiglu, consumer: pingpong, dbias: true}\n"
    "  - {act_func: dswiglu, consumer: pingpong, tile_m: 64, tile_n: 256, cluster_m: 2, dbias: true}\n"
    "  - {act_func: dgeglu, consumer: cooperative_rf, tile_n: 256, dbias: true, act_out: true}\n"
)
SPECS = load_specs(SMOKE_SPECS) + parse_specs(EXTRA_SPEC, "extra spec")


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("smoke_artifacts")
    build_artifacts(SPECS, out, progress=lambda line: None)
    return out


@pytest.mark.slow
def test_every_built_variant_is_readable_selectable_and_packable(artifacts: Path) -> None:
    manifest = read_manifest(artifacts)
    assert len(manifest.variants) == len(SPECS)
    for variant in manifest.variants:
        names = (*variant.arguments, *variant.views, *variant.workspaces)
        pointers = {name: 0x7F00_0000_0000 + 0x1000 * i for i, name in enumerate(names)}
        info = read_cubin(read_verified_cubin(variant))
        request = VariantRequest(**variant.key.as_dict() | {"act_params": variant.key.act_params})
        assert select_variant(manifest.variants, request) is variant
        for kernel in variant.kernels:
            tensor_maps = {t: bytes(128) for t in variant.tma}
            packed = pack_params(kernel, SCALARS, pointers, tensor_maps)
            cubin_params = info.kernels[kernel.symbol].params
            assert [len(p) for p in packed] == [p.size for p in cubin_params], kernel.symbol


@pytest.mark.slow
def test_the_rounding_flag_is_packed_as_the_main_kernels_int32_after_l(artifacts: Path) -> None:
    for variant in read_manifest(artifacts).variants:
        assert variant.flags == (FLAG,)
        (main,) = [k for k in variant.kernels if k.role == "main"]
        names = [p.name for p in main.params]
        index = names.index(FLAG)
        assert names[index - 1] == "l" and main.params[index].kind == "i32"
        pointers = {name: 0x1000 for name in (*variant.arguments, *variant.views, *variant.workspaces)}
        for value in (0, 1):
            packed = pack_params(main, {**SCALARS, FLAG: value}, pointers, {t: bytes(128) for t in variant.tma})
            assert packed[index] == value.to_bytes(4, "little")


@pytest.mark.slow
def test_c_and_d_descriptors_of_an_fp32_c_variant(artifacts: Path) -> None:
    (variant,) = [v for v in read_manifest(artifacts).variants if v.key.c_dtype == "fp32"]
    assert (variant.key.act_func, dict(variant.key.act_params)) == (
        "dsituglu",
        {"situ_beta1": 4.0, "situ_beta2": 25.0},
    )
    m, n2 = SCALARS["m"], SCALARS["n2"]
    for tensor, dtype, size in (("c", "fp32", 4), ("d_row", "bf16", 2)):
        rule = variant.tma[tensor]
        assert rule.dtype == dtype and rule.box[0] * size == 128  # one 128-byte swizzle row
        view = TensorView(0, 1 << 20, (m, n2, 1), (n2, 1, m * n2), dtype)
        assert global_layout(rule, view) == ([n2, m], [n2 * size])


def _variant(artifacts: Path, **fields):
    (variant,) = [
        v
        for v in read_manifest(artifacts).variants
        if all(getattr(v.key, name) == value for name, value in fields.items())
    ]
    return variant


@pytest.mark.slow
def test_discrete_variant_descriptors_and_workspaces(artifacts: Path) -> None:
    """b_descriptors, main, dbias_finish; the N-major b_expert template encodes (N, K)."""
    variant = _variant(artifacts, weight_mode="discrete")
    assert [k.role for k in variant.kernels] == ["b_descriptors", "main", "dbias_finish"]
    assert sorted(variant.workspaces) == ["b_desc_ws", "dbias_ws"]
    n, k = SCALARS["n"], SCALARS["k"]
    template = TensorView(0, 1 << 20, (n, k, 1), (1, n, n * k), "bf16")
    assert global_layout(variant.tma["b_expert"], template) == ([n, k], [n * 2])
    assert launch_grid(variant.kernels[0], SCALARS, 132) == (1, 1, 1)  # 5 experts, one block


@pytest.mark.slow
def test_dynamic_variant_needs_the_tile_counter(artifacts: Path) -> None:
    variant = _variant(artifacts, scheduler="dynamic")
    assert [k.role for k in variant.kernels] == ["main"]
    assert sorted(variant.workspaces) == ["tile_counter"]


@pytest.mark.slow
def test_cluster_variant_launches_pairs_of_ctas(artifacts: Path) -> None:
    variant = _variant(artifacts, cluster_m=2, tile_m=128)
    main = variant.kernels[0]
    assert main.cluster == (2, 1, 1)
    assert launch_grid(main, SCALARS, 132) == (12, 1, 1)  # 11 tiles -> 6 clusters
    assert sorted(variant.workspaces) == ["dbias_ws"]
    assert main.attributes == {"cluster_dimension": (2, 1, 1)}


@pytest.mark.slow
def test_pingpong_64x256_tiles_and_boxes_are_64_rows(artifacts: Path) -> None:
    """The 64x256 ping-pong tile: 64-row boxes of A, C and D, 256-row B boxes split over
    the pair (multicast), and a grid of 64-row tiles in pairs."""
    variant = _variant(artifacts, tile_m=64)
    (main,) = [kernel for kernel in variant.kernels if kernel.role == "main"]
    assert (variant.key.tile_n, variant.key.consumer, main.cluster) == (256, "pingpong", (2, 1, 1))
    assert main.block == (384, 1, 1)
    # boxes innermost first: (K, rows) for A and B, (columns, rows) for C and D
    assert tuple(variant.tma["a"].box) == (64, 64)
    assert tuple(variant.tma["b"].box) == (64, 128, 1)
    assert tuple(variant.tma["c"].box) == tuple(variant.tma["d_row"].box) == (64, 64)
    assert launch_grid(main, SCALARS, 132) == (22, 1, 1)  # 22 m-tiles x 1 n-tile -> 11 clusters
