"""The problems the harness times: five MoE shapes (bench/README.md, "Baselines") and two
ragged cases, with the issue's targets for each.

A shape's rows are all owned by experts (M = valid rows), each expert's count a multiple
of 256, so FLOPs = 2 * M * N * K everywhere. Nothing here needs torch or a GPU.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from itertools import accumulate

M_ALIGNED = 256
# Issue 25's bounds on fused / grouped-GEMM-only: the large shapes (the epilogue hides
# behind a long mainloop) and the small ones (it costs a visible share; issue 12's 1.15).
LARGE_SHAPE_GEMM_BOUND = 1.00
SMALL_SHAPE_GEMM_BOUND = 1.10


@dataclass(frozen=True)
class Shape:
    """One benchmark problem and the targets its fused time is judged against.

    ``fused_over_gemm_target``: fused / grouped-GEMM-only time must stay at or below it
    (every shape has one; the large-shape bound unless given); ``tflops_target``: the
    fused op's TFLOP/s must reach it; ``speedup_target``: (grouped GEMM + compiled
    epilogue) / fused must reach it; None where the issue sets none.
    """

    name: str
    n: int
    k: int
    expert_rows: tuple[int, ...]
    fused_over_gemm_target: float = LARGE_SHAPE_GEMM_BOUND
    speedup_target: float | None = None
    tflops_target: float | None = None

    @property
    def l(self) -> int:
        return len(self.expert_rows)

    @property
    def m(self) -> int:
        return sum(self.expert_rows)

    @property
    def ends(self) -> list[int]:
        """padded_offsets' values: each expert's cumulative end row."""
        return list(accumulate(self.expert_rows))

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def describe(self) -> dict:
        """The shape as the results JSON records it."""
        return {
            "name": self.name,
            "l": self.l,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "flops": self.flops,
            "expert_rows": list(self.expert_rows),
            "empty_experts": self.expert_rows.count(0),
            "fused_over_gemm_target": self.fused_over_gemm_target,
            "speedup_target": self.speedup_target,
            "tflops_target": self.tflops_target,
        }


def equal_experts(l: int, m: int) -> tuple[int, ...]:
    """``l`` experts sharing ``m`` rows equally (each share a multiple of 256)."""
    if l <= 0 or m % (l * M_ALIGNED):
        raise ValueError(f"m: {m} rows do not split into {l} experts of a multiple of {M_ALIGNED}")
    return (m // l,) * l


def ragged_expert_rows(
    num_experts: int,
    tokens: int,
    seed: int,
    empty_fraction: float = 0.125,
    sigma: float = 1.0,
) -> tuple[int, ...]:
    """Skewed, 256-padded expert sizes, as a router produces them.

    Each expert's share of ``tokens`` is drawn log-normally (``sigma`` sets the skew), a
    random ``empty_fraction`` of the experts (at least one) gets none, the tokens are
    routed by those weights, and each expert's count is padded up to a multiple of 256.
    The same arguments always give the same sizes.
    """
    if num_experts < 2:
        raise ValueError(f"num_experts: got {num_experts}, need at least 2 (one of them empty)")
    if tokens <= 0:
        raise ValueError(f"tokens: got {tokens}, need a positive count")
    if not 0.0 < empty_fraction < 1.0:
        raise ValueError(f"empty_fraction: got {empty_fraction}, need a value in (0, 1)")
    rng = random.Random(seed)
    weights = [rng.lognormvariate(0.0, sigma) for _ in range(num_experts)]
    empty_count = max(1, round(empty_fraction * num_experts))
    for expert in rng.sample(range(num_experts), empty_count):
        weights[expert] = 0.0
    counts = [0] * num_experts
    for expert in rng.choices(range(num_experts), weights=weights, k=tokens):
        counts[expert] += 1
    return tuple(math.ceil(count / M_ALIGNED) * M_ALIGNED for count in counts)


# The ragged row of the H200 baselines' side-by-side table (bench/README.md): 8 experts, two
# empty, 16384 rows in all.
RAGGED_8_ROWS = (3072, 0, 256, 7936, 512, 0, 1280, 3328)

# The five shapes of the H200 baselines (bench/README.md) ((L, M, N, K), equal experts), then
# the two ragged ones.
SHAPES = (
    Shape(
        "dsv3-like",
        2048,
        7168,
        equal_experts(8, 32768),
        fused_over_gemm_target=LARGE_SHAPE_GEMM_BOUND,
        speedup_target=1.5,
        tflops_target=650,
    ),
    Shape(
        "mixtral-like",
        14336,
        4096,
        equal_experts(8, 16384),
        fused_over_gemm_target=LARGE_SHAPE_GEMM_BOUND,
        speedup_target=1.5,
        tflops_target=650,
    ),
    Shape(
        "qwen3-moe-like",
        768,
        2048,
        equal_experts(32, 16384),
        fused_over_gemm_target=SMALL_SHAPE_GEMM_BOUND,
        speedup_target=4.0,
    ),
    Shape(
        "gpt-oss-like",
        2880,
        2880,
        equal_experts(16, 16384),
        fused_over_gemm_target=SMALL_SHAPE_GEMM_BOUND,
        speedup_target=1.5,
    ),
    Shape(
        "many-small-experts",
        768,
        2048,
        equal_experts(64, 16384),
        fused_over_gemm_target=SMALL_SHAPE_GEMM_BOUND,
        speedup_target=4.0,
    ),
    # many-small-experts' N and K with 16384 tokens routed unevenly: the scheduler's case.
    Shape(
        "ragged-many-small",
        768,
        2048,
        ragged_expert_rows(64, 16384, seed=0),
        fused_over_gemm_target=SMALL_SHAPE_GEMM_BOUND,
    ),
    # (L, M, N, K) = (8, 16384, 2048, 4096): few large, uneven experts.
    Shape("ragged-8", 2048, 4096, RAGGED_8_ROWS, fused_over_gemm_target=LARGE_SHAPE_GEMM_BOUND),
)
SHAPE_NAMES = tuple(shape.name for shape in SHAPES)


def select_shapes(names: list[str] | None) -> tuple[Shape, ...]:
    """The shapes named (in table order), or all of them for None."""
    if names is None:
        return SHAPES
    unknown = [name for name in names if name not in SHAPE_NAMES]
    if unknown or not names:
        raise ValueError(
            f"--shapes: got {','.join(names) or 'nothing'}; "
            f"expected a comma-separated subset of {', '.join(SHAPE_NAMES)}"
        )
    return tuple(shape for shape in SHAPES if shape.name in names)
