"""Random inputs for one shape, in the seed's BF16 layouts, as several buffer sets.

Values are random, never zeros: A and C standard normal, B normal scaled by 1/sqrt(K)
(as in the H200 baselines, bench/README.md), alpha and beta in [0.5, 1.5), prob in [0, 1).
Every set has the same expert sizes and its own tensors, outputs included, so that timing
can rotate through the sets and never find one call's inputs still in L2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .shapes import Shape

L2_MULTIPLE = 3  # rotated sets together hold at least this many L2s of data
MIN_SETS = 2
MAX_SETS = 8
DEFAULT_L2_BYTES = 50 * 2**20  # the H100/H200 L2, where torch does not report it


@dataclass(frozen=True)
class BufferSet:
    """One set of the op's tensors (seed shapes) and what the PyTorch baselines need."""

    a: Any  # (M, K, 1) bf16
    b: Any  # (N, K, L) bf16, K-major: a view of b_experts
    b_experts: Any  # (L, N, K) bf16, contiguous
    c: Any  # (M, 2N, 1) bf16
    padded_offsets: Any  # (L,) int32, cumulative end rows
    alpha: Any  # (L,) fp32
    beta: Any  # (L,) fp32
    prob: Any  # (M, 1, 1) fp32
    dprob: Any  # (M, 1, 1) fp32, accumulated into
    dbias: Any  # (L, 2N, 1) bf16, accumulated into
    d_row: Any  # (M, 2N, 1) bf16, written
    expert_of_row: Any  # (M,) int64: the expert that owns each row (the router's output)


def set_bytes(shape: Shape) -> int:
    """Device bytes of one buffer set's large tensors (A, B, C, D)."""
    bf16 = 2
    return bf16 * (shape.m * shape.k + shape.l * shape.n * shape.k + 2 * shape.m * 2 * shape.n)


def rotation_count(bytes_per_set: int, l2_bytes: int) -> int:
    """Buffer sets to rotate through so that together they hold L2_MULTIPLE L2s."""
    if bytes_per_set <= 0 or l2_bytes <= 0:
        raise ValueError(f"bytes_per_set, l2_bytes: got {bytes_per_set}, {l2_bytes}; need > 0")
    wanted = math.ceil(L2_MULTIPLE * l2_bytes / bytes_per_set)
    return max(MIN_SETS, min(MAX_SETS, wanted))


def l2_bytes(device: Any) -> int:
    """The device's L2 size as torch reports it (DEFAULT_L2_BYTES where it does not)."""
    import torch

    return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", DEFAULT_L2_BYTES)


def make_buffer_set(shape: Shape, device: Any, generator: Any) -> BufferSet:
    """One buffer set of random values for ``shape`` on ``device``."""
    import torch

    def normal(*size: int) -> Any:
        return torch.randn(size, generator=generator, device=device, dtype=torch.float32)

    def uniform(low: float, high: float, *size: int) -> Any:
        values = torch.rand(size, generator=generator, device=device, dtype=torch.float32)
        return low + (high - low) * values

    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    b_experts = (normal(l, n, k) / math.sqrt(k)).bfloat16()
    rows = torch.tensor(shape.expert_rows, device=device)
    return BufferSet(
        a=normal(m, k, 1).bfloat16(),
        b=b_experts.permute(1, 2, 0),
        b_experts=b_experts,
        c=normal(m, 2 * n, 1).bfloat16(),
        padded_offsets=torch.tensor(shape.ends, dtype=torch.int32, device=device),
        alpha=uniform(0.5, 1.5, l),
        beta=uniform(0.5, 1.5, l),
        prob=uniform(0.0, 1.0, m, 1, 1),
        dprob=torch.zeros(m, 1, 1, dtype=torch.float32, device=device),
        dbias=torch.zeros(l, 2 * n, 1, dtype=torch.bfloat16, device=device),
        d_row=torch.empty(m, 2 * n, 1, dtype=torch.bfloat16, device=device),
        expert_of_row=torch.repeat_interleave(torch.arange(l, device=device), rows),
    )


def make_buffer_sets(shape: Shape, device: Any, seed: int) -> list[BufferSet]:
    """Enough buffer sets for ``shape`` on the torch ``device`` that rotating through them
    defeats L2; ``seed`` fixes their values."""
    import torch

    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    count = rotation_count(set_bytes(shape), l2_bytes(device))
    return [make_buffer_set(shape, device, generator) for _ in range(count)]
