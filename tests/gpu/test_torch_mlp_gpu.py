"""dglu.torch's expert MLP on the GPU: against a float64 loop, under torch.compile, and
against Hugging Face transformers' own MoE blocks (Qwen3-MoE: dswiglu; GPT-OSS: dgeglu
with its clamp, offset and biases) on realistic routing: top-k, uneven loads, an expert
that gets no token. Gradients are compared in float32 against transformers' autograd
(norm-wise relative error < 2e-2), the MLP running in bf16 with fp32 routing weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from dglu.torch import (  # noqa: E402
    DEEPSEEK_V4_CLAMPED_SWIGLU,
    GPT_OSS_GEGLU,
    SITUGLU,
    SWIGLU,
    Activation,
    ExpertMLP,
    from_blocked,
    group_by_expert,
    scatter_back,
    split_blocked,
    to_blocked,
)

pytestmark = pytest.mark.gpu

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 1024, 256, 192, 8, 2
EMPTY, POPULAR = 7, 0


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double()
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-30))


def bf16_values(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` rounded to bf16 values, kept in its dtype (both sides use these)."""
    return tensor.bfloat16().to(tensor.dtype)


def loop_reference(x, prob, rows, w1, w2, b1, b2, activation: Activation):
    outputs, start = [], 0
    for g, count in enumerate(rows):
        xs, p = x[start : start + count], prob[start : start + count, None]
        h = xs @ w1[g].T + (0 if b1 is None else b1[g])
        y = (p * activation.forward(*split_blocked(h))) @ w2[g]
        outputs.append(y + (0 if b2 is None else p * b2[g]))
        start += count
    return torch.cat(outputs)


@pytest.mark.parametrize(
    "activation", [SWIGLU, GPT_OSS_GEGLU, DEEPSEEK_V4_CLAMPED_SWIGLU, SITUGLU],
    ids=["dswiglu", "gpt-oss-dgeglu", "dsv4-dgeglu", "dsituglu"],
)
def test_module_matches_float64(activation: Activation, seed: int) -> None:
    torch.manual_seed(seed)
    biases = activation.act_func == "dgeglu"
    module = ExpertMLP(EXPERTS, HIDDEN, INTERMEDIATE, activation, biases, biases, device="cuda")
    with torch.no_grad():
        module.gate_up_weight.mul_(2)  # H of a few units: the clamps engage
        for bias in (module.gate_up_bias, module.down_bias):
            if bias is not None:
                bias.normal_()
    hidden = torch.randn(TOKENS, HIDDEN, device="cuda").bfloat16().requires_grad_(True)
    index = torch.randint(0, EXPERTS - 1, (TOKENS, TOP_K), device="cuda")  # EMPTY unused
    weights = torch.rand(TOKENS, TOP_K, device="cuda", requires_grad=True)
    routed = group_by_expert(hidden, index, weights, EXPERTS)
    y = scatter_back(module(routed.x, routed.prob, routed.padded_offsets), routed)
    dy = torch.randn_like(y)
    y.backward(dy)
    params = dict(module.named_parameters())
    ref = {name: p.detach().double().requires_grad_(True) for name, p in params.items()}
    hidden64 = hidden.detach().double().requires_grad_(True)
    weights64 = weights.detach().double().requires_grad_(True)
    routed64 = group_by_expert(hidden64, index, weights64, EXPERTS)
    want = loop_reference(routed64.x, routed64.prob.double(), routed64.expert_rows,
                          ref["gate_up_weight"], ref["down_weight"], ref.get("gate_up_bias"),
                          ref.get("down_bias"), activation)
    want = scatter_back(want, routed64)
    want.backward(dy.double())
    # bf16 parameters, activations and gradients against float64: a few bf16 ulps norm-wise
    for got, expected, name in ((y, want, "y"), (hidden.grad, hidden64.grad, "dX"),
                                (weights.grad, weights64.grad, "routing weights")):
        assert relative_error(got, expected) < 3e-2, name
    for name, param in params.items():
        assert relative_error(param.grad, ref[name].grad) < 3e-2, name
        assert (param.grad[EMPTY] == 0).all(), f"{name}: the empty expert's gradient"


def test_module_compiles_fullgraph(seed: int) -> None:
    torch._dynamo.reset()
    torch.manual_seed(seed)
    module = ExpertMLP(EXPERTS, HIDDEN, INTERMEDIATE, GPT_OSS_GEGLU, True, True, device="cuda")
    hidden = torch.randn(TOKENS, HIDDEN, device="cuda").bfloat16()
    index = torch.randint(0, EXPERTS - 1, (TOKENS, TOP_K), device="cuda")
    routed = group_by_expert(hidden, index, torch.rand(TOKENS, TOP_K, device="cuda"), EXPERTS)
    dy = torch.randn(routed.x.shape, device="cuda").bfloat16()

    def forward(x):
        return module(x, routed.prob, routed.padded_offsets)

    results = []
    for run in (forward, torch.compile(forward, fullgraph=True)):  # backward: AOTAutograd's
        module.zero_grad()
        x = routed.x.detach().requires_grad_(True)
        y = run(x)
        y.backward(dy)
        results.append([y, x.grad, *(p.grad.clone() for p in module.parameters())])
    for eager, compiled in zip(*results):
        assert relative_error(compiled, eager) < 1e-2


def moe_routing(seed: int) -> torch.Tensor:
    """Hidden states whose feature 0 is large and positive: the routers below give expert
    POPULAR a large share and EMPTY none."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    hidden = torch.randn(TOKENS, HIDDEN, generator=g, device="cuda")
    hidden[:, 0] = 2 + torch.rand(TOKENS, generator=g, device="cuda")
    return bf16_values(hidden)


def check_routing(routed) -> None:
    rows = routed.expert_rows
    assert rows[EMPTY] == 0, rows
    assert max(rows) >= 2 * min(r for r in rows if r), f"routing not uneven: {rows}"


def test_qwen3_moe_sparse_moe_block(seed: int) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = transformers.Qwen3MoeConfig(
        hidden_size=HIDDEN, moe_intermediate_size=INTERMEDIATE, num_experts=EXPERTS,
        num_experts_per_tok=TOP_K, norm_topk_prob=True,
    )
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    block = Qwen3MoeSparseMoeBlock(config).cuda().float()
    with torch.no_grad():
        block.experts.gate_up_proj.copy_(bf16_values(torch.randn_like(block.experts.gate_up_proj) * 0.1))
        block.experts.down_proj.copy_(bf16_values(torch.randn_like(block.experts.down_proj) * 0.1))
        block.gate.weight.copy_(torch.randn_like(block.gate.weight) * 0.1)
        block.gate.weight[POPULAR, 0] = 1.5
        block.gate.weight[EMPTY, 0] = -10.0
    hidden = moe_routing(seed)
    dy = torch.randn(TOKENS, HIDDEN, device="cuda")

    # transformers' own autograd, float32
    x_ref = hidden.clone().requires_grad_(True)
    _, weights_ref, index = block.gate(x_ref)
    weights_ref.retain_grad()
    block.experts(x_ref, index, weights_ref).backward(dy)
    want = {
        "dX": x_ref.grad, "routing weights": weights_ref.grad,
        "router": block.gate.weight.grad.clone(),
        "gate_up_proj": block.experts.gate_up_proj.grad, "down_proj": block.experts.down_proj.grad,
    }
    block.gate.weight.grad = None

    # dglu: the same router, the expert MLP in bf16 with the weights converted
    mlp = ExpertMLP(EXPERTS, HIDDEN, INTERMEDIATE, SWIGLU, device="cuda")
    with torch.no_grad():
        mlp.gate_up_weight.copy_(to_blocked(block.experts.gate_up_proj, "halves", dim=1))
        mlp.down_weight.copy_(block.experts.down_proj.transpose(1, 2))
    x = hidden.clone().requires_grad_(True)
    _, weights, index_again = block.gate(x)
    assert torch.equal(index_again, index)
    weights.retain_grad()
    routed = group_by_expert(x.bfloat16(), index, weights, EXPERTS)
    check_routing(routed)
    y = scatter_back(mlp(routed.x, routed.prob, routed.padded_offsets), routed).float()
    y.backward(dy)
    got = {
        "dX": x.grad, "routing weights": weights.grad, "router": block.gate.weight.grad,
        "gate_up_proj": from_blocked(mlp.gate_up_weight.grad, "halves", dim=1),
        "down_proj": mlp.down_weight.grad.transpose(1, 2),
    }
    for name, grad in want.items():
        assert relative_error(got[name], grad) < 2e-2, name


def test_gpt_oss_experts(seed: int) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts, GptOssTopKRouter

    config = transformers.GptOssConfig(
        hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
    )
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    experts = GptOssExperts(config).cuda().float()
    router = GptOssTopKRouter(config).cuda().float()
    with torch.no_grad():
        # gate/up of about 2: a tail beyond the +-7 clamps (the bf16-saved H flips a clamp
        # mask only within a bf16 ulp of 7, as rare as in a trained GPT-OSS)
        for param, scale in ((experts.gate_up_proj, 0.12), (experts.gate_up_proj_bias, 0.5),
                             (experts.down_proj, 0.1), (experts.down_proj_bias, 0.5)):
            param.copy_(bf16_values(torch.randn_like(param) * scale))
        router.weight.copy_(torch.randn_like(router.weight) * 0.1)
        router.bias.zero_()
        router.bias[POPULAR] = 2.0
        router.bias[EMPTY] = -100.0
    hidden = moe_routing(seed)
    dy = torch.randn(TOKENS, HIDDEN, device="cuda")

    x_ref = hidden.clone().requires_grad_(True)
    _, weights_ref, index = router(x_ref)
    weights_ref.retain_grad()
    experts(x_ref, index, weights_ref).backward(dy)
    names = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")
    want = {name: getattr(experts, name).grad for name in names}
    want.update({"dX": x_ref.grad, "routing weights": weights_ref.grad,
                 "router": router.weight.grad.clone()})
    router.weight.grad = None

    mlp = ExpertMLP(EXPERTS, HIDDEN, INTERMEDIATE, GPT_OSS_GEGLU, True, True, device="cuda")
    with torch.no_grad():
        mlp.gate_up_weight.copy_(to_blocked(experts.gate_up_proj, "even_odd", dim=2).transpose(1, 2))
        mlp.gate_up_bias.copy_(to_blocked(experts.gate_up_proj_bias, "even_odd", dim=1))
        mlp.down_weight.copy_(experts.down_proj)
        mlp.down_bias.copy_(experts.down_proj_bias)
    x = hidden.clone().requires_grad_(True)
    _, weights, index_again = router(x)
    assert torch.equal(index_again, index)
    weights.retain_grad()
    routed = group_by_expert(x.bfloat16(), index, weights, EXPERTS)
    check_routing(routed)
    with torch.no_grad():  # the clamps engage
        gate_up = hidden @ experts.gate_up_proj + experts.gate_up_proj_bias[:, None]
        assert (gate_up[..., ::2] > 7).any() and (gate_up[..., 1::2].abs() > 7).any()
    y = scatter_back(mlp(routed.x, routed.prob, routed.padded_offsets), routed).float()
    y.backward(dy)
    got = {
        "gate_up_proj": from_blocked(mlp.gate_up_weight.grad.transpose(1, 2), "even_odd", dim=2),
        "gate_up_proj_bias": from_blocked(mlp.gate_up_bias.grad, "even_odd", dim=1),
        "down_proj": mlp.down_weight.grad, "down_proj_bias": mlp.down_bias.grad,
        "dX": x.grad, "routing weights": weights.grad, "router": router.weight.grad,
    }
    for name, grad in want.items():
        assert relative_error(got[name], grad) < 2e-2, name
