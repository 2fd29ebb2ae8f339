"""The ratio chart renders whatever was measured (floors included); the JIT script picks the
variant the runtime's default dispatch would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.chart import ratios_png
from bench.jit_compile_time import BENCH_REQUEST, default_variant


def shape(name: str, fused_over_gemm: float | None, compiled_over_fused: float | None) -> dict:
    fraction = None if fused_over_gemm is None else 0.8 / fused_over_gemm
    floor = {"floor_ms": 0.065, "bound": "compute", "fraction": fraction}
    return {
        "shape": {"name": name, "speedup_target": 1.5, "fused_over_gemm_target": 1.15},
        "ratios": {"fused_over_gemm": fused_over_gemm, "compiled_over_fused": compiled_over_fused},
        "floors": {"fused": floor, "grouped_gemm": {**floor, "fraction": 0.8}},
    }


def test_chart_is_a_png_even_with_missing_ratios_and_floors():
    pytest.importorskip("matplotlib")
    no_floors = {**shape("d", 1.0, 3.0), "floors": None}
    record = {
        "shapes": [shape("a", 0.9, 2.0), shape("b", None, None), shape("c", 1.2, 1.1), no_floors],
        "environment": {"commit": "abc", "gpu": None},
        "dry_run": False,
    }
    png = ratios_png(record)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def variant(name: str, **fields) -> SimpleNamespace:
    """A stand-in for codegen.specs.Variant: a name and a normalised key."""
    key = {**BENCH_REQUEST, "act_params": {}, "tile_m": 128, "tile_n": 128, **fields}
    return SimpleNamespace(name=name, key=key)


def test_default_variant_follows_the_runtimes_dispatch():
    variants = [
        variant("a_small_tile", tile_n=64),
        variant("b_cluster", cluster_m=2, tile_n=256),
        variant("c_dgeglu", act_func="dgeglu", tile_n=256),
        variant("d_nodbias", dbias=False, tile_n=256),
        variant("z_default"),
    ]
    assert default_variant(variants).name == "z_default"  # largest tile among 1x1 static


def test_default_variant_needs_a_match():
    with pytest.raises(ValueError, match="--specs: no variant serves the benchmark's call"):
        default_variant([variant("a_dgeglu", act_func="dgeglu")])
