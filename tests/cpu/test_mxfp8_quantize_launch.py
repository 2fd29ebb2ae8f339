"""The sm90 MXFP8 family's D quantizer launch (no CuTe DSL): one kernel reads D, after the
fused kernel, with one block of 256 threads per 32-row x 256-column tile of D (M, 2N), so
that every tile, the partial ones at the bottom and the right included, gets one block."""

from __future__ import annotations

import math

import pytest

from dglu.contract.expressions import parse_expr
from dglu_build.kernels.sm90_mxfp8 import interface
from dglu_build.kernels.sm90_mxfp8.config import Config

KEY = {
    "arch": "sm_90a", "ab_dtype": "e4m3", "c_dtype": "bf16", "d_dtype": "e4m3", "act_func": "dswiglu",
    "act_params": {}, "dbias": True, "weight_mode": "dense", "b_major": "k", "tile_m": 128, "tile_n": 128,
    "cluster_m": 1, "cluster_n": 1, "scheduler": "static", "deterministic": False, "act_out": False,
}


def _scalars(m: int, n: int) -> dict[str, int]:
    """The problem's scalars with the family's derived ones, in their declared order."""
    scalars = {"m": m, "n": n, "k": 256, "l": 1}
    for name, text in interface.SCALARS.items():
        scalars[name] = parse_expr(text).value(scalars)
    return scalars


def test_the_quantizer_is_one_kernel_after_the_fused_one() -> None:
    roles = [kernel.role for kernel in interface.kernels(Config.from_key(KEY))]
    assert roles[roles.index("main"):] == ["main", "dbias_finish", "quantize_d"]


# dsv3-like, qwen3-like, 2N a multiple of 64 but not of 256, M not a multiple of 32
@pytest.mark.parametrize(("m", "n"), [(32768, 2048), (16384, 768), (100, 32), (1, 160), (4097, 416)])
def test_one_block_per_32_by_256_tile_of_d(m: int, n: int) -> None:
    (quantize,) = [kernel for kernel in interface.kernels(Config.from_key(KEY)) if kernel.role == "quantize_d"]
    assert quantize.grid["rule"] == "elementwise"
    blocks = math.ceil(parse_expr(quantize.grid["count"]).value(_scalars(m, n)) / quantize.block)
    assert blocks == math.ceil(m / 32) * math.ceil(2 * n / 256)
