"""Many tiles per CTA, every element checked, for every shipped variant.

The other GPU tests give each CTA one or a few tiles. Here M = 32768 and N is chosen so
that every CTA (every cluster, for 2x1 clusters) of the persistent grid runs about
TILES_PER_CTA tiles: the producer's tile queue wraps around its TILE_QUEUE_DEPTH slots
many times, the epilogue's C/D slot ring runs through many phases, the staging buffer
is handed over once per tile, and the dynamic scheduler claims most tiles past the first
wave from its global counter. K is small (two k-tiles) to keep the calls short; experts
are uneven and one is empty, so tiles of different experts interleave in every CTA.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import SHIPPED, Config  # noqa: E402
from harness import Case, run_case  # noqa: E402
from inputs import Shape  # noqa: E402

pytestmark = pytest.mark.gpu

TILES_PER_CTA = 30
ROWS = 32768
ROW_BLOCK = 256
# 128 blocks of 256 rows over 7 experts, one of them empty
EXPERT_BLOCKS = (40, 0, 24, 1, 31, 1, 31)


def many_tile_shape(config: Config) -> Shape:
    """M = 32768 and N a multiple of the tile width giving TILES_PER_CTA tiles per CTA."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tile_m, tile_n = config.tile
    ctas = sms // config.cluster[0]
    m_units = ROWS // tile_m // config.cluster[0]  # tiles are counted in cluster units
    n_tiles = math.ceil(TILES_PER_CTA * ctas / m_units)
    return Shape(
        n=n_tiles * tile_n,
        k=128,
        expert_rows=tuple(ROW_BLOCK * blocks for blocks in EXPERT_BLOCKS),
    )


def test_many_tile_shape_gives_each_cta_about_30_tiles() -> None:
    assert sum(EXPERT_BLOCKS) * ROW_BLOCK == ROWS
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for config in SHIPPED:
        shape = many_tile_shape(config)
        tiles = (ROWS // config.tile[0] // config.cluster[0]) * (shape.n // config.tile[1])
        assert TILES_PER_CTA <= tiles / (sms // config.cluster[0]) < TILES_PER_CTA + 2, config


@pytest.mark.parametrize("config", SHIPPED, ids=str)
def test_many_tiles(config: Config, seed: int) -> None:
    run_case(Case(config=config, shape=many_tile_shape(config), seed=seed))
