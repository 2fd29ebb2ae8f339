"""One shape's MXFP8 problem, the three ways bench.mxfp8 solves it, and the check that keeps
a wrong result from posting a time.

- ``run_mxfp8``: dglu's MXFP8 fused op through the wrapper (e4m3 A/B/D, bf16 C, dswiglu,
  dense K-major B, dbias), the same settings as bench's BF16 ``fused`` row;
- the BF16 fused op (bench.fused) on the same values: A and B decoded exactly to bf16;
- ``UnfusedPath``: what a Hopper user writes today: dequantize A and B to bf16, then
  torch._grouped_mm, then the dSwiGLU epilogue (bench.baselines) and the MXFP8 quantizer of
  D_row and D_col (bench.mxfp8_torch), with both torch pieces under torch.compile.

``check`` compares a candidate's outputs (FP8 D decoded with its SFD) with the eager unfused
path's, which shares no compiled or dglu code with the candidates. ``selected_variant``
names the variant the MXFP8 call selects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

import torch

from .baselines import dswiglu_epilogue
from .fused import relative_l2, run_fused
from .inputs import BufferSet, l2_bytes, make_buffer_set, rotation_count, set_bytes
from .mxfp8_torch import SF_VEC, dequantize, quantize_d, quantize_operand
from .shapes import Shape

AB_DTYPE = D_DTYPE = torch.float8_e4m3fn
BLOCK_EXPONENTS = (-4, 4)  # A's and B's 32-blocks scaled by 2^U{-4..4}: every SF byte varies
# Relative L2 bounds of the check. The unfused path rounds R to bf16 (torch._grouped_mm's
# output), which moves about 1.6% of the FP8 codes by one step (~1e-2 relative L2); the BF16
# op's D is unquantized, so FP8's own rounding (~3e-2) separates it from the reference.
FP8_D_BOUND = 0.05
BF16_D_BOUND = 0.1
SUMS_BOUND = 0.05  # dprob and dbias


@dataclass(frozen=True)
class Mxfp8Set:
    """One buffer set: the MXFP8 operands, and ``bf16`` holding the same problem for the
    BF16 op and the baselines (its A and B are the operands decoded, exact in bf16)."""

    bf16: BufferSet
    a: Any  # (M, K, 1) e4m3
    sfa: Any  # (32, 4, ceil(M/128), 4, ceil(K/128), 1) float8_e8m0fnu
    b: Any  # (N, K, L) e4m3, K-major
    sfb: Any  # (32, 4, ceil(N/128), 4, ceil(K/128), L) float8_e8m0fnu
    norm_const: Any  # (1,) fp32


def _block_scaled(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """fp32 (L, rows, K): each 32-element block of ``x`` times its own random power of two."""
    l, rows, k = x.shape
    low, high = BLOCK_EXPONENTS
    exponents = torch.randint(
        low, high + 1, (l, rows, k // SF_VEC, 1), generator=generator, device=x.device
    )
    return (x.float().view(l, rows, k // SF_VEC, SF_VEC) * torch.exp2(exponents.float())).view(
        l, rows, k
    )


def make_mxfp8_set(shape: Shape, device: Any, generator: torch.Generator) -> Mxfp8Set:
    """bench.inputs' buffer set for ``shape``, its A and B block-scaled and quantized to
    MXFP8, and replaced by their exact bf16 decodes."""
    return mxfp8_set_of(make_buffer_set(shape, device, generator), shape, generator)


def mxfp8_set_of(base: Any, shape: Shape, generator: torch.Generator) -> Mxfp8Set:
    """The MXFP8 set of a BF16 buffer set ``base`` of ``shape`` (make_mxfp8_set's, ``base``
    itself left as it is)."""
    m, k = shape.m, shape.k
    a, sfa = quantize_operand(_block_scaled(base.a.view(1, m, k), generator), AB_DTYPE)
    b, sfb = quantize_operand(_block_scaled(base.b_experts, generator), AB_DTYPE)
    b = b.permute(1, 2, 0)  # (N, K, L), strides (K, 1, N*K)
    a = a.view(m, k, 1)
    a_bf16 = dequantize(a, sfa)[0].bfloat16()
    b_bf16 = dequantize(b, sfb).bfloat16()  # (L, N, K)
    bf16 = replace(base, a=a_bf16.view(m, k, 1), b=b_bf16.permute(1, 2, 0), b_experts=b_bf16)
    return Mxfp8Set(
        bf16=bf16,
        a=a,
        sfa=sfa.view(torch.float8_e8m0fnu),
        b=b,
        sfb=sfb.view(torch.float8_e8m0fnu),
        norm_const=torch.ones(1, dtype=torch.float32, device=base.prob.device),
    )


def mxfp8_set_bytes(shape: Shape) -> int:
    """Device bytes of one set's large tensors: the BF16 set's and the FP8 A, B, D_row, D_col."""
    fp8 = shape.m * shape.k + shape.l * shape.n * shape.k + 2 * shape.m * 2 * shape.n
    return set_bytes(shape) + fp8


def make_mxfp8_sets(shape: Shape, device: Any, seed: int) -> list[Mxfp8Set]:
    """Enough sets for ``shape`` that rotating through them defeats L2; ``seed`` fixes them."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    count = rotation_count(mxfp8_set_bytes(shape), l2_bytes(device))
    return [make_mxfp8_set(shape, device, generator) for _ in range(count)]


# --- memory -----------------------------------------------------------------------------------


def operand_bytes(shape: Shape) -> int:
    """Bytes of the op's own tensors in HBM: FP8 A and B with one E8M0 byte per 32 of K,
    bf16 C, FP8 D_row and D_col with their scale bytes, prob and dprob (fp32), dbias (bf16)."""
    m, n2, k, l = shape.m, 2 * shape.n, shape.k, shape.l
    a = m * k + m * k // SF_VEC
    b = l * shape.n * k + l * shape.n * k // SF_VEC
    d = 2 * (m * n2 + m * n2 // SF_VEC)
    return a + b + 2 * m * n2 + d + 2 * 4 * m + 2 * l * n2


def workspace_bytes(s: Mxfp8Set, shape: Shape) -> dict[str, Any]:
    """Per workspace, the bytes the MXFP8 variant that run_mxfp8's call selects allocates
    for ``shape`` (its manifest's rules), and their total; the variant's name."""
    from dglu.contract.element_types import ELEMENT_TYPES
    from dglu.contract.reader import full_variant

    variant = full_variant(_selected_entry(s))
    scalars = {"m": shape.m, "n": shape.n, "k": shape.k, "l": shape.l}
    for scalar, expression in variant.scalars.items():
        scalars[scalar] = expression.value(scalars)
    each = {
        workspace: rule.count.value(scalars) * ELEMENT_TYPES[rule.dtype].size
        for workspace, rule in variant.workspaces.items()
    }
    return {"variant": variant.name, "total": sum(each.values()), "each": each}


# --- the selection ---------------------------------------------------------------------------


def _selected_entry(s: Mxfp8Set) -> Any:
    """The installed variant (dglu.manifest's entry) that run_mxfp8's call on ``s`` selects."""
    import dglu
    from dglu.manifest import installed_variants

    name = dglu.wrapper_variant(**mxfp8_arguments(s))
    return next(v for v in installed_variants() if v.name == name)


def selected_variant(s: Mxfp8Set) -> dict[str, str]:
    """The name of the variant that run_mxfp8's call on ``s`` selects."""
    return {"name": _selected_entry(s).name}


# --- the candidates --------------------------------------------------------------------------


def mxfp8_arguments(s: Mxfp8Set) -> dict[str, Any]:
    """The wrapper's arguments of the bench's MXFP8 call on ``s``: dswiglu with dbias, dense
    K-major B, e4m3 D_row and D_col."""
    b = s.bf16
    return {
        "a_tensor": s.a, "c_tensor": b.c, "sfa_tensor": s.sfa, "padded_offsets": b.padded_offsets,
        "alpha_tensor": b.alpha, "beta_tensor": b.beta, "prob_tensor": b.prob, "dprob_tensor": b.dprob,
        "b_tensor": s.b, "sfb_tensor": s.sfb, "norm_const_tensor": s.norm_const, "d_dtype": D_DTYPE,
        "sf_vec_size": SF_VEC, "act_func": "dswiglu", "generate_dbias": True,
    }


def run_mxfp8(s: Mxfp8Set) -> Any:
    """dglu's MXFP8 fused op (wrapper): (d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col)."""
    import dglu

    return dglu.grouped_gemm_dglu(**mxfp8_arguments(s))


class UnfusedResult(NamedTuple):
    d_row: Any  # (M, 2N) e4m3
    sfd_row: Any  # uint8, the seed's SFD_row allocation
    d_col: Any  # (M, 2N) e4m3
    sfd_col: Any  # uint8, the seed's dense SFD_col allocation
    dbias: Any  # (L, 2N) bf16


def dequantize_operands(a: Any, sfa: Any, b: Any, sfb: Any) -> tuple[Any, Any]:
    """A (M, K) and B (L, N, K) bf16 from the FP8 operands and their uint8 SF tensors."""
    return dequantize(a, sfa)[0].bfloat16(), dequantize(b, sfb).bfloat16()


def epilogue_and_quantize(
    r: Any,
    c: Any,
    prob: Any,
    alpha: Any,
    beta: Any,
    expert_of_row: Any,
    dprob: Any,
    num_experts: int,
    norm_const: Any,
) -> UnfusedResult:
    """bench.baselines' dSwiGLU epilogue on bf16 R with D kept in fp32 (adds into dprob),
    then D_row and D_col quantized to MXFP8."""
    d, dbias = dswiglu_epilogue(r, c.float(), prob, alpha, beta, expert_of_row, dprob, num_experts)
    return UnfusedResult(*quantize_d(d, D_DTYPE, norm_const), dbias)


class UnfusedPath:
    """The unfused MXFP8 backward; ``compiled`` puts the two torch pieces under
    torch.compile (dynamic=False: one graph per shape), else they run eagerly."""

    def __init__(self, compiled: bool) -> None:
        wrap: Callable[[Callable], Callable] = (
            partial(torch.compile, dynamic=False) if compiled else (lambda fn: fn)
        )
        self._dequantize = wrap(dequantize_operands)
        self._epilogue = wrap(epilogue_and_quantize)

    def __call__(self, s: Mxfp8Set) -> UnfusedResult:
        b = s.bf16
        a16, b16 = self._dequantize(s.a, s.sfa.view(torch.uint8), s.b, s.sfb.view(torch.uint8))
        r = torch._grouped_mm(a16, b16.transpose(1, 2), offs=b.padded_offsets)
        m = a16.shape[0]
        return self._epilogue(
            r, b.c.view(m, -1), b.prob, b.alpha, b.beta, b.expert_of_row, b.dprob,
            b.alpha.shape[0], s.norm_const,
        )


# --- the check -------------------------------------------------------------------------------


def fresh(s: Mxfp8Set) -> Mxfp8Set:
    """``s`` with zeroed dprob and dbias and a NaN-filled BF16 D_row (nothing stale is read)."""
    b = s.bf16
    return replace(
        s,
        bf16=replace(
            b,
            dprob=torch.zeros_like(b.dprob),
            dbias=torch.zeros_like(b.dbias),
            d_row=torch.full_like(b.d_row, float("nan")),
        ),
    )


def decoded_d(d_row: Any, sfd_row: Any, d_col: Any, sfd_col: Any, norm_const: Any) -> dict:
    """fp32 (M, 2N) D_row and D_col decoded as Dq * 2^(SFD - 127) / norm_const."""
    m, width = d_row.shape[:2]
    row = dequantize(d_row.reshape(m, width, 1), sfd_row)[0]
    col = dequantize(d_col.reshape(m, width, 1).permute(1, 0, 2), sfd_col)[0].t()
    return {"d_row": row / norm_const, "d_col": col / norm_const}


def mxfp8_outputs(s: Mxfp8Set) -> dict[str, Any]:
    """The MXFP8 op's results on ``s``, D decoded: d_row, d_col, dprob, dbias."""
    d_row, d_col, dprob, dbias, _, sfd_row, sfd_col = run_mxfp8(s)
    decoded = decoded_d(d_row, sfd_row, d_col, sfd_col, s.norm_const)
    return {**decoded, "dprob": dprob, "dbias": dbias}


def unfused_outputs(path: UnfusedPath, s: Mxfp8Set) -> dict[str, Any]:
    """The unfused path's results on ``s``, D decoded: d_row, d_col, dprob, dbias."""
    out = path(s)
    decoded = decoded_d(out.d_row, out.sfd_row, out.d_col, out.sfd_col, s.norm_const)
    return {**decoded, "dprob": s.bf16.dprob, "dbias": out.dbias}


def eager_reference(s: Mxfp8Set) -> dict[str, Any]:
    """The eager unfused path's results on a fresh copy of ``s``: what ``check`` compares
    every candidate with."""
    return unfused_outputs(UnfusedPath(compiled=False), fresh(s))


def bf16_outputs(op: Any, s: Mxfp8Set) -> dict[str, Any]:
    """The BF16 op's results on ``s``: d_row (unquantized), dprob, dbias."""
    run_fused(op, s.bf16)
    return {"d_row": s.bf16.d_row, "dprob": s.bf16.dprob, "dbias": s.bf16.dbias}


def check(got: dict[str, Any], want: dict[str, Any], d_bound: float) -> dict[str, Any]:
    """Relative L2 of each of ``got``'s outputs from ``want``'s; ok when every one is within
    its bound (``d_bound`` for D, SUMS_BOUND for dprob and dbias), else ``failure`` says
    which were not (a NaN never is)."""
    figures = {name: relative_l2(value, want[name]) for name, value in got.items()}
    bounds = {name: d_bound if name.startswith("d_") else SUMS_BOUND for name in figures}
    over = [
        f"{name} relative L2 {figures[name]:.3g} > {bounds[name]:g}"
        for name in figures
        if not figures[name] <= bounds[name]
    ]
    return {**figures, "ok": not over, **({"failure": "; ".join(over)} if over else {})}
