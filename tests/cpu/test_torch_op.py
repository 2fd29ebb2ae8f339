"""dglu.torch.op: the custom op's schema, fake (meta) shapes, and tracing without CUDA.

The op's CUDA kernel is dglu's; here the CPU kernel is the float reference
(``use_reference_on_cpu``), so that the dispatcher, the fake implementation, opcheck and
torch.compile run on the CPU. The kernel itself is tested on the GPU (tests/gpu).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import dglu.torch  # noqa: E402
from dglu.torch import (  # noqa: E402
    DEEPSEEK_V4_CLAMPED_SWIGLU,
    GPT_OSS_GEGLU,
    SITUGLU,
    SWIGLU,
    Activation,
    grouped_gemm_dglu,
    grouped_gemm_dglu_reference,
)
from dglu.torch.reference import glu_derivatives  # noqa: E402
from dglu.torch.layouts import merge_blocked  # noqa: E402

dglu.torch.use_reference_on_cpu()

M, N, K = 768, 64, 48
ENDS = (256, 256, 768)  # expert 1 owns no rows
RUNTIME = Path(dglu.torch.__file__).resolve().parents[2]


def inputs(seed: int = 0, experts: int = len(ENDS)) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "a_tensor": torch.randn(M, K, 1, generator=g).bfloat16(),
        "c_tensor": (3 * torch.randn(M, 2 * N, 1, generator=g)).bfloat16(),
        "b_tensor": torch.randn(experts, N, K, generator=g).bfloat16().permute(1, 2, 0),
        "padded_offsets": torch.tensor(ENDS, dtype=torch.int32),
        "alpha_tensor": torch.tensor([0.5, 2.0, -1.5]),
        "beta_tensor": torch.tensor([1.75, 0.25, -0.5]),  # 7 / beta exact: X meets the clamp bounds
        "prob_tensor": torch.rand(M, 1, 1, generator=g) - 0.25,
        "dprob_tensor": torch.zeros(M, 1, 1),
    }


def op_args(arguments: dict, **options) -> tuple:
    """The op's positional arguments (its schema order) for ``arguments`` and options."""
    config = {**Activation().op_arguments(), "generate_dbias": False,
              "use_dynamic_sched": False, **options}
    return (
        arguments["a_tensor"], arguments["c_tensor"], arguments["padded_offsets"],
        arguments["alpha_tensor"], arguments["beta_tensor"], arguments["prob_tensor"],
        arguments["dprob_tensor"], arguments.get("b_tensor"), arguments.get("b_ptrs"),
        arguments.get("n"), arguments.get("b_dtype"), "k", config["act_func"],
        config["geglu_alpha"], config["glu_clamp_max"], config["glu_clamp_min"],
        config["linear_offset"], config["situ_beta1"], config["situ_beta2"],
        config["generate_dbias"], config["use_dynamic_sched"], None, None,
        config.get("d_dtype"), config.get("act_out", False),
    )


def test_schema_declares_dprob_mutated_and_returns_new_tensors() -> None:
    schema = torch.ops.dglu.grouped_gemm_dglu.default._schema
    mutated = [arg.name for arg in schema.arguments if arg.alias_info and arg.alias_info.is_write]
    assert mutated == ["dprob_tensor"]
    assert [str(ret.type) for ret in schema.returns] == ["Tensor", "Tensor", "Tensor"]
    assert all(ret.alias_info is None for ret in schema.returns)


@pytest.mark.parametrize(
    "options, d_dtype, with_dbias",
    [
        ({}, torch.bfloat16, False),
        ({"generate_dbias": True}, torch.bfloat16, True),
        ({"d_dtype": torch.float32}, torch.float32, False),
    ],
)
def test_fake_shapes_dense(options: dict, d_dtype: torch.dtype, with_dbias: bool) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = {name: mode.from_tensor(t) for name, t in inputs().items()}
        out = grouped_gemm_dglu(**fake, **options)
    assert out.d_row_tensor.shape == (M, 2 * N, 1)
    assert out.d_row_tensor.dtype == d_dtype
    assert out.d_row_tensor.stride() == (2 * N, 1, 1)
    assert out.dprob_tensor is fake["dprob_tensor"]
    assert out.d_col_tensor is None and out.amax_tensor is None
    if with_dbias:
        assert out.dbias_tensor.shape == (len(ENDS), 2 * N, 1)
        assert out.dbias_tensor.dtype == torch.bfloat16
    else:
        assert out.dbias_tensor is None


def test_fake_shapes_discrete_weights() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    arguments = inputs()
    del arguments["b_tensor"]
    with FakeTensorMode() as mode:
        fake = {name: mode.from_tensor(t) for name, t in arguments.items()}
        b_ptrs = mode.from_tensor(torch.zeros(len(ENDS), dtype=torch.int64))
        out = grouped_gemm_dglu(
            **fake, b_ptrs=b_ptrs, n=N, b_dtype=torch.bfloat16, act_func="dgeglu",
            generate_dbias=True,
        )
    assert out.d_row_tensor.shape == (M, 2 * N, 1)
    assert out.dbias_tensor.shape == (len(ENDS), 2 * N, 1)


def test_returns_in_the_seed_order() -> None:
    out = grouped_gemm_dglu(**inputs(), generate_dbias=True)
    d_row, d_col, dprob, dbias, amax, sfd_row, sfd_col = out
    assert d_row is out.d_row_tensor and dbias is out.dbias_tensor
    assert (d_col, amax, sfd_row, sfd_col) == (None, None, None, None)


@pytest.mark.parametrize("generate_dbias", [False, True])
def test_opcheck(generate_dbias: bool) -> None:
    torch.library.opcheck(
        torch.ops.dglu.grouped_gemm_dglu.default,
        op_args(inputs(), generate_dbias=generate_dbias),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"),
    )


def step(arguments: dict) -> tuple:
    """A function calling the op, as a training step would: dprob allocated inside."""
    dprob = torch.zeros_like(arguments["dprob_tensor"])
    out = grouped_gemm_dglu(
        **{**arguments, "dprob_tensor": dprob}, act_func="dgeglu", generate_dbias=True
    )
    return out.d_row_tensor.float() * 2, out.dprob_tensor, out.dbias_tensor


def test_compiles_fullgraph_and_matches_eager() -> None:
    torch._dynamo.reset()
    arguments = inputs(1)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for want, got in zip(step(arguments), compiled(arguments)):
        assert torch.equal(want, got)


@pytest.mark.parametrize("activation", [SWIGLU, GPT_OSS_GEGLU, DEEPSEEK_V4_CLAMPED_SWIGLU, SITUGLU])
def test_reference_derivatives_are_autograd_of_the_forward(activation: Activation) -> None:
    """glu_derivatives (the reference's D) against autograd of Activation.forward, with
    values on and around the dgeglu clamp bounds."""
    gate = torch.cat((12 * torch.rand(4000, dtype=torch.float64) - 6,
                      torch.tensor([7.0, -7.0, 10.0, -10.0, 7.5, -7.5, 0.0], dtype=torch.float64)))
    gate = (gate * 1.5).requires_grad_(True)
    up = gate.detach().flip(0).requires_grad_(True)
    d_gate, d_up = torch.autograd.grad(activation.forward(gate, up).sum(), (gate, up))
    want_gate, want_up = glu_derivatives(activation, gate.detach(), up.detach())
    assert torch.allclose(want_gate, d_gate, rtol=1e-12, atol=1e-12)
    assert torch.allclose(want_up, d_up, rtol=1e-12, atol=1e-12)


def test_reference_matches_the_contract_dgeglu_formulas() -> None:
    """The reference op against op_contract.md's dgeglu formulas, per expert, with X = beta
    * C on and around the clamp bounds, alpha, beta and prob far from 1 and an empty expert."""
    arguments = inputs(2)
    c = arguments["c_tensor"]
    start = 0
    for g, end in enumerate(ENDS):
        rows, beta = c[start:end].view(-1), arguments["beta_tensor"][g].item()
        rows[::7], rows[1::7], rows[2::11] = 7.0 / beta, -7.0 / beta, 7.0625 / beta  # 7.0625: above 7
        start = end
    d, dprob, dbias = grouped_gemm_dglu_reference(
        arguments["a_tensor"], arguments["b_tensor"], c, arguments["padded_offsets"],
        arguments["alpha_tensor"], arguments["beta_tensor"], arguments["prob_tensor"],
        GPT_OSS_GEGLU,
    )
    a2, c2 = arguments["a_tensor"][:, :, 0].double(), c[:, :, 0].double()
    p = arguments["prob_tensor"].reshape(-1, 1).double()
    start = 0
    for g, end in enumerate(ENDS):
        rows, count = slice(start, end), end - start
        if count == 0:
            continue
        r = arguments["alpha_tensor"][g].item() ** 2 * (
            a2[rows] @ arguments["b_tensor"][:, :, g].double().T
        )
        blocks = c2[rows].reshape(count, -1, 2, 32) * arguments["beta_tensor"][g].item()
        gate, x = blocks[:, :, 0].reshape(count, N), blocks[:, :, 1].reshape(count, N)
        assert bool((gate == 7).any()) and bool((x == -7).any())
        gc, xc = gate.clamp(max=7), x.clamp(-7, 7)
        s = torch.sigmoid(1.702 * gc)
        d_gate = r * p[rows] * (xc + 1) * s * (1 + 1.702 * gc * (1 - s)) * (gate <= 7)
        d_input = r * p[rows] * gc * s * ((x >= -7) & (x <= 7))
        assert torch.allclose(d[rows], merge_blocked(d_gate, d_input), rtol=1e-12, atol=1e-12)
        assert torch.allclose(dprob[rows], (r * gc * s * (xc + 1)).sum(1), rtol=1e-12)
        assert torch.allclose(dbias[g], d[rows].sum(0))
        start = end


def test_importing_dglu_does_not_import_dglu_torch() -> None:
    code = "import sys, dglu; print(sorted(m for m in sys.modules if m.startswith(('dglu.torch', 'torch'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(RUNTIME)},
    )
    assert out.stdout.strip() == "[]"
