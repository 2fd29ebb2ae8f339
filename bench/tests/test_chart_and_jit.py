"""The ratio chart renders whatever was measured; the JIT script picks the variant the
runtime's default dispatch would."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.chart import ratios_png
from bench.jit_compile_time import BENCH_KEY, default_variant


def shape(name: str, fused_over_gemm: float | None, compiled_over_fused: float | None) -> dict:
    return {
        "shape": {"name": name, "speedup_target": 1.5},
        "ratios": {"fused_over_gemm": fused_over_gemm, "compiled_over_fused": compiled_over_fused},
    }


def test_chart_is_a_png_even_with_missing_ratios():
    pytest.importorskip("matplotlib")
    record = {
        "shapes": [shape("a", 0.9, 2.0), shape("b", None, None), shape("c", 1.2, 1.1)],
        "environment": {"commit": "abc", "gpu": None},
        "dry_run": False,
    }
    png = ratios_png(record)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def variant(name: str, **fields) -> SimpleNamespace:
    return SimpleNamespace(name=name, key={**BENCH_KEY, "tile_n": 128, **fields})


def test_default_variant_is_the_first_match_by_name():
    variants = [
        variant("z_dswiglu_dbias"),
        variant("a_dgeglu", act_func="dgeglu"),
        variant("b_nodbias", dbias=False),
        variant("m_dswiglu_dbias_64", tile_n=64),
    ]
    assert default_variant(variants).name == "m_dswiglu_dbias_64"


def test_default_variant_needs_a_match():
    with pytest.raises(ValueError, match="--specs: no variant with"):
        default_variant([variant("a_dgeglu", act_func="dgeglu")])
