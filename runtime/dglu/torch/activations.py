"""The gated activations of the op, as forward functions in plain torch.

An ``Activation`` names the op's ``act_func`` and carries its constants under the seed's
argument names, so that the forward (here) and the fused backward (the op) always agree.
Each forward takes the compact gate and up halves (rows, N) and returns GLU(gate, up)
(rows, N); the MLP multiplies by the routing probability.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

ACT_FUNCS = ("dswiglu", "dgeglu", "dsituglu")


@dataclass(frozen=True)
class Activation:
    """One gated activation and its constants (the seed's names and defaults).

    dswiglu: silu(gate) * up. dgeglu: min(gate, glu_clamp_max) * sigmoid(geglu_alpha *
    min(gate, glu_clamp_max)) * (clamp(up, glu_clamp_min, glu_clamp_max) + linear_offset),
    GPT-OSS's activation with the defaults. dsituglu: situ_beta1 tanh(gate / situ_beta1)
    sigmoid(gate) * situ_beta2 tanh(up / situ_beta2). Constants an activation does not
    use must stay at their defaults (the op refuses them otherwise).
    """

    act_func: str = "dswiglu"
    geglu_alpha: float = 1.702
    glu_clamp_max: float = 7.0
    glu_clamp_min: float = -7.0
    linear_offset: float = 1.0
    situ_beta1: float = 4.0
    situ_beta2: float = 25.0

    def __post_init__(self) -> None:
        if self.act_func not in ACT_FUNCS:
            raise ValueError(f"act_func: expected one of {list(ACT_FUNCS)}, got {self.act_func!r}")

    def op_arguments(self) -> dict[str, Any]:
        """The op's keyword arguments for this activation (act_func and every constant)."""
        return asdict(self)

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """GLU(gate, up), elementwise, in the inputs' dtype."""
        if self.act_func == "dswiglu":
            return torch.nn.functional.silu(gate) * up
        if self.act_func == "dgeglu":
            gate = gate.clamp(max=self.glu_clamp_max)
            up = up.clamp(self.glu_clamp_min, self.glu_clamp_max)
            return gate * torch.sigmoid(self.geglu_alpha * gate) * (up + self.linear_offset)
        b1, b2 = self.situ_beta1, self.situ_beta2
        return b1 * torch.tanh(gate / b1) * torch.sigmoid(gate) * (b2 * torch.tanh(up / b2))


SWIGLU = Activation("dswiglu")
# GPT-OSS: alpha 1.702, limit 7 (gate clamped above, up on both sides), up + 1.
GPT_OSS_GEGLU = Activation("dgeglu")
# DeepSeek-V4's clamped SwiGLU (the seed's recipe): dgeglu with alpha 1, offset 0, clamp 10.
DEEPSEEK_V4_CLAMPED_SWIGLU = Activation(
    "dgeglu", geglu_alpha=1.0, glu_clamp_max=10.0, glu_clamp_min=-10.0, linear_offset=0.0
)
SITUGLU = Activation("dsituglu")
