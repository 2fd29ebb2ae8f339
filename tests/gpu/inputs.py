"""Random inputs in the seed's layouts, with values chosen to expose scaling and boundary bugs.

alpha is far from 1 and partly negative; beta far from 1 (every third expert a power of
two); prob partly zero and negative. A fraction of each expert's C holds the C values at
which X = beta_g * C meets each activation's special values (C itself where X = C), in C's
own dtype: dgeglu's clamp bounds and their neighbours, dsituglu's tanh branch points and
saturation, zeros, large values. With a power-of-two beta, X lands on the clamp bounds
exactly; with the others just below and above them. ``exact_gemm`` draws A and B from a few powers of two (A in {-1, 0, 1}, B in
{-1, 0, 1} / 2^q) so that the GEMM's fp32 accumulation is exact even for very large K.
Discrete weights (ExpertWeights) put each expert's matrix in its own allocation, in a
shuffled order, each right after a NaN-filled decoy, so that a kernel reading any other
address than b_ptrs' (another expert's, a neighbour's) gets wrong values or NaN.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate

import torch

SPECIAL_FRACTION = 0.15
# |x| where the kernel's tanh switches from its polynomial to its exp formula, and past
# which it returns exactly 1 (of x / beta for dsituglu).
TANH_BRANCH_POINT, TANH_SATURATION = 0.6, 9.02
_SAME_SIZE_INTS = {2: torch.int16, 4: torch.int32}


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
class ExpertWeights:
    """Discrete weights: each expert's (N, K) bf16 matrix in its own allocation (K-major,
    strides (K, 1), or N-major, strides (1, N)), and b_ptrs, their (L,) int64 addresses on
    the device."""

    matrices: tuple[torch.Tensor, ...]
    decoys: tuple[torch.Tensor, ...]  # NaN-filled, each allocated just before a matrix
    b_ptrs: torch.Tensor

    def stacked(self) -> torch.Tensor:
        """The matrices as one (N, K, L) tensor, for the reference."""
        return torch.stack(self.matrices, dim=2)


@dataclass(frozen=True)
class Inputs:
    a: torch.Tensor  # (M, K, 1) bf16
    b: torch.Tensor  # (N, K, L) bf16, stride (K, 1, N*K); discrete: experts.stacked()
    c: torch.Tensor  # (M, 2N, 1) in C's dtype
    padded_offsets: torch.Tensor  # (L,) int32
    alpha: torch.Tensor  # (L,) fp32
    beta: torch.Tensor  # (L,) fp32
    prob: torch.Tensor  # (M, 1, 1) fp32
    experts: ExpertWeights | None = None  # discrete weights (the op then never sees b)


def neighbours(value: float, dtype: torch.dtype) -> list[float]:
    """``value`` (rounded to ``dtype``) and the ``dtype`` numbers just below and above it."""
    bits = torch.tensor([value], dtype=dtype).view(_SAME_SIZE_INTS[torch.finfo(dtype).bits // 8])
    return torch.cat((bits - 1, bits, bits + 1)).view(dtype).tolist()


def special_values(
    act_func: str, params: Mapping[str, float], dtype: torch.dtype, scale: float = 1.0
) -> list[float]:
    """C values at which X = scale * C meets an activation's branch points, with their
    neighbours in C's dtype."""
    points = [0.0, 12.0, -12.0]
    if act_func == "dgeglu":
        high, low = params["glu_clamp_max"], params["glu_clamp_min"]
        points += [high + 2.0, low - 2.0]
        edges = [high, low]
    elif act_func == "dsituglu":
        scales = (params["situ_beta1"], params["situ_beta2"])
        edges = [sign * TANH_BRANCH_POINT * beta for beta in scales for sign in (1, -1)]
        points += [sign * TANH_SATURATION * beta for beta in scales for sign in (1, -1)]
    else:
        edges = []
    return [p / scale for p in points] + [v for edge in edges for v in neighbours(edge / scale, dtype)]


def _far_from_one(count: int, gen: torch.Generator, signed: bool) -> torch.Tensor:
    device = gen.device
    magnitude = torch.where(
        torch.rand(count, generator=gen, device=device) < 0.5,
        0.3 + 0.4 * torch.rand(count, generator=gen, device=device),
        1.4 + 0.6 * torch.rand(count, generator=gen, device=device),
    )
    if not signed:
        return magnitude
    sign = torch.ones(count, device=device)
    sign[::2] = -1.0
    return magnitude * sign


def _betas(count: int, gen: torch.Generator) -> torch.Tensor:
    """Far from 1; experts 2, 5, 8, ... 1/2 or 2, alternately (X = beta * C exact)."""
    beta = _far_from_one(count, gen, signed=False)
    powers = beta[2::3]
    powers.copy_(torch.tensor([0.5, 2.0], device=beta.device).repeat(len(powers))[: len(powers)])
    return beta


def _operands(shape: Shape, gen: torch.Generator, exact_gemm: bool):
    """A (M, K, 1) and B (N, K, L) in bf16, R = A_g B_g^T of order 1."""
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    device = gen.device
    if exact_gemm:
        step = 2.0 ** -math.ceil(math.log2(math.sqrt(k)))
        a = torch.randint(-1, 2, (m, k), generator=gen, device=device).float()
        b = torch.randint(-1, 2, (l, n, k), generator=gen, device=device) * step
    else:
        a = torch.randn(m, k, generator=gen, device=device)
        b = torch.randn(l, n, k, generator=gen, device=device) / math.sqrt(k)
    return a.to(torch.bfloat16).reshape(m, k, 1), b.to(torch.bfloat16).permute(1, 2, 0)


def _own_copy(matrix: torch.Tensor, b_major: str) -> torch.Tensor:
    """A copy of an (N, K) matrix in a new allocation, K-major or N-major."""
    if b_major == "k":
        return matrix.clone(memory_format=torch.contiguous_format)
    return matrix.t().contiguous().t()


def expert_weights(b: torch.Tensor, b_major: str, seed: int) -> ExpertWeights:
    """B's (N, K, L) values as discrete weights (see ExpertWeights and the module docstring)."""
    l = b.shape[2]
    order = list(range(l))
    random.Random(seed).shuffle(order)
    matrices: dict[int, torch.Tensor] = {}
    decoys = []
    for g in order:
        decoys.append(torch.full(b.shape[:2], float("nan"), dtype=b.dtype, device=b.device))
        matrices[g] = _own_copy(b[:, :, g], b_major)
    pointers = [matrices[g].data_ptr() for g in range(l)]
    return ExpertWeights(
        matrices=tuple(matrices[g] for g in range(l)),
        decoys=tuple(decoys),
        b_ptrs=torch.tensor(pointers, dtype=torch.int64, device=b.device),
    )


def make_inputs(
    shape: Shape,
    act_func: str,
    act_params: Mapping[str, float],
    seed: int,
    *,
    c_dtype: torch.dtype = torch.bfloat16,
    exact_gemm: bool = False,
    discrete_b_major: str | None = None,
    device: str = "cuda",
    c_scaled_by_beta: bool = True,
) -> Inputs:
    """Fresh random inputs for ``shape`` on ``device``; discrete weights in ``discrete_b_major``
    order when it is given (then ``b`` stacks the experts' own matrices).
    ``c_scaled_by_beta``: the activation's X is beta * C (else C as stored: the block-scaled
    dGeGLU), which places C's special values."""
    gen = torch.Generator(device=device).manual_seed(seed)
    m, n, l = shape.m, shape.n, shape.l
    a, b = _operands(shape, gen, exact_gemm)
    alpha, beta = _far_from_one(l, gen, signed=True), _betas(l, gen)
    c = (torch.randn(m, 2 * n, generator=gen, device=device) * 3).to(c_dtype)
    chosen = torch.rand(c.shape, generator=gen, device=device) < SPECIAL_FRACTION
    for g, (start, end) in enumerate(zip([0, *shape.ends], shape.ends)):
        scale = float(beta[g]) if c_scaled_by_beta else 1.0
        special = torch.tensor(special_values(act_func, act_params, c_dtype, scale), device=device)
        pick = torch.randint(len(special), (end - start, 2 * n), generator=gen, device=device)
        rows, mask = c[start:end], chosen[start:end]
        rows[mask] = special[pick][mask].to(c_dtype)
    prob = torch.randn(m, generator=gen, device=device)
    prob[::7] = 0.0
    experts = expert_weights(b, discrete_b_major, seed) if discrete_b_major else None
    return Inputs(
        a=a,
        b=experts.stacked() if experts else b,
        c=c.reshape(m, 2 * n, 1),
        padded_offsets=torch.tensor(shape.ends, dtype=torch.int32, device=device),
        alpha=alpha,
        beta=beta,
        prob=prob.reshape(m, 1, 1),
        experts=experts,
    )


def initial_dprob(m: int, seed: int, device: str = "cuda") -> torch.Tensor:
    """A non-zero dprob buffer (M, 1, 1) for the op to accumulate onto."""
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    return torch.randn(m, 1, 1, generator=gen, device=device)


def initial_dbias(l: int, n: int, seed: int, device: str = "cuda") -> torch.Tensor:
    """A non-zero bf16 dbias buffer (L, 2N, 1) for the op to accumulate onto."""
    gen = torch.Generator(device=device).manual_seed(seed + 2)
    return torch.randn(l, 2 * n, 1, generator=gen, device=device).to(torch.bfloat16)


def poisoned_d(m: int, n: int, dtype: torch.dtype, device: str = "cuda") -> torch.Tensor:
    """D_row (M, 2N, 1) full of NaN, so that every element left unwritten shows."""
    return torch.full((m, 2 * n, 1), float("nan"), dtype=dtype, device=device)
