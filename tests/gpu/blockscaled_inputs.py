"""MXFP8 inputs in the seed's layouts, and the poisoned outputs a class-API call writes into.

A and B are FP8 with E8M0 scales whose exponents differ per 32-element block (2^U[-8, 8]);
one 32-row block of A and one 32-column block of each expert's B are zero, so that D has
all-zero blocks along both directions. C, alpha, beta, prob and the offsets come from
inputs.make_inputs (alpha, beta far from 1, prob partly zero and negative, C on the
activations' branch points), C converted to its FP8 dtype where it is one. Discrete weights:
each expert's (N, K) FP8 matrix and its SFB in their own allocations, after NaN decoys, in a
shuffled order (inputs.expert_weights), behind b_ptrs and sfb_ptrs.

``layout_revealing_inputs`` makes every D element +-Q_g 2^(a(m) + b(n)): A's rows and B's
rows are +-1 with one scale per row, C is constant per gate / input column, prob is 1; so
each D block's amax is a constant times a power of two that depends on the block, and the
SFD bytes name their block (blockscaled_reference's quantizer gives them exactly).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import torch

import blockscaled_reference as bs
from blockscaled_configs import MxConfig
from inputs import ExpertWeights, Inputs, Shape, expert_weights, make_inputs
from reference import merge_columns

EXPONENT_SPREAD = 8  # scales 2^U[-8, 8]
POISON_D = 0x7F  # NaN in e4m3fn and in e5m2
POISON_SF = bs.E8M0_NAN


@dataclass(frozen=True)
class MxInputs:
    a: torch.Tensor  # (M, K, 1) FP8, K-major
    sfa: torch.Tensor  # (32, 4, ceil(M/128), 4, ceil(K/128), 1) e8m0
    b: torch.Tensor  # (N, K, L) FP8 in b_major order; discrete: the experts' values stacked
    sfb: torch.Tensor  # (32, 4, ceil(N/128), 4, ceil(K/128), L) e8m0; discrete: for the reference
    rest: Inputs  # c, padded_offsets, alpha, beta, prob (its a and b are unused)
    experts: ExpertWeights | None = None  # discrete B behind b_ptrs
    sfb_experts: tuple[torch.Tensor, ...] = ()  # discrete SFB, one allocation each
    sfb_decoys: tuple[torch.Tensor, ...] = ()
    sfb_ptrs: torch.Tensor | None = None

    @property
    def c(self) -> torch.Tensor:
        return self.rest.c


def on_device(sf: torch.Tensor, device: str) -> torch.Tensor:
    """A uint8 SF tensor (the seed's permuted strides) copied to ``device`` as e8m0, strides kept."""
    moved = torch.empty_strided(sf.shape, sf.stride(), dtype=torch.uint8, device=device)
    moved.copy_(sf)
    return moved.view(torch.float8_e8m0fnu)


def random_exponents(l: int, rows: int, kc: int, gen: torch.Generator) -> torch.Tensor:
    """(L, rows, ceil(kc/32)) E8M0 bytes 127 + U[-8, 8], on the generator's device."""
    blocks = -(-kc // bs.SF_VEC)
    spread = torch.randint(-EXPONENT_SPREAD, EXPONENT_SPREAD + 1, (l, rows, blocks), generator=gen, device=gen.device)
    return (bs.E8M0_BIAS + spread).to(torch.uint8)


def dense_b(values: torch.Tensor, b_major: str) -> torch.Tensor:
    """(L, N, K) values as the seed's (N, K, L) B: strides (K, 1, N*K) or (1, N, N*K)."""
    if b_major == "k":
        return values.permute(1, 2, 0)
    return values.transpose(1, 2).contiguous().permute(2, 1, 0)


def expert_scale_factors(sfb_exponents: torch.Tensor, k: int, seed: int, device: str):
    """Per-expert SFB tensors (32, 4, ceil(N/128), 4, ceil(K/128), 1), each in its own
    allocation after a NaN-filled decoy, in a shuffled order; and sfb_ptrs."""
    l = sfb_exponents.shape[0]
    order = list(range(l))
    random.Random(seed + 3).shuffle(order)
    made: dict[int, torch.Tensor] = {}
    decoys = []
    for g in order:
        template = bs.sf_allocate(sfb_exponents.shape[1], k, 1, POISON_SF)
        decoys.append(on_device(template, device))
        made[g] = on_device(bs.sf_from_exponents(sfb_exponents[g : g + 1].cpu(), k), device)
    tensors = tuple(made[g] for g in range(l))
    pointers = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=device)
    return tensors, tuple(decoys), pointers


def assemble(
    config: MxConfig,
    rest: Inputs,
    a: torch.Tensor,
    a_exponents: torch.Tensor,
    b_values: torch.Tensor,
    b_exponents: torch.Tensor,
    seed: int,
    device: str,
) -> MxInputs:
    """MxInputs from FP8 A (M, K) and B (L, N, K) values and their block exponents."""
    m, k = a.shape
    sfa = on_device(bs.sf_from_exponents(a_exponents.cpu(), k), device)
    sfb = on_device(bs.sf_from_exponents(b_exponents.cpu(), k), device)
    c = rest.c if config.c_dtype in (torch.bfloat16, torch.float32) else rest.c.to(config.c_dtype)
    rest = replace(rest, c=c)
    if not config.discrete:
        return MxInputs(a.reshape(m, k, 1), sfa, dense_b(b_values, config.b_major), sfb, rest)
    experts = expert_weights(b_values.permute(1, 2, 0), config.b_major, seed)
    tensors, decoys, pointers = expert_scale_factors(b_exponents, k, seed, device)
    return MxInputs(
        a.reshape(m, k, 1), sfa, experts.stacked(), sfb, rest, experts, tensors, decoys, pointers
    )


def make_mx_inputs(config: MxConfig, shape: Shape, seed: int, device: str = "cuda") -> MxInputs:
    """Fresh random MXFP8 inputs for ``config`` on ``shape`` (see the module docstring)."""
    rest = make_inputs(shape, config.act_func, config.act_params, seed, device=device,
                       c_dtype=torch.float32 if config.c_dtype == torch.float32 else torch.bfloat16,
                       c_scaled_by_beta=config.act_func not in bs.C_AS_STORED)
    gen = torch.Generator(device=device).manual_seed(seed + 5)
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    a = torch.randn(m, k, generator=gen, device=device)
    b = torch.randn(l, n, k, generator=gen, device=device) / k**0.5
    first = next(start for start, end in zip([0, *shape.ends], shape.ends) if end > start)
    a[first + 32 : first + 64] = 0.0  # an all-zero 32-row block of D
    if n >= 64:
        b[:, 32:64] = 0.0  # all-zero 32-column blocks of D, gate and input
    return assemble(
        config,
        rest,
        a.to(config.ab_dtype),
        random_exponents(1, m, k, gen),
        b.to(config.ab_dtype),
        random_exponents(l, n, k, gen),
        seed,
        device,
    )


# Fixed per-expert alpha and beta for the layout-revealing inputs (up to 4 experts), chosen
# so that no block's scale input max|D| * rcp lies near a power of two (the test checks it).
LAYOUT_ALPHA = (1.5, 0.625, 2.25, 0.875)
LAYOUT_BETA = (0.75, 1.375, 0.5, 1.75)
LAYOUT_GATE, LAYOUT_INPUT = 1.0, 0.5  # C's gate and input values


def row_exponents(count: int, block_step: int, row_step: int) -> torch.Tensor:
    """Per-row exponents: a block's value (block * block_step mod 13, centred) minus a
    within-block offset in [0, 3] that is 0 on the block's first row."""
    index = torch.arange(count)
    per_block = (index // bs.SF_VEC * block_step) % 13 - 6
    return per_block - (index % bs.SF_VEC * row_step) % 4


def layout_revealing_inputs(config: MxConfig, shape: Shape, seed: int, device: str = "cuda") -> MxInputs:
    """Inputs whose D is +-Q 2^(a(m) + b_g(n)) (the module docstring); one 32-row block of A
    and the second 32-column block of B are zero."""
    if shape.l > len(LAYOUT_ALPHA):
        raise ValueError(f"shape: got {shape.l} experts, need at most {len(LAYOUT_ALPHA)}")
    m, n, k, l = shape.m, shape.n, shape.k, shape.l
    blocks = -(-k // bs.SF_VEC)
    a_sign = torch.where(torch.arange(m) % 3 == 1, -1.0, 1.0)
    a = a_sign.reshape(m, 1).expand(m, k).clone()
    a[32:64] = 0.0
    a_exp = (bs.E8M0_BIAS + row_exponents(m, 5, 7)).reshape(1, m, 1).expand(1, m, blocks)
    b_sign = torch.where(torch.arange(n) % 5 == 2, -1.0, 1.0)
    b = b_sign.reshape(1, n, 1).expand(l, n, k).clone()
    if n >= 64:
        b[:, 32:64] = 0.0
    b_exp = torch.stack([bs.E8M0_BIAS + row_exponents(n, 3 + 2 * g, 5) for g in range(l)])
    b_exp = b_exp.reshape(l, n, 1).expand(l, n, blocks)
    c = merge_columns(torch.full((m, n), LAYOUT_GATE), torch.full((m, n), LAYOUT_INPUT)).reshape(m, 2 * n, 1)
    rest = Inputs(
        a=torch.empty(0),
        b=torch.empty(0),
        c=c.to(torch.bfloat16).to(device),
        padded_offsets=torch.tensor(shape.ends, dtype=torch.int32, device=device),
        alpha=torch.tensor(LAYOUT_ALPHA[:l], device=device),
        beta=torch.tensor(LAYOUT_BETA[:l], device=device),
        prob=torch.ones(m, 1, 1, device=device),
    )
    return assemble(
        config,
        rest,
        a.to(config.ab_dtype).to(device),
        a_exp.to(torch.uint8),
        b.to(config.ab_dtype).to(device),
        b_exp.to(torch.uint8),
        seed,
        device,
    )


@dataclass
class MxOutputs:
    """The tensors a call writes: D_row, D_col (M, 2N, 1), SFD_row, SFD_col, dprob, dbias."""

    d_row: torch.Tensor
    d_col: torch.Tensor
    sfd_row: torch.Tensor
    sfd_col: torch.Tensor
    dprob: torch.Tensor
    dbias: torch.Tensor | None


def poisoned_outputs(config: MxConfig, shape: Shape, dprob: torch.Tensor, dbias, device: str = "cuda") -> MxOutputs:
    """D_row and D_col full of 0x7F bytes (NaN), SFD_row and SFD_col full of 0xFF (NaN), in
    the seed's shapes and strides; dprob and dbias as given (accumulated onto)."""
    m, width = shape.m, 2 * shape.n

    def poisoned_d() -> torch.Tensor:
        return torch.full((m, width, 1), POISON_D, dtype=torch.uint8, device=device).view(config.d_dtype)

    return MxOutputs(
        d_row=poisoned_d(),
        d_col=poisoned_d(),
        sfd_row=on_device(bs.sf_allocate(m, width, 1, POISON_SF), device),
        sfd_col=on_device(bs.sf_allocate(width, m, 1, POISON_SF), device),
        dprob=dprob,
        dbias=dbias,
    )
