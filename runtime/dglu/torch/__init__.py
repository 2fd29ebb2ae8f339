"""dglu for PyTorch training: the fused op as a torch custom op, and the MoE expert MLP.

Import it explicitly (``import dglu.torch``); ``import dglu`` does not import it or torch.

- ``grouped_gemm_dglu``: the fused op through ``torch.ops.dglu.grouped_gemm_dglu``, safe
  under torch.compile(fullgraph=True) and CUDA graphs (dglu.torch.op);
- ``ExpertMLP`` / ``expert_mlp``: the expert MLP with dglu's fused backward (dglu.torch.mlp);
- ``Activation`` and the presets SWIGLU, GPT_OSS_GEGLU, DEEPSEEK_V4_CLAMPED_SWIGLU, SITUGLU;
- ``to_blocked`` / ``from_blocked``: checkpoint gate/up layouts to the seed's 32-column
  interleave and back (dglu.torch.layouts);
- ``group_by_expert`` / ``scatter_back``: routed tokens to 256-padded expert rows and back;
- ``use_reference_on_cpu``: run the op's float reference for CPU tensors (tests).
"""

from .activations import (
    DEEPSEEK_V4_CLAMPED_SWIGLU,
    GPT_OSS_GEGLU,
    SITUGLU,
    SWIGLU,
    Activation,
)
from .grouping import RoutedTokens, group_by_expert, scatter_back
from .layouts import from_blocked, merge_blocked, split_blocked, to_blocked
from .mlp import ExpertMLP, ExpertMLPFunction, expert_mlp
from .op import DgluOutputs, grouped_gemm_dglu
from .reference import grouped_gemm_dglu_reference, use_reference_on_cpu

__all__ = [
    "DEEPSEEK_V4_CLAMPED_SWIGLU",
    "GPT_OSS_GEGLU",
    "SITUGLU",
    "SWIGLU",
    "Activation",
    "DgluOutputs",
    "ExpertMLP",
    "ExpertMLPFunction",
    "RoutedTokens",
    "expert_mlp",
    "from_blocked",
    "group_by_expert",
    "grouped_gemm_dglu",
    "grouped_gemm_dglu_reference",
    "merge_blocked",
    "scatter_back",
    "split_blocked",
    "to_blocked",
    "use_reference_on_cpu",
]
