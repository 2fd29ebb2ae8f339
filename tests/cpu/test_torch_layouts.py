"""dglu.torch.layouts: checkpoint gate/up layouts to the seed's 32-column interleave."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dglu.torch.layouts import (  # noqa: E402
    blocked_sources,
    from_blocked,
    merge_blocked,
    split_blocked,
    to_blocked,
)

N = 96  # three 32-column blocks per half: the last gate block is followed by an up block


def labelled(n: int, layout: str) -> torch.Tensor:
    """(2N,) codes: +1000 + j for gate column j, +2000 + j for up column j, in ``layout``."""
    gate, up = 1000 + torch.arange(n), 2000 + torch.arange(n)
    if layout == "halves":
        return torch.cat((gate, up))
    return torch.stack((gate, up), dim=1).reshape(-1)


def blocked_expected(n: int) -> torch.Tensor:
    """The seed's positions written out: gate j at 64*(j//32) + j%32, up j 32 further."""
    out = torch.empty(2 * n, dtype=torch.long)
    for j in range(n):
        out[64 * (j // 32) + j % 32] = 1000 + j
        out[64 * (j // 32) + j % 32 + 32] = 2000 + j
    return out


@pytest.mark.parametrize("layout", ["halves", "even_odd"])
def test_to_blocked_puts_every_column_at_the_seed_position(layout: str) -> None:
    assert torch.equal(to_blocked(labelled(N, layout), layout), blocked_expected(N))


@pytest.mark.parametrize("layout", ["halves", "even_odd"])
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_round_trip_along_any_dimension(layout: str, dim: int) -> None:
    shape = [3, 5, 7]
    shape[dim] = 2 * N
    weight = torch.randn(shape)
    blocked = to_blocked(weight, layout, dim=dim)
    assert blocked.shape == weight.shape
    assert not torch.equal(blocked, weight)
    assert torch.equal(from_blocked(blocked, layout, dim=dim), weight)


def test_qwen3_gate_up_proj_splits_into_the_chunks() -> None:
    # Qwen3-MoE: gate_up_proj (E, 2N, K), gate, up = linear(x, w).chunk(2, dim=-1)
    weight = torch.randn(4, 2 * N, 16)
    gate, up = split_blocked(to_blocked(weight, "halves", dim=1).transpose(1, 2))
    chunk_gate, chunk_up = weight.chunk(2, dim=1)
    assert torch.equal(gate, chunk_gate.transpose(1, 2))
    assert torch.equal(up, chunk_up.transpose(1, 2))


def test_gpt_oss_even_odd_bias_splits_into_its_strided_halves() -> None:
    bias = torch.randn(4, 2 * N)  # GPT-OSS gate_up_proj_bias (E, 2N): gate ::2, up 1::2
    gate, up = split_blocked(to_blocked(bias, "even_odd"))
    assert torch.equal(gate, bias[..., ::2])
    assert torch.equal(up, bias[..., 1::2])


def test_split_and_merge_are_inverse() -> None:
    h = torch.randn(3, 2 * N)
    assert torch.equal(merge_blocked(*split_blocked(h)), h)


def test_blocked_sources_is_a_permutation() -> None:
    for layout in ("halves", "even_odd"):
        assert torch.equal(torch.sort(blocked_sources(N, layout)).values, torch.arange(2 * N))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: to_blocked(torch.zeros(2 * N), "gate_first"), "layout: expected one of"),
        (lambda: to_blocked(torch.zeros(100), "halves"), "tensor: dimension -1 holds gate and up"),
        (lambda: blocked_sources(48, "halves"), "n: the gate/up width must be"),
    ],
)
def test_bad_input_names_the_argument(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
