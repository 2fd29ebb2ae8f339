"""The benchmark's shapes: the baselines' table, ragged expert sizes, shape selection."""

from __future__ import annotations

import pytest

from bench.shapes import (
    LARGE_SHAPE_GEMM_BOUND,
    M_ALIGNED,
    SHAPES,
    SMALL_SHAPE_GEMM_BOUND,
    Shape,
    equal_experts,
    ragged_expert_rows,
    select_shapes,
)

# The H200 baselines' table (bench/README.md): name -> (L, M, N, K)
BASELINE_TABLE = {
    "dsv3-like": (8, 32768, 2048, 7168),
    "mixtral-like": (8, 16384, 14336, 4096),
    "qwen3-moe-like": (32, 16384, 768, 2048),
    "gpt-oss-like": (16, 16384, 2880, 2880),
    "many-small-experts": (64, 16384, 768, 2048),
}


def test_the_five_baseline_shapes_match_the_notes_table():
    by_name = {shape.name: shape for shape in SHAPES}
    for name, (l, m, n, k) in BASELINE_TABLE.items():
        shape = by_name[name]
        assert (shape.l, shape.m, shape.n, shape.k) == (l, m, n, k)
        assert set(shape.expert_rows) == {m // l}
        assert shape.flops == 2 * m * n * k
        assert shape.ends[-1] == m


def test_every_shape_has_aligned_experts_and_column_blocks_of_32():
    for shape in SHAPES:
        assert all(rows % M_ALIGNED == 0 for rows in shape.expert_rows), shape.name
        assert shape.n % 32 == 0, shape.name


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_ragged_sizes_are_aligned_skewed_with_empty_experts(seed):
    tokens, experts = 16384, 64
    rows = ragged_expert_rows(experts, tokens, seed)
    assert len(rows) == experts
    assert all(r % M_ALIGNED == 0 for r in rows)
    assert rows.count(0) >= 8  # 1/8 of the experts are made empty, others may be too
    # padding each expert up to 256 adds less than 256 rows per non-empty expert
    nonempty = experts - rows.count(0)
    assert tokens <= sum(rows) < tokens + M_ALIGNED * nonempty
    mean_nonempty = sum(rows) / nonempty
    assert max(rows) >= 3 * mean_nonempty  # skewed: the largest expert far above the mean


def test_ragged_sizes_repeat_for_a_seed_and_change_with_it():
    assert ragged_expert_rows(64, 16384, seed=3) == ragged_expert_rows(64, 16384, seed=3)
    assert ragged_expert_rows(64, 16384, seed=3) != ragged_expert_rows(64, 16384, seed=4)


def test_the_ragged_shapes_have_empty_experts():
    ragged = [shape for shape in SHAPES if shape.expert_rows.count(0)]
    assert [shape.name for shape in ragged] == ["ragged-many-small", "ragged-8"]


def test_ragged_8_is_the_notes_ragged_row():
    ragged_8 = next(shape for shape in SHAPES if shape.name == "ragged-8")
    assert (ragged_8.l, ragged_8.m, ragged_8.n, ragged_8.k) == (8, 16384, 2048, 4096)
    assert ragged_8.expert_rows == (3072, 0, 256, 7936, 512, 0, 1280, 3328)


def test_fused_over_gemm_bounds_are_issue_12s_per_shape():
    bounds = {shape.name: shape.fused_over_gemm_target for shape in SHAPES}
    assert bounds == {
        "dsv3-like": 1.00,
        "mixtral-like": 1.00,
        "ragged-8": 1.00,
        "qwen3-moe-like": 1.10,
        "many-small-experts": 1.10,
        "gpt-oss-like": 1.10,
        "ragged-many-small": 1.10,
    }
    assert (LARGE_SHAPE_GEMM_BOUND, SMALL_SHAPE_GEMM_BOUND) == (1.00, 1.10)
    assert SHAPES[0].describe()["fused_over_gemm_target"] == 1.00
    assert Shape("unjudged", n=64, k=64, expert_rows=(256,)).fused_over_gemm_target == 1.00


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"num_experts": 1, "tokens": 100, "seed": 0}, "num_experts"),
        ({"num_experts": 8, "tokens": 0, "seed": 0}, "tokens"),
        ({"num_experts": 8, "tokens": 100, "seed": 0, "empty_fraction": 1.0}, "empty_fraction"),
    ],
)
def test_ragged_rejects_bad_arguments_naming_them(arguments, named):
    with pytest.raises(ValueError, match=named):
        ragged_expert_rows(**arguments)


def test_equal_experts_rejects_unaligned_shares():
    assert equal_experts(4, 4096) == (1024,) * 4
    with pytest.raises(ValueError, match="m: 1000 rows"):
        equal_experts(4, 1000)


def test_select_shapes_keeps_table_order_and_names_unknown_ones():
    assert select_shapes(None) == SHAPES
    picked = select_shapes(["ragged-many-small", "dsv3-like"])
    assert [s.name for s in picked] == ["dsv3-like", "ragged-many-small"]
    with pytest.raises(ValueError, match=r"--shapes: got dsv3,nope; expected .*mixtral-like"):
        select_shapes(["dsv3", "nope"])
