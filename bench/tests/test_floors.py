"""Compute and bytes floors, checked against figures worked out by hand, and how the
results record, the table and the summary line carry them."""

from __future__ import annotations

import pytest

from bench.floors import H200_BF16_FLOPS_PER_S, H200_DRAM_BYTES_PER_S, fused_floor, gemm_floor
from bench.report import summary_line, table
from bench.results import results_record, shape_result
from bench.shapes import Shape

# L 2, M 1024, N 1024, K 4096: compute-bound.
SQUARE = Shape("square", n=1024, k=4096, expert_rows=(256, 768))
# L 4, M 256, N 1024, K 1024: B dominates, bytes-bound.
SKINNY = Shape("skinny", n=1024, k=1024, expert_rows=(256, 0, 0, 0))


def test_the_rates_are_the_notes():
    assert H200_BF16_FLOPS_PER_S == 790e12
    assert H200_DRAM_BYTES_PER_S == 4.3e12


def test_a_compute_bound_shape():
    floor = fused_floor(SQUARE)
    # 2 * 1024 * 1024 * 4096
    assert floor.flops == 8_589_934_592
    # A 1024*4096*2 + B 2*1024*4096*2 + C and D 1024*2048*2 each + prob, dprob 1024*4 each
    # + dbias 2*2048*2
    assert floor.bytes_moved == 8_388_608 + 16_777_216 + 2 * 4_194_304 + 2 * 4_096 + 8_192
    assert floor.compute_s == pytest.approx(1.087333e-5, rel=1e-6)
    assert floor.bytes_s == pytest.approx(33_570_816 / 4.3e12)
    assert floor.bound == "compute"
    assert floor.floor_s == floor.compute_s
    record = floor.as_dict(measured_ms=0.02)
    assert record["floor_ms"] == pytest.approx(0.01087333, rel=1e-6)
    assert record["fraction"] == pytest.approx(0.01087333 / 0.02, rel=1e-6)
    assert floor.as_dict(measured_ms=None)["fraction"] is None


def test_a_bytes_bound_shape_and_the_gemms_bytes():
    fused, gemm = fused_floor(SKINNY), gemm_floor(SKINNY)
    # A 256*1024*2 + B 4*1024*1024*2 + C, D 256*2048*2 each + prob, dprob + dbias 4*2048*2
    assert fused.bytes_moved == 524_288 + 8_388_608 + 2 * 1_048_576 + 2 * 1_024 + 16_384
    # A + B + R 256*1024*2
    assert gemm.bytes_moved == 524_288 + 8_388_608 + 524_288
    assert fused.bound == gemm.bound == "bytes"
    assert fused.floor_s == pytest.approx(11_028_480 / 4.3e12)
    assert gemm.floor_s == pytest.approx(9_437_184 / 4.3e12)
    assert fused.compute_s == gemm.compute_s == pytest.approx(536_870_912 / 790e12)


def test_c_and_d_are_counted_in_their_dtypes():
    wide_d = fused_floor(SQUARE, d_bytes=4)
    assert wide_d.bytes_moved - fused_floor(SQUARE).bytes_moved == 1024 * 2048 * 2


def test_results_table_and_summary_carry_the_fractions():
    timing = {"median_ms": 0.02, "p10_ms": 0.02, "p90_ms": 0.02, "samples": 20}
    measured = {"timings": {"fused": timing}}
    result = shape_result(SQUARE, measured)
    assert result["floors"]["fused"]["fraction"] == pytest.approx(0.5436666, rel=1e-6)
    assert result["floors"]["grouped_gemm"]["fraction"] is None  # not measured
    assert result["floors"]["fused"]["bound"] == "compute"
    record = results_record({"commit": "abc", "gpu": None}, {}, [result], None, False)
    header, row, legend = table(record).splitlines()
    assert "fused of floor" in header and "gemm of floor" in header
    assert "0.54 of 0.011c" in row and "- of 0.011c" in row
    assert "790 TFLOP/s" in legend and "4.3 TB/s" in legend
    assert "H200 baselines" in legend
    assert "; fused at 0.54-0.54 of its floor;" in summary_line(record)
