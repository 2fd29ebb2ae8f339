"""The randomized sweep's cases: SWEEP_CASES calls of random shape and shipped variant.

Case i draws everything from random.Random(base seed + i): the variant (activation and
constants, C/D dtypes, dbias, tile, dense or discrete weights and their b_major, the
scheduler, the cluster) from the shipped matrix, the class API or the wrapper,
L (1 to 1,024 experts), which experts hold rows (256 to 768 each, at most six; the others
empty), rows past valid_m, N (a multiple of 32 up to 512) and K (a multiple of 8 up to
512). The inputs (inputs.py) put alpha, beta and prob far from 1 (alpha partly negative,
prob partly zero) and C partly on the activation's clamp bounds and branch points. The
base seed is fixed (SWEEP_BASE_SEED, or DGLU_SWEEP_SEED to explore others); a case's
own seed is the base seed plus its index.
"""

from __future__ import annotations

import os
import random

from configs import SHIPPED
from harness import Case
from inputs import Shape

SWEEP_CASES = 1024
SWEEP_BASE_SEED = 20260530
BASE_SEED = int(os.environ.get("DGLU_SWEEP_SEED") or SWEEP_BASE_SEED)
ROWS_PER_BLOCK = 256
MAX_FILLED_EXPERTS = 6


def _experts(rng: random.Random) -> tuple[int, ...]:
    """Rows per expert: L from 1 to 1,024 (mostly small); up to 6 experts hold 1-3 row blocks."""
    l = rng.choice([1, 1, 2, 3, 4, 5, 8, 13, 32, 64, 257, 1024])
    filled = rng.sample(range(l), k=min(l, rng.randint(0, MAX_FILLED_EXPERTS)))
    return tuple(ROWS_PER_BLOCK * rng.randint(1, 3) if g in filled else 0 for g in range(l))


def sweep_case(index: int) -> Case:
    """The index-th case of the sweep (a pure function of BASE_SEED and index)."""
    rng = random.Random(BASE_SEED + index)
    shape = Shape(
        n=32 * rng.randint(1, 16),
        k=8 * rng.randint(1, 64),
        expert_rows=_experts(rng),
        extra_rows=rng.choice([0, 0, rng.randint(1, 300)]),
    )
    return Case(
        config=rng.choice(SHIPPED),
        shape=shape,
        seed=BASE_SEED + index,
        api=rng.choice(["class", "wrapper"]),
    )
