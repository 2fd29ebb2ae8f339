"""The op against the float64 reference over the shipped matrix, and the API's behaviour.

Every case: fresh random inputs (seed in the report header), uneven experts (multiples of
256, some empty), rows past valid_m, alpha/beta/prob far from 1, C on the activations'
branch points, dprob and dbias accumulating onto non-zero contents, D poisoned with NaN,
and every output element checked (checks.py gives the tolerances).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import dglu  # noqa: E402
from checks import check_d, check_dbias, check_dprob, check_untouched  # noqa: E402
from configs import (  # noqa: E402
    BF16,
    FP16,
    FP32,
    NARROW,
    SHIPPED,
    WIDE,
    Config,
    installed_key_fields,
    key_fields,
)
from dglu.manifest import installed_variants  # noqa: E402
from dglu.selection import arch_for_capability  # noqa: E402
from harness import (  # noqa: E402
    Case,
    case_inputs,
    class_op,
    execute,
    expected_for,
    run_case,
    run_wrapper,
)
from inputs import Shape, initial_dbias, initial_dprob, poisoned_d  # noqa: E402

pytestmark = pytest.mark.gpu

# N a multiple of 32 but not of 64 (a half-filled last n-tile), K not a multiple of 64.
UNEVEN = Shape(n=160, k=200, expert_rows=(256, 0, 768, 256), extra_rows=64)
UNEVEN_96 = Shape(n=96, k=200, expert_rows=(256, 0, 512, 768, 256), extra_rows=100)
EDGE_SHAPES = {
    "L1": (Shape(n=256, k=256, expert_rows=(1024,)), False),
    "L1024": (
        Shape(
            n=32,
            k=64,
            expert_rows=tuple(256 if g in (0, 511, 1023) else 0 for g in range(1024)),
            extra_rows=5,
        ),
        False,
    ),
    "smallest-N-K": (Shape(n=32, k=8, expert_rows=(256, 256, 0, 256), extra_rows=1), False),
    "large-K": (Shape(n=96, k=16384, expert_rows=(256, 0, 256), extra_rows=3), True),
    "large-N": (Shape(n=16384, k=200, expert_rows=(256,), extra_rows=7), False),
}
EDGE_CONFIGS = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dgeglu_dsv4", BF16, BF16, True, WIDE),
    Config("dsituglu", BF16, BF16, False, WIDE),
    Config("dgeglu", FP16, FP16, True, WIDE),
    Config("dswiglu", FP32, FP32, True, NARROW),
    Config("dgeglu", BF16, FP32, False, NARROW),
]
# One shipped config per (activation, dtypes, dbias): what a caller reaches without a tile.
BY_CALL: dict[tuple, Config] = {}
for _config in SHIPPED:
    BY_CALL.setdefault(
        (_config.activation, _config.c_dtype, _config.d_dtype, _config.dbias), _config
    )


def test_shipped_variants_are_the_tested_matrix() -> None:
    arch = arch_for_capability(torch.cuda.get_device_capability())
    installed = {installed_key_fields(v.key) for v in installed_variants() if v.key.arch == arch}
    assert installed - {None} == {key_fields(config) for config in SHIPPED}


@pytest.mark.parametrize("config", SHIPPED, ids=str)
def test_every_shipped_variant(config: Config, seed: int) -> None:
    """Each shipped cubin, chosen by its tile, with partial N and M tiles and an empty expert."""
    run_case(Case(config, UNEVEN, seed))


@pytest.mark.parametrize("config", list(BY_CALL.values()), ids=str)
def test_wrapper_default_tile(config: Config, seed: int) -> None:
    """The wrapper allocates D_row in d_dtype (and dbias), with the tile left to selection."""
    run_case(Case(config, UNEVEN_96, seed, api="wrapper", pass_tile=False))


@pytest.mark.parametrize("config", EDGE_CONFIGS, ids=str)
@pytest.mark.parametrize("shape_name", list(EDGE_SHAPES))
def test_edge_shapes(shape_name: str, config: Config, seed: int) -> None:
    shape, exact_gemm = EDGE_SHAPES[shape_name]
    run_case(Case(config, shape, seed, exact_gemm=exact_gemm))


def test_an_open_tile_selects_the_wider_one() -> None:
    x = case_inputs(Case(SHIPPED[0], UNEVEN, 1))
    config = Config("dswiglu", BF16, BF16, True, WIDE)
    samples = (poisoned_d(UNEVEN.m, UNEVEN.n, BF16), initial_dprob(UNEVEN.m, 1))
    op = class_op(config, x, *samples, initial_dbias(UNEVEN.l, UNEVEN.n, 1))
    assert op.variant_name.endswith("_128x128_1x1_static")


@pytest.mark.parametrize(
    "config", [SHIPPED[0], Config("dgeglu", FP32, FP32, True, NARROW)], ids=str
)
@pytest.mark.parametrize("api", ["class", "wrapper"])
def test_no_rows_at_all(api: str, config: Config, seed: int) -> None:
    """M = 0: nothing to launch for the main kernel; dprob and dbias keep their contents."""
    run_case(Case(config, Shape(n=96, k=64, expert_rows=(0, 0, 0)), seed, api=api))


@pytest.mark.parametrize(
    "config", [SHIPPED[0], Config("dswiglu", FP32, BF16, True, NARROW)], ids=str
)
def test_rows_owned_by_no_expert_are_untouched(config: Config, seed: int) -> None:
    """valid_m = 0 < M: every expert empty, so D, dprob and dbias keep their contents."""
    run_case(Case(config, Shape(n=96, k=64, expert_rows=(0, 0), extra_rows=300), seed))


def test_execute_serves_other_sizes_than_the_samples(seed: int) -> None:
    """One compiled op, executed on a problem with other M, N, K and L than its samples."""
    config = Config("dsituglu", BF16, BF16, True, WIDE)
    samples = case_inputs(Case(config, UNEVEN_96, seed))
    op = class_op(
        config,
        samples,
        poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16),
        initial_dprob(UNEVEN_96.m, seed),
        initial_dbias(UNEVEN_96.l, UNEVEN_96.n, seed),
    )
    case = Case(config, UNEVEN, seed + 10)
    x = case_inputs(case)
    d_row, dprob = poisoned_d(UNEVEN.m, UNEVEN.n, BF16), torch.zeros(UNEVEN.m, 1, 1, device="cuda")
    dbias = torch.zeros(UNEVEN.l, 2 * UNEVEN.n, 1, dtype=torch.bfloat16, device="cuda")
    execute(op, x, d_row, dprob, dbias)
    torch.cuda.synchronize()
    expected = expected_for(config, UNEVEN, x)
    check_d(d_row, expected, case.describe())
    check_dprob(dprob, torch.zeros_like(dprob), expected, UNEVEN.n, case.describe())
    check_dbias(dbias, torch.zeros_like(dbias), d_row, UNEVEN.ends, case.describe())


def test_repeated_calls_accumulate(seed: int) -> None:
    """Two executions add twice into dprob and dbias and rewrite the same D."""
    config = Config("dgeglu", FP16, FP16, True, WIDE)
    case = Case(config, UNEVEN_96, seed)
    x = case_inputs(case)
    d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, FP16)
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    dbias = torch.zeros(UNEVEN_96.l, 2 * UNEVEN_96.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(config, x, d_row, dprob, dbias)
    execute(op, x, d_row, dprob, dbias)
    once_dprob, once_dbias = dprob.clone(), dbias.clone()
    execute(op, x, d_row, dprob, dbias)
    torch.cuda.synchronize()
    expected = expected_for(config, UNEVEN_96, x)
    check_d(d_row, expected, case.describe())
    check_dprob(dprob, once_dprob, expected, UNEVEN_96.n, case.describe())
    check_dbias(dbias, once_dbias, d_row, UNEVEN_96.ends, case.describe())


@pytest.mark.parametrize("kind", ["torch", "int", "CUstream"])
def test_current_stream_kinds(kind: str, seed: int) -> None:
    """The op runs on the given stream: results are complete once that stream is synced."""
    from cuda.bindings import driver

    config = Config("dswiglu", BF16, FP32, True, NARROW)
    case = Case(config, UNEVEN, seed, api="wrapper")
    x = case_inputs(case)
    dprob = torch.zeros(UNEVEN.m, 1, 1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    handle = {
        "torch": side,
        "int": side.cuda_stream,
        "CUstream": driver.CUstream(side.cuda_stream),
    }[kind]
    out = run_wrapper(config, x, dprob, stream=handle)
    side.synchronize()
    expected = expected_for(config, UNEVEN, x)
    d_row, dbias = out["d_row_tensor"], out["dbias_tensor"]
    check_d(d_row, expected, case.describe())
    check_dprob(dprob, torch.zeros_like(dprob), expected, UNEVEN.n, case.describe())
    check_dbias(dbias, torch.zeros_like(dbias), d_row, UNEVEN.ends, case.describe())


def test_cuda_graph_capture_and_replay(seed: int) -> None:
    """execute() can be captured (padded_offsets is not read back then) and replayed."""
    config = Config("dgeglu_dsv4", BF16, BF16, True, WIDE)
    case = Case(config, UNEVEN_96, seed)
    x = case_inputs(case)
    d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16)
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    dbias = torch.zeros(UNEVEN_96.l, 2 * UNEVEN_96.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(config, x, d_row, dprob, dbias)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        execute(op, x, d_row, dprob, dbias)  # warm-up outside the graph: loads, encodes
    torch.cuda.current_stream().wait_stream(side)
    dprob.zero_()
    dbias.zero_()
    d_row.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        execute(op, x, d_row, dprob, dbias)
    graph.replay()
    torch.cuda.synchronize()
    expected = expected_for(config, UNEVEN_96, x)
    check_d(d_row, expected, case.describe())
    check_dprob(dprob, torch.zeros_like(dprob), expected, UNEVEN_96.n, case.describe())
    check_dbias(dbias, torch.zeros_like(dbias), d_row, UNEVEN_96.ends, case.describe())


def test_execute_refuses_a_d_row_of_another_dtype(seed: int) -> None:
    config = Config("dswiglu", FP32, FP32, False, NARROW)
    x = case_inputs(Case(config, UNEVEN_96, seed))
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    op = class_op(config, x, poisoned_d(UNEVEN_96.m, UNEVEN_96.n, FP32), dprob, None)
    d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16)
    with pytest.raises(ValueError, match="^d_row_tensor: dtype bf16 differs from the fp32"):
        execute(op, x, d_row, dprob, None)
    check_untouched("d_row", d_row, poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16), f"seed {seed}")
    assert not dprob.any()


def test_bad_offsets_are_refused_before_launch(seed: int) -> None:
    x = case_inputs(Case(SHIPPED[0], UNEVEN_96, seed))
    bad = x.padded_offsets.clone()
    bad[1] = bad[1] + 128
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    with pytest.raises(ValueError, match="^padded_offsets: entry 1 = .* is not a multiple of 256"):
        dglu.grouped_gemm_dglu_wrapper_sm90(
            a_tensor=x.a,
            c_tensor=x.c,
            padded_offsets=bad,
            alpha_tensor=x.alpha,
            beta_tensor=x.beta,
            prob_tensor=x.prob,
            dprob_tensor=dprob,
            b_tensor=x.b,
        )
    assert not dprob.any()


MISSING = {
    "dgeglu-constants": (
        Config("dgeglu", BF16, BF16, False, WIDE),
        {"geglu_alpha": 1.25, "linear_offset": 0.0},
        ["--act-param geglu_alpha=1.25", "--act-param linear_offset=0.0"],
    ),
    "dsituglu-betas": (
        Config("dsituglu", BF16, BF16, True, WIDE),
        {"situ_beta1": 2.0},
        ["--act-param situ_beta1=2.0", "(from situ_beta1, situ_beta2)"],
    ),
    "fp32-at-128x128": (
        Config("dswiglu", FP32, FP32, True, WIDE),
        {"mma_tiler_mn": WIDE},
        ["c_dtype=fp32 (from c_tensor)", "tile_n=128 (from mma_tiler_mn)", "--tile 128x128"],
    ),
}


@pytest.mark.parametrize("name", list(MISSING))
def test_missing_variant_says_how_to_build_it(name: str, seed: int) -> None:
    config, changes, fragments = MISSING[name]
    x = case_inputs(Case(config, UNEVEN_96, seed))
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    arguments = {**config.act_kwargs(), **changes}
    with pytest.raises(dglu.VariantNotFoundError) as error:
        dglu.grouped_gemm_dglu_wrapper_sm90(
            a_tensor=x.a,
            c_tensor=x.c,
            padded_offsets=x.padded_offsets,
            alpha_tensor=x.alpha,
            beta_tensor=x.beta,
            prob_tensor=x.prob,
            dprob_tensor=dprob,
            b_tensor=x.b,
            d_dtype=config.d_dtype,
            generate_dbias=config.dbias,
            **arguments,
        )
    message = str(error.value)
    assert "nearest available variants" in message and "dglu-build add" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message}"
    assert not dprob.any()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"use_dynamic_sched": True}, "^use_dynamic_sched: True is not available yet"),
        ({"cluster_shape_mn": (2, 1)}, r"^cluster_shape_mn: \(2, 1\) is not available yet"),
        (
            {"b_tensor": None, "b_ptrs": "pointers", "n": UNEVEN_96.n},
            "^b_ptrs, n: discrete",
        ),
    ],
    ids=["dynamic-scheduler", "cluster-2x1", "discrete-weights"],
)
def test_features_not_available_yet_are_refused_by_name(changes, message, seed: int) -> None:
    x = case_inputs(Case(SHIPPED[0], UNEVEN_96, seed))
    arguments = dict(
        a_tensor=x.a,
        c_tensor=x.c,
        padded_offsets=x.padded_offsets,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        dprob_tensor=torch.zeros(UNEVEN_96.m, 1, 1, device="cuda"),
        b_tensor=x.b,
    )
    if "b_ptrs" in changes:
        changes = {**changes, "b_ptrs": torch.zeros(UNEVEN_96.l, dtype=torch.int64, device="cuda")}
    with pytest.raises(NotImplementedError, match=message):
        dglu.grouped_gemm_dglu_wrapper_sm90(**{**arguments, **changes})
