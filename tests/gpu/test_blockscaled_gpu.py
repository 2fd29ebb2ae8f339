"""The MXFP8 op (family sm90_mxfp8) against the block-scaled reference, every element and byte.

Every case: fresh random FP8 A and B whose E8M0 scales differ per 32-block (2^U[-8, 8]),
all-zero D blocks in both directions, uneven experts with an empty one, alpha/beta/prob far
from 1 (blockscaled_inputs.py); the class API writes into D_row/D_col poisoned with 0x7F
and SFD_row/SFD_col poisoned with 0xFF, dprob and dbias accumulate onto non-zero contents;
the wrapper allocates. blockscaled_checks.py says what is compared and why the tolerances
are what they are (SFD bytes exact but +-1 where the scale input lies within the D error of
a power of two; FP8 codes within one step; dequantized D within half a step).
K = 160 and 2N = 320 are not multiples of 128 (partial SF atoms). A variant that is not
installed skips its cases; test_shipped_variants_are_the_tested_matrix catches drift.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import blockscaled_reference as bs  # noqa: E402
import dglu  # noqa: E402
import dglu.torch  # noqa: E402
from blockscaled_checks import check_accumulated, check_quantized_d, zero_blocks  # noqa: E402
from blockscaled_configs import (  # noqa: E402
    DEFAULT, FAMILY, SHIPPED, TILE, MxConfig, installed_key_fields, key_fields,
)
from blockscaled_inputs import MxInputs, MxOutputs, layout_revealing_inputs, make_mx_inputs, poisoned_outputs  # noqa: E402
from checks import d_allowed  # noqa: E402
from dglu.manifest import installed_variants  # noqa: E402
from inputs import Shape, initial_dbias, initial_dprob  # noqa: E402

pytestmark = pytest.mark.gpu

DEVICE = "cuda"
UNEVEN = Shape(n=160, k=160, expert_rows=(256, 0, 768, 256))
SMALL = Shape(n=96, k=96, expert_rows=(512, 0, 256))
LAYOUT = Shape(n=96, k=160, expert_rows=(512, 0, 256, 256))
SINGLE = Shape(n=96, k=96, expert_rows=(768,))
# 8192 rows, N = 1536: 64 x 12 = 768 tiles of 128x128, about 6 per CTA on 132 SMs
MANY_TILES = Shape(n=1536, k=160, expert_rows=tuple(256 * blocks for blocks in (9, 0, 12, 1, 10)))
NORM_CONSTS = (1.0, 0.01, 3.0)
TILE_FIELD = key_fields(DEFAULT).index(TILE)  # the tile's place in key_fields
OPTION_CONFIGS = [
    DEFAULT,
    MxConfig("dsituglu", weight_mode="discrete", b_major="n", scheduler="dynamic"),
]


@functools.cache
def installed() -> frozenset:
    return frozenset(installed_key_fields(v.key) for v in installed_variants() if v.family == FAMILY)


def _called_fields(fields: tuple) -> tuple:
    """key_fields but the tile: a call names none, the largest installed tile serves it."""
    return fields[:TILE_FIELD] + fields[TILE_FIELD + 1:]


def require_installed(config: MxConfig) -> None:
    if _called_fields(key_fields(config)) not in {_called_fields(fields) for fields in installed()}:
        pytest.skip(f"the {FAMILY} variant of {config} is not installed")


@dataclass(frozen=True)
class MxCase:
    """One call to check: what it runs, on what sizes, from which seed, with which options."""

    config: MxConfig
    shape: Shape
    seed: int
    api: str = "class"  # or "wrapper", or "torch_op" (the wrapper through the torch custom op)
    norm_const: float = 1.0
    discrete_col_sfd: bool = False
    single_group: bool = False  # use_single_group_runtime_offsets (then padded_offsets = [0])

    def describe(self) -> str:
        return (
            f"{self.config} via the {self.api} API, {self.shape} experts {self.shape.expert_rows}, "
            f"norm_const {self.norm_const}, discrete_col_sfd {self.discrete_col_sfd}, "
            f"single group {self.single_group}, seed {self.seed}"
        )


def weight_arguments(x: MxInputs, call: str) -> dict[str, object]:
    """B and SFB for ``call`` ("samples", "execute" or "wrapper"): dense tensors, or the
    discrete experts' pointers."""
    if x.experts is None:
        if call == "samples":
            return {"sample_b": x.b, "sample_sfb": x.sfb}
        return {"b_tensor": x.b, "sfb_tensor": x.sfb}
    n, k, l = x.b.shape
    if call == "samples":
        return {"num_experts": l, "b_shape": (n, k), "b_dtype": x.b.dtype}
    pointers = {"b_ptrs": x.experts.b_ptrs, "sfb_ptrs": x.sfb_ptrs}
    return pointers if call == "execute" else {**pointers, "n": n, "b_dtype": x.b.dtype}


def option_arguments(case: MxCase) -> dict[str, object]:
    config = case.config
    return {
        **config.act_kwargs(),
        **config.launch_kwargs(),
        "sf_vec_size": 32,
        "discrete_col_sfd": case.discrete_col_sfd,
        "use_single_group_runtime_offsets": case.single_group,
    }


def call_offsets(case: MxCase, x: MxInputs) -> torch.Tensor:
    """padded_offsets as the call passes them: with single-group offsets a (1,) int32 whose
    value the op must ignore (it takes the rows from A)."""
    if case.single_group:
        return torch.zeros(1, dtype=torch.int32, device=DEVICE)
    return x.rest.padded_offsets


def run_class(case: MxCase, x: MxInputs, out: MxOutputs, norm_const: torch.Tensor) -> str:
    """check_support, compile and execute into ``out``; returns the variant's name."""
    r, offsets = x.rest, call_offsets(case, x)
    op = dglu.GroupedGemmDglu(
        x.a,
        x.c,
        out.d_row,
        out.d_col,
        x.sfa,
        sample_padded_offsets=offsets,
        sample_alpha=r.alpha,
        sample_beta=r.beta,
        sample_prob=r.prob,
        sample_dprob=out.dprob,
        sample_dbias=out.dbias,
        sample_sfd_row=out.sfd_row,
        sample_sfd_col=out.sfd_col,
        sample_norm_const=norm_const,
        **weight_arguments(x, "samples"),
        **option_arguments(case),
    )
    assert op.check_support() is True
    op.compile()
    op.execute(
        x.a,
        x.c,
        out.d_row,
        out.d_col,
        x.sfa,
        padded_offsets=offsets,
        alpha_tensor=r.alpha,
        beta_tensor=r.beta,
        prob_tensor=r.prob,
        dprob_tensor=out.dprob,
        dbias_tensor=out.dbias,
        sfd_row_tensor=out.sfd_row,
        sfd_col_tensor=out.sfd_col,
        norm_const_tensor=norm_const,
        **weight_arguments(x, "execute"),
    )
    return op.variant_name


def run_wrapper(case: MxCase, x: MxInputs, dprob: torch.Tensor, norm_const: torch.Tensor) -> MxOutputs:
    """The wrapper's outputs, their shapes and dtypes checked."""
    r, shape, config = x.rest, case.shape, case.config
    # the eager wrapper, or the same call through torch.ops.dglu.grouped_gemm_dglu
    function = dglu.torch.grouped_gemm_dglu if case.api == "torch_op" else dglu.grouped_gemm_dglu
    out = function(
        x.a,
        x.c,
        x.sfa,
        padded_offsets=call_offsets(case, x),
        alpha_tensor=r.alpha,
        beta_tensor=r.beta,
        prob_tensor=r.prob,
        dprob_tensor=dprob,
        norm_const_tensor=norm_const,
        d_dtype=config.d_dtype,
        generate_dbias=config.dbias,
        **weight_arguments(x, "wrapper"),
        **option_arguments(case),
    )
    d_row, d_col, dprob_out, dbias, amax, sfd_row, sfd_col = out
    width = 2 * shape.n
    for name, tensor in (("d_row", d_row), ("d_col", d_col)):
        assert tensor.shape == (shape.m, width, 1) and tensor.dtype == config.d_dtype, name
    assert sfd_row.shape == bs.sf_shape(shape.m, width) and sfd_row.stride() == bs.sf_strides(shape.m, width)
    assert sfd_col.shape == bs.sf_shape(width, shape.m) and sfd_col.stride() == bs.sf_strides(width, shape.m)
    assert sfd_row.dtype == sfd_col.dtype == torch.float8_e8m0fnu
    assert dprob_out is dprob and amax is None
    assert (dbias is not None) == config.dbias
    if dbias is not None:
        assert dbias.shape == (shape.l, width, 1) and dbias.dtype == torch.bfloat16
    return MxOutputs(d_row, d_col, sfd_row, sfd_col, dprob, dbias)


def expected_for(case: MxCase, x: MxInputs):
    r = x.rest
    return bs.blockscaled_dglu_backward(
        x.a, x.sfa, x.b, x.sfb, x.c, case.shape.ends, r.alpha, r.beta, r.prob,
        case.config.act_func, case.config.act_params,
    )


def run_case(case: MxCase, x: MxInputs | None = None) -> str | None:
    """Run ``case`` (on ``x``, else fresh random inputs) and check every output element and
    SFD byte (raises AssertionError naming the case); returns the class API's variant name
    (None through the wrapper)."""
    config, shape = case.config, case.shape
    require_installed(config)
    x = x or make_mx_inputs(config, shape, case.seed, DEVICE)
    norm_const = torch.tensor([case.norm_const], dtype=torch.float32, device=DEVICE)
    dprob_before = initial_dprob(shape.m, case.seed, DEVICE)
    dprob = dprob_before.clone()
    variant_name = None
    if case.api == "class":
        dbias_before = initial_dbias(shape.l, shape.n, case.seed, DEVICE) if config.dbias else None
        out = poisoned_outputs(config, shape, dprob, None if dbias_before is None else dbias_before.clone(), DEVICE)
        variant_name = run_class(case, x, out, norm_const)
    else:
        out = run_wrapper(case, x, dprob, norm_const)
        dbias_before = torch.zeros_like(out.dbias) if config.dbias else None
    torch.cuda.synchronize()
    expected = expected_for(case, x)
    context = case.describe()
    check_quantized_d(
        out.d_row, out.d_col, out.sfd_row, out.sfd_col, expected, shape.ends, config.d_dtype,
        case.norm_const, case.discrete_col_sfd, context, check_padding=case.api == "class",
    )
    check_accumulated(out.dprob, dprob_before, out.dbias, dbias_before, expected, shape.ends, shape.n, context)
    return variant_name


def test_shipped_variants_are_the_tested_matrix() -> None:
    if not installed():
        pytest.skip(f"no {FAMILY} variant is installed")
    assert installed() == {key_fields(config) for config in SHIPPED}


def test_inputs_have_all_zero_blocks_both_ways(seed: int) -> None:
    x = make_mx_inputs(DEFAULT, UNEVEN, seed, DEVICE)
    d = bs.blockscaled_dglu_backward(
        x.a, x.sfa, x.b, x.sfb, x.c, UNEVEN.ends, x.rest.alpha, x.rest.beta, x.rest.prob, "dswiglu", {}
    ).d
    assert zero_blocks(d) > 0 and zero_blocks(d.T) > 0


@pytest.mark.parametrize("config", SHIPPED, ids=str)
def test_every_shipped_variant(config: MxConfig, seed: int) -> None:
    run_case(MxCase(config, UNEVEN, seed))


@pytest.mark.parametrize("config", OPTION_CONFIGS, ids=str)
@pytest.mark.parametrize("api", ["class", "wrapper", "torch_op"])
@pytest.mark.parametrize("discrete_col_sfd", [False, True])
@pytest.mark.parametrize("norm_const", NORM_CONSTS)
def test_norm_const_and_column_sfd_layout(
    norm_const: float, discrete_col_sfd: bool, api: str, config: MxConfig, seed: int
) -> None:
    run_case(MxCase(config, SMALL, seed, api=api, norm_const=norm_const, discrete_col_sfd=discrete_col_sfd))


@pytest.mark.parametrize("config", [DEFAULT, MxConfig("dgeglu", weight_mode="discrete")], ids=str)
@pytest.mark.parametrize("discrete_col_sfd", [False, True])
def test_layout_revealing_sfd_bytes(discrete_col_sfd: bool, config: MxConfig, seed: int) -> None:
    """Each D block's amax is a constant times a power of two of its own: the SFD bytes
    name their block, and (no scale input near a power of two) must equal the reference's."""
    require_installed(config)
    x = layout_revealing_inputs(config, LAYOUT, seed, DEVICE)
    case = MxCase(config, LAYOUT, seed, discrete_col_sfd=discrete_col_sfd)
    expected = expected_for(case, x)
    error = d_allowed(expected, torch.float32)
    fmt = bs.fp8_format(config.d_dtype)
    for d, err, row_order in ((expected.d, error, True), (expected.d.T, error.T, False)):
        low, high = bs.block_byte_range(d, err, fmt, 1.0, row_order)
        assert torch.equal(low, high), "premise: a block's scale input lies near a power of two"
        assert low.unique().numel() >= 16 and bool((low == 0).any())
    run_case(case, x)


@pytest.mark.parametrize("single_group", [False, True])
def test_one_expert_with_and_without_single_group_offsets(single_group: bool, seed: int) -> None:
    run_case(MxCase(DEFAULT, SINGLE, seed, single_group=single_group))


@pytest.mark.parametrize("scheduler", ["static", "dynamic"])
def test_many_tiles_per_cta(scheduler: str, seed: int) -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = (MANY_TILES.m // 128) * (MANY_TILES.n // 128)
    assert tiles >= 4 * sms
    config = MxConfig("dswiglu", scheduler=scheduler)
    run_case(MxCase(config, MANY_TILES, seed, norm_const=3.0, discrete_col_sfd=scheduler == "dynamic"))
