"""Gate/up column layouts: the seed's 32-column interleave and the checkpoints' layouts.

The op's C, D and dbias (and so the MLP's W1 rows and gate/up bias) hold 2N columns in
blocks of 32: even blocks the gate, odd blocks the up ("input") half, so compact gate
column j sits at 64 * (j // 32) + j % 32 and up column j 32 further ("blocked").
Checkpoints store the same 2N columns either as

- ``"halves"``: gate columns 0..N-1, then up columns N..2N-1 (Qwen3-MoE's fused
  ``gate_up_proj`` (E, 2N, K), split by ``chunk(2)``; Mixtral's w1 (gate) and w3 (up)
  concatenated along their output dimension), or
- ``"even_odd"``: gate at even, up at odd positions (GPT-OSS's ``gate_up_proj``
  (E, K, 2N) and ``gate_up_proj_bias`` (E, 2N), split by ``[..., ::2]`` / ``[..., 1::2]``).

``to_blocked`` and ``from_blocked`` reorder one dimension (``dim``) of any tensor: weights
whichever way round they are stored, biases, gradients. They copy (index_select).
"""

from __future__ import annotations

import torch

COLUMN_BLOCK = 32
SOURCE_LAYOUTS = ("halves", "even_odd")


def blocked_sources(n: int, layout: str) -> torch.Tensor:
    """For each of the 2N blocked positions, the position in ``layout`` it comes from."""
    if layout not in SOURCE_LAYOUTS:
        raise ValueError(f"layout: expected one of {list(SOURCE_LAYOUTS)}, got {layout!r}")
    if n <= 0 or n % COLUMN_BLOCK:
        raise ValueError(f"n: the gate/up width must be a positive multiple of 32, got {n}")
    position = torch.arange(2 * n)
    block, lane = position // COLUMN_BLOCK, position % COLUMN_BLOCK
    compact = COLUMN_BLOCK * (block // 2) + lane  # gate or up column j
    is_up = block % 2 == 1
    if layout == "halves":
        return compact + is_up * n
    return 2 * compact + is_up


def _width(tensor: torch.Tensor, dim: int) -> int:
    width = tensor.shape[dim]
    if width % (2 * COLUMN_BLOCK):
        raise ValueError(
            f"tensor: dimension {dim} holds gate and up (2N columns, N a multiple of 32), "
            f"got {width} columns of shape {tuple(tensor.shape)}"
        )
    return width // 2


def to_blocked(tensor: torch.Tensor, layout: str, dim: int = -1) -> torch.Tensor:
    """``tensor`` with dimension ``dim`` reordered from ``layout`` to the 32-column interleave."""
    sources = blocked_sources(_width(tensor, dim), layout).to(tensor.device)
    return tensor.index_select(dim, sources)


def from_blocked(tensor: torch.Tensor, layout: str, dim: int = -1) -> torch.Tensor:
    """Inverse of ``to_blocked``: dimension ``dim`` reordered from the interleave to ``layout``."""
    sources = blocked_sources(_width(tensor, dim), layout)
    return tensor.index_select(dim, torch.argsort(sources).to(tensor.device))


def split_blocked(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(..., 2N) in the interleave -> gate, up (..., N), compact column order."""
    *lead, width = tensor.shape
    blocks = tensor.reshape(*lead, width // (2 * COLUMN_BLOCK), 2, COLUMN_BLOCK)
    return (
        blocks[..., 0, :].reshape(*lead, width // 2),
        blocks[..., 1, :].reshape(*lead, width // 2),
    )


def merge_blocked(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Inverse of ``split_blocked``: compact gate, up (..., N) -> (..., 2N) interleaved."""
    *lead, n = gate.shape
    blocks = torch.stack(
        (gate.reshape(*lead, n // COLUMN_BLOCK, COLUMN_BLOCK),
         up.reshape(*lead, n // COLUMN_BLOCK, COLUMN_BLOCK)),
        dim=-2,
    )
    return blocks.reshape(*lead, 2 * n)
