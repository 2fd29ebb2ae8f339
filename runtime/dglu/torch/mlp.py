"""The MoE expert MLP with dglu's fused backward: an autograd.Function and an nn.Module.

Rows arrive grouped by expert and 256-row padded (``group_by_expert``): x (M, K),
prob (M,) fp32 (0 on padding rows), padded_offsets (L,) int32. With W1 (L, 2N, K), gate and
up rows in the seed's 32-column interleave (``layouts``), and W2 (L, N, K) (the op's B):

    H = X W1_g^T (+ b1_g)            torch._grouped_mm, bf16 out, saved for backward
    A = prob * GLU(H)                 fp32 arithmetic, bf16 out (not saved: recomputed)
    Y = A W2_g (+ prob * b2_g)        torch._grouped_mm; b2 as GPT-OSS (scaled by prob)

Backward: one fused dglu call gives dH, dprob and (with b1) db1; torch._grouped_mm gives
dX = dH W1_g, dW1_g = dH_g^T X_g, dW2_g = A_g^T dY_g; b2's gradients are a row sum. A for
dW2 comes from the same fused call (act_out=True: the kernel writes prob * GLU(H) in bf16 as
it reads H) when an act_out variant serves the call (``_act_out_served``: H in bf16 and a variant
installed for this device, activation and bias; on CPU tensors the reference; never under
torch.compile); else it is recomputed from H as the forward made it.
Padding rows carry zero X, zero prob and (from the scatter back) zero dY, so they add
nothing. The fused op is ``torch.ops.dglu.grouped_gemm_dglu``: on CUDA tensors dglu's
kernels; on CPU tensors whatever is registered for the CPU (``use_reference_on_cpu``).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from ..contract.keys import ACT_PARAM_DEFAULTS
from ..selection import VariantRequest, arch_for_capability, has_variant
from .activations import SWIGLU, Activation
from .layouts import split_blocked
from .op import grouped_gemm_dglu


def _rows_expert(padded_offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows,) int64: the expert owning each row (L for rows past the last offset)."""
    positions = torch.arange(rows, device=padded_offsets.device, dtype=padded_offsets.dtype)
    return torch.searchsorted(padded_offsets, positions, right=True)


def _per_row(table: torch.Tensor, rows_expert: torch.Tensor) -> torch.Tensor:
    """table (L, W) -> (rows, W), row m getting its expert's entry (zeros past the last)."""
    padded = torch.cat((table, table.new_zeros(1, table.shape[1])))
    return padded[rows_expert]


def _glu(h: torch.Tensor, prob: torch.Tensor, activation: Activation) -> torch.Tensor:
    gate, up = split_blocked(h.float())
    return (prob[:, None] * activation.forward(gate, up)).to(h.dtype)


def _act_out_served(device: torch.device, dtype: torch.dtype, activation: Activation, dbias: bool) -> bool:
    """Whether the fused op can also write A (an act_out variant is installed for the call:
    dense bf16 weights, C and D in ``dtype``, the activation's constants, dbias or not).
    Under torch.compile the answer is False: reading the installed manifests is not
    traceable, so a compiled backward recomputes A."""
    if torch.compiler.is_compiling():
        return False
    return _act_out_installed(device, dtype, activation, dbias)


@functools.lru_cache(maxsize=64)
def _act_out_installed(device: torch.device, dtype: torch.dtype, activation: Activation, dbias: bool) -> bool:
    """_act_out_served outside torch.compile (cached per device, dtype, activation, dbias)."""
    if dtype != torch.bfloat16:  # the op writes A in bf16 only
        return False
    if device.type != "cuda":
        return True  # the CPU kernel is the reference, which writes every output
    from ..manifest import installed_variants

    constants = activation.op_arguments()
    act_func = constants.pop("act_func")
    request = VariantRequest(
        arch=arch_for_capability(torch.cuda.get_device_capability(device)) or "",
        ab_dtype="bf16", c_dtype="bf16", d_dtype="bf16", act_func=act_func,
        act_params=tuple(sorted((name, float(constants[name])) for name in ACT_PARAM_DEFAULTS[act_func])),
        dbias=dbias, weight_mode="dense", b_major="k", scheduler="static", act_out=True,
    )
    return has_variant(installed_variants(request.arch), request)


def _check(x, prob, padded_offsets, w1, w2, b1, b2) -> None:
    """Shapes of the MLP's arguments, with the argument's name on a mismatch."""
    experts, width, k = w1.shape
    n = width // 2
    expected = {
        "x": (x, (x.shape[0], k)),
        "prob": (prob, (x.shape[0],)),
        "padded_offsets": (padded_offsets, (experts,)),
        "down_weight": (w2, (experts, n, k)),
        "gate_up_bias": (b1, (experts, width)),
        "down_bias": (b2, (experts, k)),
    }
    for name, (tensor, shape) in expected.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(
                f"{name}: expected shape {shape} (gate_up_weight is {tuple(w1.shape)}), "
                f"got {tuple(tensor.shape)}"
            )
    if prob.dtype != torch.float32:
        raise ValueError(f"prob: expected torch.float32 routing probabilities, got {prob.dtype}")
    if padded_offsets.dtype != torch.int32:
        raise ValueError(f"padded_offsets: expected torch.int32, got {padded_offsets.dtype}")


class ExpertMLPFunction(torch.autograd.Function):
    """Y from (x, prob, padded_offsets, W1, W2, b1, b2, activation); see the module doc."""

    @staticmethod
    def forward(ctx, x, prob, padded_offsets, w1, w2, b1, b2, activation):
        rows_expert = None  # only the biases need each row's expert
        if b1 is not None or b2 is not None:
            rows_expert = _rows_expert(padded_offsets, x.shape[0])
        h = torch._grouped_mm(x, w1.transpose(1, 2), offs=padded_offsets)
        if b1 is not None:
            h = h + _per_row(b1, rows_expert)
        y = torch._grouped_mm(_glu(h, prob, activation), w2, offs=padded_offsets)
        if b2 is not None:
            y = y + (prob[:, None] * _per_row(b2, rows_expert).float()).to(y.dtype)
        ctx.save_for_backward(x, prob, padded_offsets, w1, w2, h, b2, rows_expert)
        ctx.activation = activation
        ctx.b1_dtype = None if b1 is None else b1.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, prob, offsets, w1, w2, h, b2, rows_expert = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dy = dy.contiguous().to(x.dtype)
        rows, experts = x.shape[0], w1.shape[0]
        dprob = torch.zeros(rows, 1, 1, dtype=torch.float32, device=x.device)
        ones = torch.ones(experts, dtype=torch.float32, device=x.device)
        with_dbias = ctx.b1_dtype is not None
        fused_a = needs[4] and _act_out_served(h.device, h.dtype, ctx.activation, with_dbias)
        fused = grouped_gemm_dglu(
            dy.unsqueeze(-1),
            h.unsqueeze(-1),
            padded_offsets=offsets,
            alpha_tensor=ones,
            beta_tensor=ones,
            prob_tensor=prob.view(rows, 1, 1),
            dprob_tensor=dprob,
            b_tensor=w2.permute(1, 2, 0),
            generate_dbias=with_dbias,
            d_dtype=h.dtype,
            act_out=fused_a,
            **ctx.activation.op_arguments(),
        )
        dh = fused.d_row_tensor.view(rows, -1)
        dx = torch._grouped_mm(dh, w1, offs=offsets) if needs[0] else None
        dw1 = torch._grouped_mm(dh.t(), x, offs=offsets) if needs[3] else None
        dw2 = None
        if needs[4]:
            a = fused.act_out_tensor.view(rows, -1) if fused_a else _glu(h, prob, ctx.activation)
            dw2 = torch._grouped_mm(a.t(), dy, offs=offsets)
        dprob = dprob.view(rows)
        db1 = None
        if ctx.b1_dtype is not None:
            db1 = fused.dbias_tensor.view(experts, -1).to(ctx.b1_dtype)
        db2 = None
        if b2 is not None:
            dyf = dy.float()
            dprob = dprob + (dyf * _per_row(b2, rows_expert).float()).sum(dim=1)
            if needs[6]:
                sums = dyf.new_zeros(experts + 1, dyf.shape[1])
                sums = sums.index_add(0, rows_expert, prob[:, None] * dyf)
                db2 = sums[:experts].to(b2.dtype)
        return dx, dprob if needs[1] else None, None, dw1, dw2, db1, db2, None


def expert_mlp(
    x: torch.Tensor,
    prob: torch.Tensor,
    padded_offsets: torch.Tensor,
    gate_up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    gate_up_bias: Optional[torch.Tensor] = None,
    down_bias: Optional[torch.Tensor] = None,
    activation: Activation = SWIGLU,
) -> torch.Tensor:
    """Y (M, K) of the grouped rows, differentiable with dglu's fused backward."""
    _check(x, prob, padded_offsets, gate_up_weight, down_weight, gate_up_bias, down_bias)
    return ExpertMLPFunction.apply(
        x, prob, padded_offsets, gate_up_weight, down_weight, gate_up_bias, down_bias, activation
    )


class ExpertMLP(torch.nn.Module):
    """L experts' gated MLPs as stacked parameters; ``forward(x, prob, padded_offsets)``.

    ``gate_up_weight`` (L, 2N, K): gate and up rows in the 32-column interleave (convert a
    checkpoint with ``layouts.to_blocked(w, "halves" | "even_odd", dim=...)``);
    ``down_weight`` (L, N, K); ``gate_up_bias`` (L, 2N) interleaved and ``down_bias`` (L, K)
    when asked for (GPT-OSS has both).
    """

    def __init__(
        self,
        num_experts: int,
        hidden_size: int,
        intermediate_size: int,
        activation: Activation = SWIGLU,
        gate_up_bias: bool = False,
        down_bias: bool = False,
        dtype: torch.dtype = torch.bfloat16,
        device: Optional[torch.device | str] = None,
    ) -> None:
        super().__init__()
        if intermediate_size % 32:
            raise ValueError(
                f"intermediate_size: must be a multiple of 32 (the gate/up blocks), got "
                f"{intermediate_size}"
            )
        factory = {"dtype": dtype, "device": device}
        self.activation = activation
        self.gate_up_weight = torch.nn.Parameter(
            torch.empty(num_experts, 2 * intermediate_size, hidden_size, **factory)
        )
        self.down_weight = torch.nn.Parameter(
            torch.empty(num_experts, intermediate_size, hidden_size, **factory)
        )
        self.gate_up_bias = (
            torch.nn.Parameter(torch.zeros(num_experts, 2 * intermediate_size, **factory))
            if gate_up_bias
            else None
        )
        self.down_bias = (
            torch.nn.Parameter(torch.zeros(num_experts, hidden_size, **factory))
            if down_bias
            else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Weights ~ N(0, 1/fan_in); biases zero."""
        with torch.no_grad():
            self.gate_up_weight.normal_(0.0, self.gate_up_weight.shape[-1] ** -0.5)
            self.down_weight.normal_(0.0, self.down_weight.shape[1] ** -0.5)

    def forward(
        self, x: torch.Tensor, prob: torch.Tensor, padded_offsets: torch.Tensor
    ) -> torch.Tensor:
        return expert_mlp(
            x,
            prob,
            padded_offsets,
            self.gate_up_weight,
            self.down_weight,
            self.gate_up_bias,
            self.down_bias,
            self.activation,
        )
