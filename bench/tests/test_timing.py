"""The pure parts of device timing: summaries and sample counts."""

from __future__ import annotations

import random

import pytest

from bench.timing import MAX_SAMPLES, MIN_SAMPLES, sample_count, summarize


def test_summarize_gives_median_and_deciles_of_shuffled_samples():
    samples = [float(v) for v in range(1, 102)]  # 1..101
    random.Random(0).shuffle(samples)
    timing = summarize(samples, "cuda_graph")
    assert timing.median_ms == 51.0
    assert timing.p10_ms == pytest.approx(11.0)
    assert timing.p90_ms == pytest.approx(91.0)
    assert timing.samples == 101
    assert timing.as_dict()["method"] == "cuda_graph"


def test_summarize_needs_two_samples():
    with pytest.raises(ValueError, match="samples_ms: got 1"):
        summarize([1.0], "eager")


@pytest.mark.parametrize(
    ("estimate_ms", "budget_ms", "expected"),
    [
        (1.0, 300.0, 300),
        (0.001, 300.0, MAX_SAMPLES),
        (100.0, 300.0, MIN_SAMPLES),
        (0.0, 1.0, MAX_SAMPLES),
    ],
)
def test_sample_count_fits_the_budget_within_bounds(estimate_ms, budget_ms, expected):
    assert sample_count(estimate_ms, budget_ms) == expected
