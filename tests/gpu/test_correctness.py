"""The op against the float64 reference over the shipped matrix, and the API's behaviour.

Every case: fresh random inputs (seed in the report header), uneven experts (multiples of
256, some empty), rows past valid_m, alpha/beta/prob far from 1, C on the activations'
branch points, dprob and dbias accumulating onto non-zero contents, D poisoned with NaN,
and every output element checked (checks.py gives the tolerances). Discrete weights: each
expert's matrix its own allocation next to a NaN decoy (inputs.py), the reference computed
from those matrices.
"""

from __future__ import annotations

from dataclasses import replace

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
from dispatch_rules import rules_taken, shape_inside  # noqa: E402
from dglu.selection import arch_for_capability  # noqa: E402
from harness import (  # noqa: E402
    Case,
    case_inputs,
    class_op,
    execute,
    execute_arguments,
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
DISCRETE_K = Config("dswiglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major="k")
DISCRETE_N = Config("dgeglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major="n")
DYNAMIC = Config("dswiglu", BF16, BF16, True, WIDE, scheduler="dynamic")
CLUSTER = Config("dswiglu", BF16, BF16, True, WIDE, cluster=(2, 1))
EDGE_CONFIGS = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dgeglu_dsv4", BF16, BF16, True, WIDE),
    Config("dsituglu", BF16, BF16, False, WIDE),
    Config("dgeglu", FP16, FP16, True, WIDE),
    Config("dswiglu", FP32, FP32, True, NARROW),
    Config("dgeglu", BF16, FP32, False, NARROW),
    DISCRETE_K,
    DISCRETE_N,
    DYNAMIC,
    CLUSTER,
]
# One shipped config per call that leaves the tile open: the one such a call reaches.
BY_CALL: dict[Config, Config] = {}
for _config in SHIPPED:
    BY_CALL.setdefault(replace(_config, tile=None), _config)


def test_shipped_variants_are_the_tested_matrix() -> None:
    arch = arch_for_capability(torch.cuda.get_device_capability())
    installed = {installed_key_fields(v.key) for v in installed_variants() if v.key.arch == arch}
    assert installed - {None} == {key_fields(config) for config in SHIPPED}


@pytest.mark.parametrize("config", SHIPPED, ids=str)
def test_each_config_selects_its_variant(config: Config, seed: int) -> None:
    """The arguments of a config (its tile given) select exactly its shipped variant."""
    x = case_inputs(Case(config, UNEVEN_96, seed))
    samples = (poisoned_d(UNEVEN_96.m, UNEVEN_96.n, config.d_dtype), initial_dprob(UNEVEN_96.m, 1))
    dbias = initial_dbias(UNEVEN_96.l, UNEVEN_96.n, 1) if config.dbias else None
    op = class_op(config, x, *samples, dbias, config.tile)
    (variant,) = [v for v in installed_variants() if v.name == op.variant_name]
    assert installed_key_fields(variant.key) == key_fields(config)


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
    (variant,) = [v for v in installed_variants() if v.name == op.variant_name]
    key = variant.key
    assert (key.tile_m, key.tile_n, key.cluster_m, key.cluster_n, key.scheduler) == (128, 128, 1, 1, "static")


@pytest.mark.parametrize("config", [SHIPPED[0], replace(SHIPPED[0], deterministic=True)], ids=str)
def test_the_dispatch_table_chooses_the_launch_shape_of_each_problem_class(config: Config, seed: int) -> None:
    """A call that leaves tile and cluster open runs the variant its problem's dispatch rule
    chooses (dglu.contract.dispatch), deterministic or not, and its every output element is
    right."""
    rules = rules_taken(lambda variant: variant.key.ab_dtype == "bf16")
    if not rules:
        pytest.skip("the installed variants ship no dispatch rules a BF16 call takes on this device")
    for rule in rules:
        shape = shape_inside(rule)
        x = case_inputs(Case(config, shape, seed))
        samples = (poisoned_d(shape.m, shape.n, BF16), initial_dprob(shape.m, 1), initial_dbias(shape.l, shape.n, 1))
        op = class_op(config, x, *samples)
        (variant,) = [v for v in installed_variants() if v.name == op.variant_name]
        assert {field: getattr(variant.key, field) for field, _ in rule.choose} == dict(rule.choose), shape
        run_case(Case(config, shape, seed, pass_tile=False))


@pytest.mark.parametrize(
    "config", [SHIPPED[0], Config("dgeglu", FP32, FP32, True, NARROW), DISCRETE_N, DYNAMIC], ids=str
)
@pytest.mark.parametrize("api", ["class", "wrapper"])
def test_no_rows_at_all(api: str, config: Config, seed: int) -> None:
    """M = 0: nothing to launch; dprob and dbias keep their contents."""
    run_case(Case(config, Shape(n=96, k=64, expert_rows=(0, 0, 0)), seed, api=api))


@pytest.mark.parametrize(
    "config",
    [SHIPPED[0], Config("dswiglu", FP32, BF16, True, NARROW), DISCRETE_K, DYNAMIC, CLUSTER],
    ids=str,
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


@pytest.mark.parametrize(
    "config", [Config("dgeglu", FP16, FP16, True, WIDE), DISCRETE_N, DYNAMIC, CLUSTER], ids=str
)
def test_repeated_calls_accumulate(config: Config, seed: int) -> None:
    """Two executions add twice into dprob and dbias and rewrite the same D (each call
    builds its own expert descriptors and starts its own tile counter from zero)."""
    case = Case(config, UNEVEN_96, seed)
    x = case_inputs(case)
    d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, config.d_dtype)
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


@pytest.mark.parametrize("config", [Config("dswiglu", BF16, BF16, True, WIDE), DISCRETE_N, DYNAMIC], ids=str)
def test_calls_of_one_signature_at_new_addresses_use_their_own_tensors(config: Config, seed: int) -> None:
    """Calls of one shape, strides and dtypes whose tensors are elsewhere each time (the
    earlier ones still held): the class API's and the wrapper's launches, derived from the
    last call's with only the addresses patched (dglu.bound), read and write the new
    tensors: every output element checked against its own inputs' reference."""
    held = []
    op = None
    for number in range(3):
        case = Case(config, UNEVEN_96, seed + number)
        x = case_inputs(case)
        d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, config.d_dtype)
        dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
        dbias = torch.zeros(UNEVEN_96.l, 2 * UNEVEN_96.n, 1, dtype=torch.bfloat16, device="cuda")
        op = op or class_op(config, x, d_row, dprob, dbias)
        execute(op, x, d_row, dprob, dbias)
        wrapper_dprob = torch.zeros_like(dprob)
        out = run_wrapper(config, x, wrapper_dprob)
        torch.cuda.synchronize()
        expected = expected_for(config, UNEVEN_96, x)
        for name, (d, p, b) in {"execute": (d_row, dprob, dbias), "wrapper": (
                out["d_row_tensor"], wrapper_dprob, out["dbias_tensor"])}.items():
            where = f"{case.describe()}, {name}, call {number + 1}"
            check_d(d, expected, where)
            check_dprob(p, torch.zeros_like(p), expected, UNEVEN_96.n, where)
            check_dbias(b, torch.zeros_like(b), d, UNEVEN_96.ends, where)
        held.append((x, d_row, dprob, dbias, out))
    assert len({entry[0].a.data_ptr() for entry in held}) == 3


@pytest.mark.parametrize(
    "config", [Config("dswiglu", BF16, FP32, True, NARROW), DISCRETE_K, DYNAMIC], ids=str
)
@pytest.mark.parametrize("kind", ["torch", "int", "CUstream"])
def test_current_stream_kinds(kind: str, config: Config, seed: int) -> None:
    """The op runs on the given stream, its workspaces zeroed there: results are complete
    once that stream is synced."""
    from cuda.bindings import driver

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


def _zeroed_outputs(config: Config, shape: Shape):
    """D_row poisoned with NaN, dprob and dbias zeroed, for ``config`` on ``shape``."""
    d_row = poisoned_d(shape.m, shape.n, config.d_dtype)
    dprob = torch.zeros(shape.m, 1, 1, device="cuda")
    dbias = torch.zeros(shape.l, 2 * shape.n, 1, dtype=torch.bfloat16, device="cuda")
    return d_row, dprob, dbias


def _captured(op, x, d_row, dprob, dbias) -> torch.cuda.CUDAGraph:
    """A graph of one execute(), after a warm-up outside it (loads, encodes); the outputs
    are reset to NaN / zero afterwards."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        execute(op, x, d_row, dprob, dbias)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        execute(op, x, d_row, dprob, dbias)
    _reset(d_row, dprob, dbias)
    return graph


def _reset(d_row, dprob, dbias) -> None:
    d_row.fill_(float("nan"))
    dprob.zero_()
    dbias.zero_()


def _check_all(config: Config, case: Case, x, d_row, dprob, dbias) -> None:
    """D_row, dprob and dbias (accumulated from zero) against the reference of ``x``."""
    shape = case.shape
    expected = expected_for(config, shape, x)
    check_d(d_row, expected, case.describe())
    check_dprob(dprob, torch.zeros_like(dprob), expected, shape.n, case.describe())
    check_dbias(dbias, torch.zeros_like(dbias), d_row, shape.ends, case.describe())


@pytest.mark.parametrize(
    "config", [Config("dgeglu_dsv4", BF16, BF16, True, WIDE), DYNAMIC, CLUSTER], ids=str
)
def test_cuda_graph_capture_and_replay(config: Config, seed: int) -> None:
    """execute() can be captured (padded_offsets is not read back then) and replayed twice
    (the tile counter is zeroed inside the graph)."""
    case = Case(config, UNEVEN_96, seed)
    x = case_inputs(case)
    outputs = _zeroed_outputs(config, UNEVEN_96)
    graph = _captured(class_op(config, x, *outputs), x, *outputs)
    for _ in range(2):
        _reset(*outputs)
        graph.replay()
        torch.cuda.synchronize()
        _check_all(config, case, x, *outputs)


@pytest.mark.parametrize("config", [DISCRETE_K, DISCRETE_N], ids=str)
def test_cuda_graph_replay_reads_new_values_of_the_same_experts(config: Config, seed: int) -> None:
    """A captured discrete call, replayed after new values were written into the same
    expert matrices, computes with the new values: b_ptrs and the matrices are read on the
    device at each replay, nothing of them is baked in at capture."""
    case = Case(config, UNEVEN_96, seed)
    x = case_inputs(case)
    outputs = _zeroed_outputs(config, UNEVEN_96)
    graph = _captured(class_op(config, x, *outputs), x, *outputs)
    graph.replay()
    torch.cuda.synchronize()
    _check_all(config, case, x, *outputs)

    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    for matrix in x.experts.matrices:
        values = torch.randn(matrix.shape, generator=gen, device="cuda") / UNEVEN_96.k**0.5
        matrix.copy_(values)
    renewed = replace(x, b=x.experts.stacked())
    assert not torch.equal(renewed.b, x.b)
    _reset(*outputs)
    graph.replay()
    torch.cuda.synchronize()
    _check_all(config, case, renewed, *outputs)


def test_execute_refuses_a_d_row_of_another_dtype(seed: int) -> None:
    config = Config("dswiglu", FP32, FP32, False, NARROW)
    x = case_inputs(Case(config, UNEVEN_96, seed))
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    op = class_op(config, x, poisoned_d(UNEVEN_96.m, UNEVEN_96.n, FP32), dprob, None)
    d_row = poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16)
    with pytest.raises(ValueError, match=r"^d_row_tensor: dtype torch\.bfloat16 is not accepted; expected one of torch\.float32 \(variant sm90a_bf16_fp32_fp32_"):
        execute(op, x, d_row, dprob, None)
    check_untouched("d_row", d_row, poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16), f"seed {seed}")
    assert not dprob.any()


def test_bad_offsets_are_refused_before_launch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With DGLU_CHECK_OFFSETS=1 (off by default: test_concurrency.py)."""
    monkeypatch.setenv("DGLU_CHECK_OFFSETS", "1")
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
        {"tile": WIDE},
        ["c_dtype=fp32 (from c_tensor)", "tile_n=128 (from mma_tiler_mn)", "--tile 128x128"],
    ),
    "discrete-dsituglu": (
        Config("dsituglu", BF16, BF16, True, WIDE, weight_mode="discrete"),
        {},
        [
            "weight_mode=discrete (from b_tensor or b_ptrs)",
            "--act dsituglu",
            "--weight-mode discrete",
        ],
    ),
    "dynamic-2x1-cluster": (
        Config("dswiglu", BF16, BF16, True, WIDE, scheduler="dynamic", cluster=(2, 1)),
        {},
        ["cluster_m=2 (from cluster_shape_mn)", "scheduler=dynamic (from use_dynamic_sched)"],
    ),
}


@pytest.mark.parametrize("name", list(MISSING))
def test_missing_variant_says_how_to_build_it(name: str, seed: int) -> None:
    config, changes, fragments = MISSING[name]
    x = case_inputs(Case(config, UNEVEN_96, seed))
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    with pytest.raises(dglu.VariantNotFoundError) as error:
        run_wrapper(config, x, dprob, **changes)
    message = str(error.value)
    assert "nearest available variants" in message and "dglu-build add" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message}"
    assert not dprob.any()


def test_b_ptrs_off_the_device_is_refused_before_launch(seed: int) -> None:
    x = case_inputs(Case(DISCRETE_K, UNEVEN_96, seed))
    dprob = torch.zeros(UNEVEN_96.m, 1, 1, device="cuda")
    on_host = replace(x, experts=replace(x.experts, b_ptrs=x.experts.b_ptrs.cpu()))
    with pytest.raises(ValueError, match="^b_ptrs: on cpu, but a_tensor is on cuda:0"):
        run_wrapper(DISCRETE_K, on_host, dprob)
    assert not dprob.any()


def test_execute_takes_b_ptrs_of_the_experts_given_at_construction(seed: int) -> None:
    """A discrete op refuses dense weights and b_ptrs of another number of experts."""
    x = case_inputs(Case(DISCRETE_N, UNEVEN_96, seed))
    outputs = _zeroed_outputs(DISCRETE_N, UNEVEN_96)
    op = class_op(DISCRETE_N, x, *outputs)
    with pytest.raises(ValueError, match="^b_tensor: this op was built for discrete weights"):
        op.execute(**execute_arguments(x, *outputs), b_tensor=x.b)
    with pytest.raises(ValueError, match=r"^b_ptrs: shape \(4,\) does not match \(L,\) = \(5,\)"):
        op.execute(**execute_arguments(x, *outputs), b_ptrs=x.experts.b_ptrs[:4])
    check_untouched("d_row", outputs[0], poisoned_d(UNEVEN_96.m, UNEVEN_96.n, BF16), "refused")
    assert not outputs[1].any() and not outputs[2].any()
