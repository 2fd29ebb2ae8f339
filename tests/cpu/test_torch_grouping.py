"""dglu.torch.grouping: routed tokens to 256-padded expert rows and back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dglu.torch.grouping import group_by_expert, scatter_back  # noqa: E402

# 300 tokens, top-2 over 5 experts; expert 3 gets no token, expert 0 more than 256.
TOKENS, TOP_K, EXPERTS, HIDDEN = 300, 2, 5, 8


def routing(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(TOKENS, HIDDEN, generator=generator)
    first = torch.where(torch.arange(TOKENS) < 280, 0, 4)
    second = torch.randint(1, 3, (TOKENS,), generator=generator)
    index = torch.stack((first, second), dim=1)
    weights = torch.rand(TOKENS, TOP_K, generator=generator)
    return hidden, index, weights


def test_rows_offsets_and_padding() -> None:
    hidden, index, weights = routing()
    routed = group_by_expert(hidden, index, weights, EXPERTS)
    counts = torch.bincount(index.reshape(-1), minlength=EXPERTS).tolist()
    assert counts[3] == 0
    expected_rows = [-(-count // 256) * 256 for count in counts]
    assert routed.expert_rows == expected_rows
    assert routed.padded_offsets.dtype == torch.int32
    assert routed.padded_offsets.tolist() == torch.tensor(expected_rows).cumsum(0).tolist()
    assert routed.x.shape == (sum(expected_rows), HIDDEN)
    assert routed.prob.dtype == torch.float32
    start = 0
    for expert, (count, rows) in enumerate(zip(counts, expected_rows)):
        tokens = routed.token_index[start : start + count]
        # the expert's tokens in token order, each with its weight for this expert
        want = torch.nonzero((index == expert).any(dim=1)).reshape(-1)
        assert torch.equal(tokens, want)
        slot = (index[tokens] == expert).int().argmax(dim=1)
        assert torch.equal(routed.prob[start : start + count], weights[tokens, slot])
        assert torch.equal(routed.x[start : start + count], hidden[tokens])
        pad = slice(start + count, start + rows)
        assert (routed.token_index[pad] == TOKENS).all()
        assert (routed.x[pad] == 0).all() and (routed.prob[pad] == 0).all()
        start += rows


def test_scatter_back_sums_each_tokens_weighted_rows() -> None:
    hidden, index, weights = routing(1)
    routed = group_by_expert(hidden, index, weights, EXPERTS)
    y = routed.x * routed.prob[:, None]  # any per-row function of the grouped rows
    out = scatter_back(y, routed)
    assert torch.allclose(out, hidden * weights.sum(dim=1, keepdim=True), atol=1e-6)


def test_gradients_reach_hidden_states_and_routing_weights() -> None:
    hidden, index, weights = routing(2)
    hidden.requires_grad_(True)
    weights.requires_grad_(True)
    routed = group_by_expert(hidden, index, weights, EXPERTS)
    scatter_back(routed.x * routed.prob[:, None], routed).sum().backward()
    assert torch.allclose(hidden.grad, weights.sum(dim=1, keepdim=True).expand(-1, HIDDEN))
    assert torch.allclose(weights.grad, hidden.sum(dim=1, keepdim=True).expand(-1, TOP_K))


def test_all_experts_empty_but_one() -> None:
    hidden = torch.randn(3, HIDDEN)
    routed = group_by_expert(hidden, torch.full((3, 1), 2), torch.ones(3, 1), 4)
    assert routed.padded_offsets.tolist() == [0, 0, 256, 256]
    assert torch.equal(scatter_back(routed.x, routed), hidden)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ((torch.zeros(4), torch.zeros(4, 1, dtype=torch.long), torch.zeros(4, 1)), "hidden"),
        ((torch.zeros(4, 8), torch.zeros(3, 1, dtype=torch.long), torch.zeros(3, 1)), "expert_index"),
        ((torch.zeros(4, 8), torch.zeros(4, 2, dtype=torch.long), torch.zeros(4, 1)), "routing_weights"),
        ((torch.zeros(4, 8), torch.full((4, 1), 7), torch.zeros(4, 1)), r"expert_index: values must lie in \[0, 5\)"),
    ],
)
def test_bad_input_names_the_argument(arguments, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        group_by_expert(*arguments, EXPERTS)


def test_scatter_back_checks_rows() -> None:
    hidden, index, weights = routing()
    routed = group_by_expert(hidden, index, weights, EXPERTS)
    with pytest.raises(ValueError, match="y: expected"):
        scatter_back(routed.x[:-1], routed)
