"""Group routed tokens by expert into 256-row aligned blocks, and scatter results back.

A router gives each of T tokens top-k experts and weights. ``group_by_expert`` stacks the
T * top-k (token, expert) pairs expert after expert, each expert's rows padded with zero
rows up to a multiple of 256 (an expert with no tokens owns no rows), and returns the
rows, their routing probabilities (fp32, 0 on padding rows) and padded_offsets, the
op's cumulative end offsets. ``scatter_back`` sums each token's expert outputs. Both are
differentiable (gathers and index_add), so gradients reach the hidden states and the
routing weights. Grouping reads the expert counts on the host (one synchronisation),
because the number of padded rows decides the shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

M_ALIGNED = 256


@dataclass(frozen=True)
class RoutedTokens:
    """Tokens grouped by expert: ``x`` (M, K), ``prob`` (M,) fp32, ``padded_offsets`` (L,)
    int32, and ``token_index`` (M,) int64, each row's token (``num_tokens`` on padding)."""

    x: torch.Tensor
    prob: torch.Tensor
    padded_offsets: torch.Tensor
    token_index: torch.Tensor
    num_tokens: int

    @property
    def expert_rows(self) -> list[int]:
        """Each expert's padded row count."""
        ends = [0, *self.padded_offsets.tolist()]
        return [end - start for start, end in zip(ends, ends[1:])]


def group_by_expert(
    hidden: torch.Tensor,
    expert_index: torch.Tensor,
    routing_weights: torch.Tensor,
    num_experts: int,
) -> RoutedTokens:
    """Group ``hidden`` (T, K) by ``expert_index`` (T, top_k) with ``routing_weights``
    (T, top_k); rows of one expert keep the tokens' order."""
    if hidden.dim() != 2:
        raise ValueError(f"hidden: expected (tokens, K), got shape {tuple(hidden.shape)}")
    if expert_index.dim() != 2 or expert_index.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"expert_index: expected ({hidden.shape[0]}, top_k) for {hidden.shape[0]} tokens, "
            f"got shape {tuple(expert_index.shape)}"
        )
    if routing_weights.shape != expert_index.shape:
        raise ValueError(
            f"routing_weights: expected expert_index's shape {tuple(expert_index.shape)}, "
            f"got {tuple(routing_weights.shape)}"
        )
    tokens, top_k = expert_index.shape
    flat_expert = expert_index.reshape(-1).long()
    counts = torch.bincount(flat_expert, minlength=num_experts)
    if counts.shape[0] != num_experts:
        raise ValueError(
            f"expert_index: values must lie in [0, {num_experts}), got up to "
            f"{counts.shape[0] - 1}"
        )
    padded = (counts + M_ALIGNED - 1) // M_ALIGNED * M_ALIGNED
    ends = padded.cumsum(0)
    order = torch.argsort(flat_expert, stable=True)  # pair slots, expert after expert
    sorted_expert = flat_expert[order]
    rank = torch.arange(order.numel(), device=order.device) - (counts.cumsum(0) - counts)[
        sorted_expert
    ]
    rows = (ends - padded)[sorted_expert] + rank
    total_rows = int(ends[-1]) if num_experts else 0
    pad_slot = tokens * top_k  # a slot past the last pair: token `tokens`, weight 0
    slot_of_row = torch.full((total_rows,), pad_slot, dtype=torch.long, device=order.device)
    slot_of_row[rows] = order
    token_index = slot_of_row // top_k
    x = torch.cat((hidden, hidden.new_zeros(1, hidden.shape[1])))[token_index]
    weights = routing_weights.reshape(-1).float()
    prob = torch.cat((weights, weights.new_zeros(1)))[slot_of_row]
    return RoutedTokens(x, prob, ends.to(torch.int32), token_index, tokens)


def scatter_back(y: torch.Tensor, routed: RoutedTokens) -> torch.Tensor:
    """(M, K) expert outputs -> (T, K): each token's rows summed (in fp32), padding dropped."""
    if y.shape[0] != routed.token_index.shape[0]:
        raise ValueError(
            f"y: expected {routed.token_index.shape[0]} rows (the grouped rows), got "
            f"shape {tuple(y.shape)}"
        )
    total = y.new_zeros(routed.num_tokens + 1, y.shape[1], dtype=torch.float32)
    total = total.index_add(0, routed.token_index, y.float())
    return total[: routed.num_tokens].to(y.dtype)
