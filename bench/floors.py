"""The time below which no kernel can run a shape on an H200: its compute and bytes floors.

Both rates were measured on an H200 (bench/README.md, "Baselines"):
dense bf16 torch.mm on random data, and a device-to-device copy. An op's floor is the
larger of its compute time at that FLOP rate and its bytes moved at that bandwidth; the
fraction of the floor a candidate reaches is floor / measured median (1.0 = at the floor).

Bytes count each tensor once at its size: what the op must read or write at least once.
The (L,)-sized inputs (padded_offsets, alpha, beta) are left out (a few bytes per expert).
Nothing here needs torch or a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .shapes import Shape

# Measured on an H200 (bench/README.md, "Baselines"): dense bf16 torch.mm on random data
# reaches 790 TFLOP/s; a device-to-device copy moves 4.3 TB/s.
H200_BF16_FLOPS_PER_S = 790e12
H200_DRAM_BYTES_PER_S = 4.3e12
BF16_BYTES, FP32_BYTES = 2, 4
SOURCE = (
    "H200 baselines (bench/README.md): compute 2*M*N*K / 790 TFLOP/s (H200 dense bf16, random "
    "data), bytes moved / 4.3 TB/s (device copy); floor = max of the two; fraction = floor / "
    "measured median"
)


@dataclass(frozen=True)
class Floor:
    """An op's FLOPs and bytes moved on a shape, and the times they take at best."""

    flops: int
    bytes_moved: int

    @property
    def compute_s(self) -> float:
        return self.flops / H200_BF16_FLOPS_PER_S

    @property
    def bytes_s(self) -> float:
        return self.bytes_moved / H200_DRAM_BYTES_PER_S

    @property
    def floor_s(self) -> float:
        return max(self.compute_s, self.bytes_s)

    @property
    def bound(self) -> str:
        """Which floor is the higher one: "compute" or "bytes"."""
        return "compute" if self.compute_s >= self.bytes_s else "bytes"

    def as_dict(self, measured_ms: float | None) -> dict[str, Any]:
        """The floor in ms and, when ``measured_ms`` is known, the fraction reached."""
        floor_ms = 1e3 * self.floor_s
        return {
            "flops": self.flops,
            "bytes": self.bytes_moved,
            "compute_ms": 1e3 * self.compute_s,
            "bytes_ms": 1e3 * self.bytes_s,
            "floor_ms": floor_ms,
            "bound": self.bound,
            "fraction": None if not measured_ms else floor_ms / measured_ms,
        }


def fused_floor(shape: Shape, c_bytes: int = BF16_BYTES, d_bytes: int = BF16_BYTES) -> Floor:
    """dglu's fused op (docs' op contract): reads A (M, K) and B (L, N, K) in bf16, C
    (M, 2N) in C's dtype and prob (M) fp32; writes D (M, 2N) in D's dtype; accumulates
    into dprob (M) fp32 and dbias (L, 2N) bf16."""
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    operands = BF16_BYTES * (m * k + l * n * k)
    activations = m * 2 * n * (c_bytes + d_bytes)
    per_row = 2 * FP32_BYTES * m  # prob, dprob
    dbias = BF16_BYTES * l * 2 * n
    return Floor(shape.flops, operands + activations + per_row + dbias)


def gemm_floor(shape: Shape) -> Floor:
    """The grouped GEMM alone: reads A (M, K) and B (L, N, K), writes R (M, N), all bf16."""
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    return Floor(shape.flops, BF16_BYTES * (m * k + l * n * k + m * n))


# results candidate -> its op's floor
CANDIDATE_FLOORS = {"fused": fused_floor, "grouped_gemm": gemm_floor}


def floors_record(shape: Shape, timings: dict[str, Any]) -> dict[str, Any]:
    """Per candidate of CANDIDATE_FLOORS: its floor on ``shape`` and the fraction of it
    its median in ``timings`` reaches (None where it was not measured)."""
    return {
        name: floor(shape).as_dict(timings.get(name, {}).get("median_ms"))
        for name, floor in CANDIDATE_FLOORS.items()
    }
