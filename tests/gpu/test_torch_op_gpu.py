"""dglu.torch's custom op on the GPU: eager, torch.compile (fullgraph, reduce-overhead),
torch.cuda.graph capture and discrete weights, each against the eager wrapper and the
float64 reference."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import dglu  # noqa: E402
import dglu.torch  # noqa: E402
from dglu.torch import GPT_OSS_GEGLU, grouped_gemm_dglu, grouped_gemm_dglu_reference  # noqa: E402

pytestmark = pytest.mark.gpu

N, K = 128, 192
ENDS = (256, 256, 1024, 1280)  # expert 1 owns no rows


def inputs(seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    m, experts = ENDS[-1], len(ENDS)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device="cuda")

    return {
        "a_tensor": randn(m, K, 1).bfloat16(),
        "c_tensor": (4 * randn(m, 2 * N, 1)).bfloat16(),
        "b_tensor": randn(experts, N, K).bfloat16().permute(1, 2, 0),
        "padded_offsets": torch.tensor(ENDS, dtype=torch.int32, device="cuda"),
        "alpha_tensor": torch.tensor([0.5, 2.0, -1.5, 1.25], device="cuda"),
        "beta_tensor": torch.tensor([1.75, 0.25, -0.5, 0.625], device="cuda"),
        "prob_tensor": torch.rand(m, 1, 1, generator=g, device="cuda") - 0.25,
        "dprob_tensor": torch.zeros(m, 1, 1, device="cuda"),
    }


OPTIONS = {**GPT_OSS_GEGLU.op_arguments(), "generate_dbias": True}


def step(arguments: dict, options: dict = OPTIONS) -> tuple[torch.Tensor, ...]:
    """A function calling the op with dprob allocated inside (a training step's shape)."""
    dprob = torch.zeros_like(arguments["prob_tensor"])
    out = grouped_gemm_dglu(**{**arguments, "dprob_tensor": dprob}, **options)
    outputs = (out.d_row_tensor, out.dprob_tensor, out.dbias_tensor)
    return outputs if options["generate_dbias"] else outputs[:2]


def eager_wrapper(arguments: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dprob = torch.zeros_like(arguments["prob_tensor"])
    out = dglu.grouped_gemm_dglu(**{**arguments, "dprob_tensor": dprob}, **OPTIONS)
    return out["d_row_tensor"], out["dprob_tensor"], out["dbias_tensor"]


def assert_same(got, want) -> None:
    """D and dbias bitwise (one kernel, same inputs); dprob up to its atomic sum order."""
    assert len(got) == len(want)
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    if len(got) == 3:
        torch.testing.assert_close(got[2], want[2], rtol=1e-2, atol=1e-2)


def test_eager_matches_the_wrapper_and_the_reference(seed: int) -> None:
    arguments = inputs(seed)
    got = step(arguments)
    assert_same(got, eager_wrapper(arguments))
    d, dprob, dbias = grouped_gemm_dglu_reference(
        arguments["a_tensor"], arguments["b_tensor"], arguments["c_tensor"],
        arguments["padded_offsets"], arguments["alpha_tensor"], arguments["beta_tensor"],
        arguments["prob_tensor"], GPT_OSS_GEGLU,
    )
    torch.testing.assert_close(got[0][:, :, 0].double(), d, rtol=3e-2, atol=8e-2)
    # dprob and dbias are sums over 2N columns and up to 768 rows of fp32 terms: norm-wise
    assert relative_error(got[1].view(-1), dprob) < 1e-2
    assert relative_error(got[2][:, :, 0], dbias) < 1e-2


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm())


def op_args(arguments: dict, **options) -> tuple:
    """The op's positional arguments, in its schema order."""
    import inspect

    from dglu.torch.op import _PARAMETERS, grouped_gemm_dglu as function

    defaults = {name: p.default for name, p in inspect.signature(function).parameters.items()}
    given = {**defaults, **arguments, **options}
    return tuple(given[name] for name in _PARAMETERS)


def test_opcheck_on_cuda(seed: int) -> None:
    torch.library.opcheck(
        torch.ops.dglu.grouped_gemm_dglu.default,
        op_args(inputs(seed), **OPTIONS),
        test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"),
    )


def test_compile_fullgraph_matches_eager(seed: int) -> None:
    torch._dynamo.reset()
    arguments = inputs(seed)
    compiled = torch.compile(step, fullgraph=True)
    assert_same(compiled(arguments), step(arguments))


@pytest.mark.parametrize(
    "generate_dbias", [False, True], ids=["no-dbias", "dbias"]
)
def test_compile_reduce_overhead_runs_as_a_cuda_graph(generate_dbias: bool, seed: int) -> None:
    from torch._dynamo.utils import counters

    options = {**OPTIONS, "generate_dbias": generate_dbias}
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    arguments = inputs(seed)
    for _ in range(3):  # warm-up, record, replay
        got = [t.clone() for t in compiled(arguments, options)]
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    assert_same(got, step(arguments, options))
    fresh = inputs(seed + 1)  # new values in the same static-shaped inputs
    for name, tensor in fresh.items():
        arguments[name].copy_(tensor)
    assert_same([t.clone() for t in compiled(arguments, options)], step(fresh, options))


def test_cuda_graph_capture_and_replay(seed: int) -> None:
    static = inputs(seed)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step(static)  # warm-up: loads the variant, fills the call cache
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step(static)
    fresh = inputs(seed + 1)
    for name, tensor in fresh.items():
        static[name].copy_(tensor)
    graph.replay()
    torch.cuda.synchronize()
    assert_same(captured, step(fresh))


def test_discrete_weights_match_dense_eager_and_compiled(seed: int) -> None:
    arguments = inputs(seed)
    experts = [arguments["b_tensor"][:, :, g].contiguous() for g in range(len(ENDS))]
    b_ptrs = torch.tensor([w.data_ptr() for w in experts], dtype=torch.int64, device="cuda")
    discrete = {**{k: v for k, v in arguments.items() if k != "b_tensor"},
                "b_ptrs": b_ptrs, "n": N, "b_dtype": torch.bfloat16}
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    want = step(arguments)
    assert_same(step(discrete), want)
    assert_same(compiled(discrete), want)


def test_deterministic_through_the_op_is_bitwise_reproducible(seed: int) -> None:
    """deterministic=True through torch.ops.dglu: D, dprob and dbias bitwise equal across
    runs and schedulers (the _det variants)."""
    from dglu.errors import VariantNotFoundError

    arguments = inputs(seed)
    runs = []
    for dynamic in (False, True, False):
        try:
            runs.append(step(arguments, {**OPTIONS, "deterministic": True, "use_dynamic_sched": dynamic}))
        except VariantNotFoundError as exc:
            pytest.skip(f"no deterministic variant installed: {exc}")
    for got in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(got, runs[0]))
