"""dglu.torch.mlp on the CPU: the MLP's forward and gradients against a float64 loop.

The fused backward op runs through ``torch.ops.dglu.grouped_gemm_dglu``; on CPU tensors
that is the float reference (``use_reference_on_cpu``, the documented seam), so these
tests check the MLP's own wiring (layouts, transposes, offsets, biases, prob) exactly in
float32; the real kernel behind it is tested on the GPU (tests/gpu/test_torch_mlp_gpu.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import dglu.torch  # noqa: E402
from dglu.torch import (  # noqa: E402
    DEEPSEEK_V4_CLAMPED_SWIGLU,
    GPT_OSS_GEGLU,
    SITUGLU,
    SWIGLU,
    Activation,
    ExpertMLP,
    expert_mlp,
    split_blocked,
)

dglu.torch.use_reference_on_cpu()

EXPERT_ROWS = (256, 0, 512, 256)  # an expert with no rows
N, K = 64, 48


def loop_reference(x, prob, rows, w1, w2, b1, b2, activation: Activation):
    """Y per expert in float64, written plainly (matmuls, the activation on split halves)."""
    outputs, start = [], 0
    for g, count in enumerate(rows):
        xs = x[start : start + count].double()
        h = xs @ w1[g].double().T
        if b1 is not None:
            h = h + b1[g].double()
        gate, up = split_blocked(h)
        y = (prob[start : start + count, None].double() * activation.forward(gate, up)) @ w2[g].double()
        if b2 is not None:
            y = y + prob[start : start + count, None].double() * b2[g].double()
        outputs.append(y)
        start += count
    return torch.cat(outputs)


def problem(dtype: torch.dtype, biases: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    experts, m = len(EXPERT_ROWS), sum(EXPERT_ROWS)
    offsets = torch.tensor(EXPERT_ROWS, dtype=torch.int32).cumsum(0).to(torch.int32)
    x = torch.randn(m, K, generator=g)
    prob = torch.rand(m, generator=g)
    x[200:256] = 0  # padding rows of expert 0: zero x, zero prob
    prob[200:256] = 0
    tensors = {
        "x": x,
        "prob": prob,
        "w1": 2 * torch.randn(experts, 2 * N, K, generator=g) / K**0.5,
        "w2": torch.randn(experts, N, K, generator=g) / N**0.5,
        "b1": torch.randn(experts, 2 * N, generator=g) if biases else None,
        "b2": torch.randn(experts, K, generator=g) if biases else None,
    }
    tensors = {
        name: None if t is None else (t if name == "prob" else t.to(dtype)).requires_grad_(True)
        for name, t in tensors.items()
    }
    dy = torch.randn(m, K, generator=g)
    dy[200:256] = 0  # padding rows get no gradient from the scatter back
    return tensors, offsets, dy


def gradients(output: torch.Tensor, dy: torch.Tensor, tensors: dict) -> dict:
    leaves = {name: t for name, t in tensors.items() if t is not None}
    grads = torch.autograd.grad(output, list(leaves.values()), grad_outputs=dy.to(output.dtype))
    return dict(zip(leaves, grads))


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-30))


ACTIVATIONS = [SWIGLU, GPT_OSS_GEGLU, DEEPSEEK_V4_CLAMPED_SWIGLU, SITUGLU]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: f"{a.act_func}-{a.geglu_alpha}")
@pytest.mark.parametrize("biases", [False, True])
def test_forward_and_gradients_match_float64_in_float32(activation: Activation, biases: bool) -> None:
    tensors, offsets, dy = problem(torch.float32, biases)
    args = (tensors["x"], tensors["prob"], offsets, tensors["w1"], tensors["w2"],
            tensors["b1"], tensors["b2"])
    y = expert_mlp(*args, activation=activation)
    want_y = loop_reference(tensors["x"], tensors["prob"], EXPERT_ROWS, tensors["w1"],
                            tensors["w2"], tensors["b1"], tensors["b2"], activation)
    assert relative_error(y, want_y) < 1e-5
    got = gradients(y, dy, tensors)
    want = gradients(want_y, dy.double(), tensors)
    for name in got:
        # dbias comes back from the op in bf16, as the kernel writes it
        limit = 1e-2 if name == "b1" else 1e-5
        assert relative_error(got[name], want[name]) < limit, name
    assert (got["w1"][1] == 0).all() and (got["w2"][1] == 0).all()  # the empty expert


def test_bf16_module_matches_float64() -> None:
    tensors, offsets, dy = problem(torch.float32, True, seed=1)
    module = ExpertMLP(len(EXPERT_ROWS), K, N, GPT_OSS_GEGLU, gate_up_bias=True, down_bias=True)
    with torch.no_grad():
        for param, name in ((module.gate_up_weight, "w1"), (module.down_weight, "w2"),
                            (module.gate_up_bias, "b1"), (module.down_bias, "b2")):
            param.copy_(tensors[name])
    x = tensors["x"].detach().bfloat16().requires_grad_(True)
    prob = tensors["prob"].detach().requires_grad_(True)
    y = module(x, prob, offsets)
    assert y.dtype == torch.bfloat16
    y.backward(dy.bfloat16())
    params = {"w1": module.gate_up_weight, "w2": module.down_weight,
              "b1": module.gate_up_bias, "b2": module.down_bias}
    ref = {name: t.detach().bfloat16().double().requires_grad_(True) for name, t in params.items()}
    ref_x = x.detach().double().requires_grad_(True)
    ref_prob = prob.detach().double().requires_grad_(True)
    want_y = loop_reference(ref_x, ref_prob, EXPERT_ROWS, ref["w1"], ref["w2"], ref["b1"],
                            ref["b2"], GPT_OSS_GEGLU)
    want_y.backward(dy.double())
    assert relative_error(y, want_y) < 2e-2
    assert relative_error(x.grad, ref_x.grad) < 2e-2
    assert relative_error(prob.grad, ref_prob.grad) < 2e-2
    for name, param in params.items():
        assert param.grad.dtype == torch.bfloat16
        assert relative_error(param.grad, ref[name].grad) < 2e-2, name


def test_compiles_fullgraph_forward_and_backward() -> None:
    torch._dynamo.reset()
    tensors, offsets, dy = problem(torch.bfloat16, True, seed=2)  # _grouped_mm's meta: bf16
    args = (tensors["x"], tensors["prob"], offsets, tensors["w1"], tensors["w2"],
            tensors["b1"], tensors["b2"])

    def step(*args):
        return expert_mlp(*args, activation=GPT_OSS_GEGLU)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    eager_y, compiled_y = step(*args), compiled(*args)
    assert torch.equal(eager_y, compiled_y)
    eager = gradients(eager_y, dy, tensors)
    for name, grad in gradients(compiled_y, dy, tensors).items():
        assert torch.equal(grad, eager[name]), name


@pytest.mark.parametrize(
    "change, message",
    [
        ({"prob": torch.zeros(1024, dtype=torch.float64)}, "prob: expected torch.float32"),
        ({"prob": torch.zeros(10)}, r"prob: expected shape \(1024,\)"),
        ({"w2": torch.zeros(4, N + 32, K)}, "down_weight: expected shape"),
        ({"b1": torch.zeros(4, N)}, "gate_up_bias: expected shape"),
        ({"offsets": torch.zeros(4, dtype=torch.int64)}, "padded_offsets: expected torch.int32"),
    ],
)
def test_bad_input_names_the_argument(change: dict, message: str) -> None:
    tensors, offsets, _ = problem(torch.float32, True)
    values = {**{name: t.detach() for name, t in tensors.items()}, "offsets": offsets, **change}
    with pytest.raises(ValueError, match=message):
        expert_mlp(values["x"], values["prob"], values["offsets"], values["w1"], values["w2"],
                   values["b1"], values["b2"])


def test_module_refuses_an_intermediate_size_off_the_blocks() -> None:
    with pytest.raises(ValueError, match="intermediate_size: must be a multiple of 32"):
        ExpertMLP(2, 64, 48)
