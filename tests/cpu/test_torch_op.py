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
    from dglu.torch.op import _PARAMETERS, grouped_gemm_dglu as function

    import inspect

    defaults = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    given = {**defaults, **Activation().op_arguments(), **arguments, **options}
    return tuple(given[name] for name in _PARAMETERS)


def test_schema_declares_dprob_mutated_and_returns_new_tensors() -> None:
    schema = torch.ops.dglu.grouped_gemm_dglu.default._schema
    mutated = [arg.name for arg in schema.arguments if arg.alias_info and arg.alias_info.is_write]
    assert mutated == ["dprob_tensor"]
    assert [str(ret.type) for ret in schema.returns] == ["Tensor"] * 7
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


def test_fake_shapes_block_scaled() -> None:
    """FP8 operands through the op: D_row and D_col (M, 2N, 1) FP8, SFD_row and SFD_col
    E8M0 in the seed's permuted layout (tests/gpu/blockscaled_reference's, which the GPU
    tests hold the kernels to), dbias bf16."""
    import sys

    from torch._subclasses.fake_tensor import FakeTensorMode

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))
    import blockscaled_reference as bs

    e4m3, e8m0 = torch.float8_e4m3fn, torch.float8_e8m0fnu
    m, n, k, experts = 512, 96, 160, 3
    with FakeTensorMode() as mode:
        fake = {name: mode.from_tensor(t) for name, t in inputs().items() if name not in ("a_tensor", "b_tensor",
                                                                                       "c_tensor")}
        out = grouped_gemm_dglu(
            mode.from_tensor(torch.zeros(m, k, 1).to(e4m3)),
            mode.from_tensor(torch.zeros(m, 2 * n, 1, dtype=torch.bfloat16)),
            mode.from_tensor(torch.zeros(bs.sf_shape(m, k)).to(e8m0)),
            **{**fake, "prob_tensor": mode.from_tensor(torch.ones(m, 1, 1)),
               "dprob_tensor": mode.from_tensor(torch.zeros(m, 1, 1))},
            b_tensor=mode.from_tensor(torch.zeros(experts, n, k).to(e4m3).permute(1, 2, 0)),
            sfb_tensor=mode.from_tensor(torch.zeros(bs.sf_shape(n, k, experts)).to(e8m0)),
            norm_const_tensor=mode.from_tensor(torch.ones(1)),
            d_dtype=e4m3, sf_vec_size=32, generate_dbias=True,
        )
    for d in (out.d_row_tensor, out.d_col_tensor):
        assert (d.shape, d.stride(), d.dtype) == ((m, 2 * n, 1), (2 * n, 1, 1), e4m3)
    assert (out.sfd_row_tensor.shape, out.sfd_row_tensor.stride()) == (bs.sf_shape(m, 2 * n), bs.sf_strides(m, 2 * n))
    assert (out.sfd_col_tensor.shape, out.sfd_col_tensor.stride()) == (bs.sf_shape(2 * n, m), bs.sf_strides(2 * n, m))
    assert out.sfd_row_tensor.dtype == out.sfd_col_tensor.dtype == e8m0
    assert out.dbias_tensor.shape == (len(ENDS), 2 * n, 1) and out.amax_tensor is None


def test_deterministic_and_round_dgrad_reach_the_wrapper(monkeypatch) -> None:
    """The op hands every option to dglu.grouped_gemm_dglu by name (CUDA kernel = wrapper)."""
    import dglu as package
    from dglu.torch.op import grouped_gemm_dglu_op

    seen = {}

    def wrapper(**arguments):
        seen.update(arguments)
        return {"d_row_tensor": torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16)}

    monkeypatch.setattr(package, "grouped_gemm_dglu", wrapper)
    from dglu.torch.op import _PARAMETERS

    values = dict(zip(_PARAMETERS, op_args(inputs(), deterministic=True, round_dgrad_to_input_dtype=True)))
    grouped_gemm_dglu_op._init_fn(**values)  # the op's CUDA implementation, called directly
    assert seen["deterministic"] is True and seen["round_dgrad_to_input_dtype"] is True
    assert set(seen) == set(_PARAMETERS)


def test_the_python_entry_hands_the_op_every_parameter_in_its_order(monkeypatch) -> None:
    """grouped_gemm_dglu passes each of its parameters to torch.ops.dglu.grouped_gemm_dglu
    at its own position in _PARAMETERS (each given a distinct value here)."""
    import inspect

    from dglu.torch import op as op_module

    signature = inspect.signature(grouped_gemm_dglu)
    given = {}
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if isinstance(parameter.default, float):
            given[name] = float(index)
        elif name in ("mma_tiler_mn", "cluster_shape_mn"):
            given[name] = (index, index)
        else:
            given[name] = f"value {index}"
    seen = []

    class Ops:
        @staticmethod
        def grouped_gemm_dglu(*values):
            seen.extend(values)
            raise StopIteration

    monkeypatch.setattr(op_module.torch, "ops", type("TorchOps", (), {"dglu": Ops}))
    with pytest.raises(StopIteration):
        grouped_gemm_dglu(**given)
    expected = [list(given[n]) if isinstance(given[n], tuple) else given[n] for n in op_module._PARAMETERS]
    assert seen == expected
