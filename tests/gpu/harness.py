"""Run the op on one case through the class API or the wrapper, and check every output.

The class API writes into caller buffers: D_row poisoned with NaN (rows past valid_m must
keep it), dprob and dbias with non-zero contents to accumulate onto. The wrapper allocates
D_row (d_dtype) and a zeroed dbias; its dprob is the caller's, non-zero. A Config's weight
mode, b_major, scheduler and cluster become the call's arguments (discrete weights: b_ptrs
with n and b_dtype, or num_experts, b_shape and b_dtype); a Case's round_dgrad becomes
round_dgrad_to_input_dtype=True (on exact GEMM data: the reference needs it).
Tensors are made on DEVICE (the CPU tests run this harness over an emulated op).
"""

from __future__ import annotations

from dataclasses import dataclass

import dglu
import torch
from checks import check_d, check_dbias, check_dprob, check_untouched
from configs import Config
from inputs import Inputs, Shape, initial_dbias, initial_dprob, make_inputs, poisoned_d
from reference import dglu_backward

DEVICE = "cuda"


@dataclass(frozen=True)
class Case:
    """One call to check: what it runs, on what sizes, from which seed."""

    config: Config
    shape: Shape
    seed: int
    api: str = "class"  # "class" or "wrapper"
    exact_gemm: bool = False
    pass_tile: bool = True  # give mma_tiler_mn (else the selection's default)
    round_dgrad: bool = False  # round_dgrad_to_input_dtype=True

    def describe(self) -> str:
        rounded = ", R rounded to bf16" if self.round_dgrad else ""
        return (
            f"{self.config} via the {self.api} API, {self.shape} experts {self.shape.expert_rows} "
            f"(+{self.shape.extra_rows} rows), seed {self.seed}{rounded}"
        )

    def options(self) -> dict[str, object]:
        """The call's options beyond the config's (none unless the case sets one)."""
        return {"round_dgrad_to_input_dtype": True} if self.round_dgrad else {}


def weight_arguments(x: Inputs, call: str) -> dict[str, object]:
    """The weight arguments of ``call`` ("samples": the class constructor, "execute", or
    "wrapper"): dense B, or the discrete weights of ``x.experts``."""
    if x.experts is None:
        return {"sample_b" if call == "samples" else "b_tensor": x.b}
    n, k, l = x.b.shape
    if call == "samples":
        return {"num_experts": l, "b_shape": (n, k), "b_dtype": torch.bfloat16}
    if call == "execute":
        return {"b_ptrs": x.experts.b_ptrs}
    return {"b_ptrs": x.experts.b_ptrs, "n": n, "b_dtype": torch.bfloat16}


def class_op(config: Config, samples: Inputs, d_row, dprob, dbias, tile=None, **options):
    """A compiled GroupedGemmDgluSm90 for ``config`` described by ``samples``."""
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
        **weight_arguments(samples, "samples"),
        mma_tiler_mn=tile,
        **{**config.act_kwargs(), **config.launch_kwargs(), **options},
    )
    assert op.check_support() is True
    op.compile()
    return op


def execute_arguments(x: Inputs, d_row, dprob, dbias) -> dict[str, object]:
    """execute()'s tensor arguments for ``x``, without the weights."""
    return dict(
        a_tensor=x.a,
        c_tensor=x.c,
        d_row_tensor=d_row,
        padded_offsets=x.padded_offsets,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        dprob_tensor=dprob,
        dbias_tensor=dbias,
    )


def execute(op, x: Inputs, d_row, dprob, dbias, stream=None) -> None:
    op.execute(**execute_arguments(x, d_row, dprob, dbias), **weight_arguments(x, "execute"), current_stream=stream)


def run_wrapper(config: Config, x: Inputs, dprob, tile=None, stream=None, **options):
    """The wrapper's outputs for ``config`` (D_row in config.d_dtype, dbias if config.dbias)."""
    return dglu.grouped_gemm_dglu_wrapper_sm90(
        a_tensor=x.a,
        c_tensor=x.c,
        padded_offsets=x.padded_offsets,
        alpha_tensor=x.alpha,
        beta_tensor=x.beta,
        prob_tensor=x.prob,
        dprob_tensor=dprob,
        **weight_arguments(x, "wrapper"),
        d_dtype=config.d_dtype,
        generate_dbias=config.dbias,
        mma_tiler_mn=tile,
        current_stream=stream,
        **{**config.act_kwargs(), **config.launch_kwargs(), **options},
    )


def case_inputs(case: Case) -> Inputs:
    config = case.config
    return make_inputs(
        case.shape,
        config.act_func,
        config.act_params,
        case.seed,
        c_dtype=config.c_dtype,
        exact_gemm=case.exact_gemm,
        discrete_b_major=config.b_major if config.discrete else None,
        device=DEVICE,
    )


def expected_for(config: Config, shape: Shape, x: Inputs, round_dgrad: bool = False):
    return dglu_backward(
        x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, config.act_func, config.act_params,
        round_dgrad=round_dgrad,
    )


def check_outputs(case: Case, x: Inputs, d_row, dprob, dprob_before, dbias, dbias_before) -> None:
    """D_row, dprob and dbias of a finished call against the reference, every element."""
    context = case.describe()
    shape = case.shape
    if shape.valid_m:
        expected = expected_for(case.config, shape, x, case.round_dgrad)
        check_d(d_row, expected, context)
        check_dprob(dprob, dprob_before, expected, shape.n, context)
    else:
        check_untouched("dprob", dprob, dprob_before, context)
    if case.config.dbias:
        check_dbias(dbias, dbias_before, d_row, shape.ends, context)


def run_case(case: Case) -> None:
    """Run ``case`` and check every output element (raises AssertionError naming the case)."""
    config, shape = case.config, case.shape
    x = case_inputs(case)
    dprob_before = initial_dprob(shape.m, case.seed, DEVICE)
    dprob = dprob_before.clone()
    tile = config.tile if case.pass_tile else None
    if case.api == "class":
        d_row = poisoned_d(shape.m, shape.n, config.d_dtype, DEVICE)
        dbias_before = initial_dbias(shape.l, shape.n, case.seed, DEVICE) if config.dbias else None
        dbias = dbias_before.clone() if config.dbias else None
        execute(class_op(config, x, d_row, dprob, dbias, tile, **case.options()), x, d_row, dprob, dbias)
        torch.cuda.synchronize()
        check_untouched(
            "d_row past valid_m",
            d_row[shape.valid_m :],
            poisoned_d(shape.extra_rows, shape.n, config.d_dtype, DEVICE),
            case.describe(),
        )
    else:
        out = run_wrapper(config, x, dprob, tile, **case.options())
        torch.cuda.synchronize()
        d_row, dbias = out["d_row_tensor"], out["dbias_tensor"]
        assert d_row.shape == (shape.m, 2 * shape.n, 1) and d_row.dtype == config.d_dtype
        assert out["dprob_tensor"] is dprob
        assert (dbias is not None) == config.dbias
        dbias_before = torch.zeros_like(dbias) if config.dbias else None
    check_outputs(case, x, d_row, dprob, dprob_before, dbias, dbias_before)
