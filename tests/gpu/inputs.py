"""Random inputs in the seed's BF16 layouts, with values chosen to expose scaling bugs.

alpha is far from 1 and partly negative; beta far from 1; prob partly zero and negative;
dgeglu's C holds values exactly on and next to the clamp bounds (both columns kinds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate

import torch

BOUNDARY_FRACTION = 0.15


@dataclass(frozen=True)
class Shape:
    """Problem sizes: compact width N, reduction K, rows per expert, rows past the experts."""

    n: int
    k: int
    expert_rows: tuple[int, ...]
    extra_rows: int = 0

    @property
    def ends(self) -> list[int]:
        return list(accumulate(self.expert_rows))

    @property
    def valid_m(self) -> int:
        return sum(self.expert_rows)

    @property
    def m(self) -> int:
        return self.valid_m + self.extra_rows

    @property
    def l(self) -> int:
        return len(self.expert_rows)

    def __str__(self) -> str:
        return f"N{self.n}-K{self.k}-L{self.l}-M{self.m}"


@dataclass(frozen=True)
class Inputs:
    a: torch.Tensor  # (M, K, 1) bf16
    b: torch.Tensor  # (N, K, L) bf16, stride (K, 1, N*K)
    c: torch.Tensor  # (M, 2N, 1) bf16
    padded_offsets: torch.Tensor  # (L,) int32
    alpha: torch.Tensor  # (L,) fp32
    beta: torch.Tensor  # (L,) fp32
    prob: torch.Tensor  # (M, 1, 1) fp32


def _far_from_one(count: int, gen: torch.Generator, signed: bool) -> torch.Tensor:
    magnitude = torch.where(
        torch.rand(count, generator=gen, device=gen.device) < 0.5,
        0.3 + 0.4 * torch.rand(count, generator=gen, device=gen.device),
        1.4 + 0.6 * torch.rand(count, generator=gen, device=gen.device),
    )
    if not signed:
        return magnitude
    sign = torch.ones(count, device=gen.device)
    sign[::2] = -1.0
    return magnitude * sign


def bf16_neighbours(value: float) -> list[float]:
    """``value`` and the bf16 numbers just below and above it."""
    bits = torch.tensor([value], dtype=torch.bfloat16).view(torch.int16)
    around = torch.cat((bits - 1, bits, bits + 1)).view(torch.bfloat16)
    return around.float().tolist()


def _with_clamp_bounds(c: torch.Tensor, params: Mapping[str, float], gen: torch.Generator) -> None:
    high, low = params["glu_clamp_max"], params["glu_clamp_min"]
    special = torch.tensor(
        bf16_neighbours(high) + bf16_neighbours(low) + [high + 2.0, low - 2.0, 0.0],
        dtype=c.dtype,
        device=c.device,
    )
    mask = torch.rand(c.shape, generator=gen, device=c.device) < BOUNDARY_FRACTION
    pick = torch.randint(len(special), c.shape, generator=gen, device=c.device)
    c[mask] = special[pick][mask]


def make_inputs(shape: Shape, act_func: str, act_params: Mapping[str, float], seed: int) -> Inputs:
    """Fresh random inputs for ``shape`` on the current CUDA device."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    device = gen.device
    m, n, k, l = shape.m, shape.n, shape.k, shape.l

    def normal(*size: int) -> torch.Tensor:
        return torch.randn(*size, generator=gen, device=device)

    b = (normal(l, n, k) / math.sqrt(k)).to(torch.bfloat16).permute(1, 2, 0)
    c = (normal(m, 2 * n) * 3).to(torch.bfloat16)
    if act_func == "dgeglu":
        _with_clamp_bounds(c, act_params, gen)
    prob = normal(m)
    prob[::7] = 0.0
    return Inputs(
        a=normal(m, k).to(torch.bfloat16).reshape(m, k, 1),
        b=b,
        c=c.reshape(m, 2 * n, 1),
        padded_offsets=torch.tensor(shape.ends, dtype=torch.int32, device=device),
        alpha=_far_from_one(l, gen, signed=True),
        beta=_far_from_one(l, gen, signed=False),
        prob=prob.reshape(m, 1, 1),
    )


def initial_dprob(m: int, seed: int) -> torch.Tensor:
    """A non-zero dprob buffer (M, 1, 1) for the op to accumulate onto."""
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    return torch.randn(m, 1, 1, generator=gen, device=gen.device)


def initial_dbias(l: int, n: int, seed: int) -> torch.Tensor:
    """A non-zero bf16 dbias buffer (L, 2N, 1) for the op to accumulate onto."""
    gen = torch.Generator(device="cuda").manual_seed(seed + 2)
    return torch.randn(l, 2 * n, 1, generator=gen, device=gen.device).to(torch.bfloat16)


def poisoned_d(m: int, n: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """D_row (M, 2N, 1) full of NaN, so that every element left unwritten shows."""
    return torch.full((m, 2 * n, 1), float("nan"), dtype=dtype, device="cuda")
