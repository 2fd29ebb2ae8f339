"""The op against the float32 reference, through the wrapper and the class API.

Every case: fresh random inputs (seed in the report header), uneven experts (multiples of
256, one empty), rows past valid_m, alpha/beta/prob far from 1, dprob and dbias
accumulating onto non-zero contents, D poisoned with NaN and every element checked.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import dglu  # noqa: E402
from checks import check_d, check_dbias, check_dprob, check_untouched  # noqa: E402
from dglu.manifest import installed_variants  # noqa: E402
from dglu.selection import arch_for_capability  # noqa: E402
from inputs import (  # noqa: E402
    Inputs,
    Shape,
    initial_dbias,
    initial_dprob,
    make_inputs,
    poisoned_d,
)
from reference import dglu_backward  # noqa: E402

pytestmark = pytest.mark.gpu

GEGLU_DEFAULTS = {
    "geglu_alpha": 1.702,
    "glu_clamp_max": 7.0,
    "glu_clamp_min": -7.0,
    "linear_offset": 1.0,
}
SHAPES = [
    Shape(n=96, k=200, expert_rows=(256, 0, 512, 768, 256), extra_rows=100),
    Shape(n=160, k=64, expert_rows=(512, 256, 0, 1280), extra_rows=37),
]


def act_params(act_func: str) -> dict[str, float]:
    return dict(GEGLU_DEFAULTS) if act_func == "dgeglu" else {}


def run_wrapper(x: Inputs, act_func: str, dbias: bool, dprob, tile=None, stream=None):
    """The wrapper's outputs; D_row and dbias are allocated by the wrapper."""
    return dglu.grouped_gemm_dglu_wrapper_sm90(
        a_tensor=x.a,
        c_tensor=x.c,
        padded_offsets=x.padded_offsets,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        dprob_tensor=dprob,
        b_tensor=x.b,
        act_func=act_func,
        generate_dbias=dbias,
        mma_tiler_mn=tile,
        current_stream=stream,
    )


def class_op(samples: Inputs, d_row, dprob, dbias, act_func: str, tile=None, **config):
    op = dglu.GroupedGemmDgluSm90(
        sample_a=samples.a,
        sample_c=samples.c,
        sample_d_row=d_row,
        sample_padded_offsets=samples.padded_offsets,
        sample_alpha=samples.alpha,
        sample_beta=samples.beta,
        sample_prob=samples.prob,
        sample_dprob=dprob,
        sample_dbias=dbias,
        sample_b=samples.b,
        act_func=act_func,
        mma_tiler_mn=tile,
        **config,
    )
    assert op.check_support() is True
    op.compile()
    return op


def execute(op, x: Inputs, d_row, dprob, dbias, stream=None) -> None:
    op.execute(
        a_tensor=x.a,
        c_tensor=x.c,
        d_row_tensor=d_row,
        padded_offsets=x.padded_offsets,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        dprob_tensor=dprob,
        dbias_tensor=dbias,
        b_tensor=x.b,
        current_stream=stream,
    )


def check_class_api(shape: Shape, act_func: str, with_dbias: bool, seed: int, tile=None) -> None:
    """Run the class API into poisoned/non-zero buffers and check every element."""
    params = act_params(act_func)
    x = make_inputs(shape, act_func, params, seed)
    d_row = poisoned_d(shape.m, shape.n)
    dprob_before = initial_dprob(shape.m, seed)
    dbias_before = initial_dbias(shape.l, shape.n, seed) if with_dbias else None
    dprob = dprob_before.clone()
    dbias = dbias_before.clone() if with_dbias else None

    op = class_op(x, d_row, dprob, dbias, act_func, tile)
    execute(op, x, d_row, dprob, dbias)
    torch.cuda.synchronize()

    expected = dglu_backward(x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, act_func, params)
    check_d(d_row, expected, seed)
    check_untouched(
        "d_row past valid_m", d_row[shape.valid_m :], poisoned_d(shape.extra_rows, shape.n), seed
    )
    check_dprob(dprob, dprob_before, expected, seed)
    if with_dbias:
        check_dbias(dbias, dbias_before, expected, seed)
        empty = [g for g, rows in enumerate(shape.expert_rows) if rows == 0]
        check_untouched("dbias of empty experts", dbias[empty], dbias_before[empty], seed)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_dbias", [False, True], ids=["nodbias", "dbias"])
@pytest.mark.parametrize("act_func", ["dswiglu", "dgeglu"])
def test_class_api(act_func: str, with_dbias: bool, shape: Shape, seed: int) -> None:
    check_class_api(shape, act_func, with_dbias, seed)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("with_dbias", [False, True], ids=["nodbias", "dbias"])
@pytest.mark.parametrize("act_func", ["dswiglu", "dgeglu"])
def test_wrapper(act_func: str, with_dbias: bool, shape: Shape, seed: int) -> None:
    params = act_params(act_func)
    x = make_inputs(shape, act_func, params, seed)
    dprob_before = initial_dprob(shape.m, seed)
    dprob = dprob_before.clone()

    out = run_wrapper(x, act_func, with_dbias, dprob)
    torch.cuda.synchronize()

    d_row, d_col, dprob_out, dbias, amax, sfd_row, sfd_col = out
    assert (d_col, amax, sfd_row, sfd_col) == (None, None, None, None)
    assert dprob_out is dprob and out["d_row_tensor"] is d_row
    assert d_row.shape == (shape.m, 2 * shape.n, 1) and d_row.dtype == torch.bfloat16
    expected = dglu_backward(x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, act_func, params)
    check_d(d_row, expected, seed)
    check_dprob(dprob, dprob_before, expected, seed)
    if with_dbias:
        assert dbias.shape == (shape.l, 2 * shape.n, 1) and dbias.dtype == torch.bfloat16
        check_dbias(dbias, torch.zeros_like(dbias), expected, seed)
    else:
        assert dbias is None


def _installed_tiles() -> list[tuple[str, bool, tuple[int, int]]]:
    """(act_func, dbias, tile) of every shipped variant for this device's arch."""
    arch = arch_for_capability(torch.cuda.get_device_capability())
    return sorted(
        {
            (v.key.act_func, v.key.dbias, (v.key.tile_m, v.key.tile_n))
            for v in installed_variants()
            if v.key.arch == arch and dict(v.key.act_params) == act_params(v.key.act_func)
        }
    )


@pytest.mark.parametrize(
    ("act_func", "with_dbias", "tile"),
    _installed_tiles(),
    ids=lambda p: "x".join(map(str, p)) if isinstance(p, tuple) else str(p),
)
def test_every_installed_variant(act_func: str, with_dbias: bool, tile, seed: int) -> None:
    """Each shipped cubin, chosen by its tile, on a shape with partial N and M tiles."""
    shape = Shape(n=160, k=200, expert_rows=(256, 0, 768, 256), extra_rows=64)
    check_class_api(shape, act_func, with_dbias, seed, tile=tile)


@pytest.mark.parametrize(
    "shape",
    [
        Shape(n=256, k=256, expert_rows=(1024,)),  # L = 1
        Shape(n=32, k=8, expert_rows=(256, 256, 0, 256), extra_rows=1),  # smallest N, K
        Shape(
            n=32,
            k=64,
            expert_rows=tuple(256 if g in (0, 511, 1023) else 0 for g in range(1024)),
            extra_rows=5,
        ),  # L = 1024
    ],
    ids=str,
)
@pytest.mark.parametrize("act_func", ["dswiglu", "dgeglu"])
def test_edge_shapes(act_func: str, shape: Shape, seed: int) -> None:
    check_class_api(shape, act_func, True, seed)


def test_execute_serves_other_sizes_than_the_samples(seed: int) -> None:
    """One compiled op, executed on a problem with other M, N, K and L than its samples."""
    samples = make_inputs(SHAPES[0], "dswiglu", {}, seed)
    op = class_op(
        samples,
        poisoned_d(SHAPES[0].m, SHAPES[0].n),
        initial_dprob(SHAPES[0].m, seed),
        initial_dbias(SHAPES[0].l, SHAPES[0].n, seed),
        "dswiglu",
    )
    shape = SHAPES[1]
    x = make_inputs(shape, "dswiglu", {}, seed + 10)
    d_row, dprob = poisoned_d(shape.m, shape.n), torch.zeros(shape.m, 1, 1, device="cuda")
    dbias = torch.zeros(shape.l, 2 * shape.n, 1, dtype=torch.bfloat16, device="cuda")
    execute(op, x, d_row, dprob, dbias)
    torch.cuda.synchronize()
    expected = dglu_backward(x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, "dswiglu", {})
    check_d(d_row, expected, seed)
    check_dprob(dprob, torch.zeros_like(dprob), expected, seed)
    check_dbias(dbias, torch.zeros_like(dbias), expected, seed)


def test_repeated_calls_accumulate(seed: int) -> None:
    """Two executions add twice into dprob and dbias and rewrite the same D."""
    shape = SHAPES[0]
    x = make_inputs(shape, "dgeglu", GEGLU_DEFAULTS, seed)
    d_row, dprob = poisoned_d(shape.m, shape.n), torch.zeros(shape.m, 1, 1, device="cuda")
    dbias = torch.zeros(shape.l, 2 * shape.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(x, d_row, dprob, dbias, "dgeglu")
    execute(op, x, d_row, dprob, dbias)
    once_dprob, once_dbias = dprob.clone(), dbias.clone()
    execute(op, x, d_row, dprob, dbias)
    torch.cuda.synchronize()
    expected = dglu_backward(
        x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, "dgeglu", GEGLU_DEFAULTS
    )
    check_d(d_row, expected, seed)
    check_dprob(dprob, once_dprob, expected, seed)
    check_dbias(dbias, once_dbias, expected, seed)


@pytest.mark.parametrize("kind", ["torch", "int", "CUstream"])
def test_current_stream_kinds(kind: str, seed: int) -> None:
    """The op runs on the given stream: results are complete once that stream is synced."""
    from cuda.bindings import driver

    shape = SHAPES[1]
    x = make_inputs(shape, "dswiglu", {}, seed)
    dprob = torch.zeros(shape.m, 1, 1, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    handle = {
        "torch": side,
        "int": side.cuda_stream,
        "CUstream": driver.CUstream(side.cuda_stream),
    }[kind]
    out = run_wrapper(x, "dswiglu", True, dprob, stream=handle)
    side.synchronize()
    expected = dglu_backward(x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, "dswiglu", {})
    check_d(out["d_row_tensor"], expected, seed)
    check_dprob(dprob, torch.zeros_like(dprob), expected, seed)
    check_dbias(out["dbias_tensor"], torch.zeros_like(out["dbias_tensor"]), expected, seed)


def test_cuda_graph_capture_and_replay(seed: int) -> None:
    """execute() can be captured (padded_offsets is not read back then) and replayed."""
    shape = SHAPES[0]
    x = make_inputs(shape, "dswiglu", {}, seed)
    d_row, dprob = poisoned_d(shape.m, shape.n), torch.zeros(shape.m, 1, 1, device="cuda")
    dbias = torch.zeros(shape.l, 2 * shape.n, 1, dtype=torch.bfloat16, device="cuda")
    op = class_op(x, d_row, dprob, dbias, "dswiglu")
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
    expected = dglu_backward(x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, "dswiglu", {})
    check_d(d_row, expected, seed)
    check_dprob(dprob, torch.zeros_like(dprob), expected, seed)
    check_dbias(dbias, torch.zeros_like(dbias), expected, seed)


def test_no_rows_at_all(seed: int) -> None:
    """M = 0: nothing to launch; outputs empty, dbias zero."""
    shape = Shape(n=96, k=64, expert_rows=(0, 0, 0))
    x = make_inputs(shape, "dswiglu", {}, seed)
    dprob = torch.zeros(0, 1, 1, device="cuda")
    out = run_wrapper(x, "dswiglu", True, dprob)
    torch.cuda.synchronize()
    assert out["d_row_tensor"].shape == (0, 192, 1)
    assert not out["dbias_tensor"].any()


def test_rows_owned_by_no_expert_are_untouched(seed: int) -> None:
    """valid_m = 0 < M: every expert empty, so D and dprob keep their contents."""
    shape = Shape(n=96, k=64, expert_rows=(0, 0), extra_rows=300)
    x = make_inputs(shape, "dgeglu", GEGLU_DEFAULTS, seed)
    d_row, dprob_before = poisoned_d(shape.m, shape.n), initial_dprob(shape.m, seed)
    dprob = dprob_before.clone()
    op = class_op(x, d_row, dprob, None, "dgeglu")
    execute(op, x, d_row, dprob, None)
    torch.cuda.synchronize()
    check_untouched("d_row", d_row, poisoned_d(shape.m, shape.n), seed)
    check_untouched("dprob", dprob, dprob_before, seed)


def test_bad_offsets_are_refused_before_launch(seed: int) -> None:
    shape = SHAPES[0]
    x = make_inputs(shape, "dswiglu", {}, seed)
    bad = x.padded_offsets.clone()
    bad[1] = bad[1] + 128
    dprob = torch.zeros(shape.m, 1, 1, device="cuda")
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


def test_missing_variant_says_how_to_build_it(seed: int) -> None:
    shape = SHAPES[0]
    x = make_inputs(shape, "dgeglu", GEGLU_DEFAULTS, seed)
    dprob = torch.zeros(shape.m, 1, 1, device="cuda")
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
            act_func="dgeglu",
            geglu_alpha=1.25,
            linear_offset=0.0,
        )
    message = str(error.value)
    assert "nearest available variants" in message
    assert "--act-param geglu_alpha=1.25" in message and "--act-param linear_offset=0.0" in message


def test_shipped_variants_cover_both_activations_with_and_without_dbias() -> None:
    combos = {(act, dbias) for act, dbias, _ in _installed_tiles()}
    assert combos == set(itertools.product(["dgeglu", "dswiglu"], [False, True]))
