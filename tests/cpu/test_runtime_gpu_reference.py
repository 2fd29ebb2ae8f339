"""The GPU suite's oracle on the CPU: its reference, inputs and tolerances (tests/gpu).

An fp32 emulation of the kernel's arithmetic (the formulas of
codegen/dglu_build/kernels/blocks/activations.py on X = beta * C, a perturbed sigmoid
standing in for its approximate exp and reciprocal, D rounded to its dtype, dbias summed
from the stored D) must pass every check for every shipped variant, and each seeded bug
must fail one: tolerances neither too tight nor too loose. A kernel that reads C where the
contract says X = beta * C (as dglu's dGeGLU and dSiTU-GLU did before) fails for every
activation; with round_dgrad_to_input_dtype, a kernel that rounds R to bf16 passes the
rounding reference, and the checks tell rounded from unrounded R in either direction.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="the GPU suite's reference needs torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gpu"))

from checks import check_d, check_dbias, check_dprob, check_untouched  # noqa: E402
from configs import BF16, FP16, FP32, NARROW, SHIPPED, WIDE, Config, key_fields  # noqa: E402
from inputs import (  # noqa: E402
    Inputs,
    Shape,
    initial_dbias,
    initial_dprob,
    make_inputs,
    neighbours,
    poisoned_d,
)
from reference import dglu_backward, exact_accumulation, merge_columns, split_columns  # noqa: E402

APPROXIMATION = 2.0**-21  # relative error given to the emulated sigmoid


def _sigmoid(z: torch.Tensor) -> torch.Tensor:
    """fp32 sigmoid off by up to APPROXIMATION relative, like ex2.approx + rcp.approx."""
    wobble = torch.sign(torch.sin(z * 1013.0))
    return torch.sigmoid(z) * (1 + APPROXIMATION * wobble)


def _activation(config: Config, gate, x, beta, bug: str | None):
    """(d_gate, d_input, dprob) factors in fp32 of X = beta * C (C's gate and input halves
    ``gate`` and ``x``), as the kernel's activations."""
    p = config.act_params
    if bug != "no-beta":
        gate, x = gate * beta, x * beta
    if config.act_func == "dswiglu":
        s = _sigmoid(gate)
        act = gate * s
        return x * s * (1.0 + gate * (1.0 - s)), act, act * x
    if config.act_func == "dgeglu":
        a, high, low, offset = (
            p[name] for name in ("geglu_alpha", "glu_clamp_max", "glu_clamp_min", "linear_offset")
        )
        gc, xc = gate.clamp(max=high), x.clamp(low, high)
        s = _sigmoid(a * gc)
        gate_mask = (gate < high) if bug == "exclusive-clamp" else (gate <= high)
        act = gc * s
        d_gate = (xc + offset) * s * (1.0 + a * gc * (1.0 - s)) * gate_mask
        return d_gate, act * ((x >= low) & (x <= high)), act * (xc + offset)
    b1, b2 = p["situ_beta1"], p["situ_beta2"]
    s = _sigmoid(gate)
    tg, tu = torch.tanh(gate * (1.0 / b1)), torch.tanh(x * (1.0 / b2))
    t_gate, t_input = b1 * tg * s, b2 * tu
    dt_gate = (1.0 - tg * tg) * s + b1 * tg * s * (1.0 - s)
    return t_input * dt_gate, t_gate * (1.0 - tu * tu), t_gate * t_input


def emulate(config, x: Inputs, d_row, dprob, dbias, bug=None, round_dgrad=False) -> None:
    """The op in fp32 on the CPU, writing into d_row, dprob and dbias like the kernel.

    ``config`` gives act_func, act_params and d_dtype; the sizes come from the tensors.
    ``round_dgrad``: R rounded to bf16 before the epilogue (round_dgrad_to_input_dtype).
    """
    m, k, n = x.a.shape[0], x.a.shape[1], x.b.shape[0]
    a, c = x.a.reshape(m, k).float(), x.c.reshape(m, 2 * n).float()
    start = 0
    for g, end in enumerate(x.padded_offsets.tolist()):
        if end == start:
            continue
        rows = slice(start, end)
        b = x.b[:, :, g].float()
        if bug == "dropped-k-tile":
            b[:, -64:] = 0
        alpha = x.alpha[g - 1 if bug == "previous-alpha" else g]
        r = (a[rows] @ b.T) * (alpha if bug == "alpha-once" else alpha * alpha)
        if round_dgrad:
            r = r.bfloat16().float()
        gate, inp = split_columns(c[rows])
        d_gate, d_input, d_prob = _activation(config, gate, inp, x.beta[g], bug)
        p = x.prob.reshape(-1, 1)[rows]
        if bug == "swapped":
            d_gate, d_input = d_input, d_gate
        d = merge_columns(r * p * d_gate, r * p * d_input).to(config.d_dtype)
        d_row[rows] = d.reshape(end - start, 2 * n, 1)
        terms = r * d_prob * (p if bug == "dprob-times-prob" else 1.0)
        dprob[rows] += terms.sum(1).reshape(-1, 1, 1)
        if dbias is not None:
            summed = d.float()[: -128 if bug == "dbias-drops-a-tile" else None].sum(0)
            dbias[g] = (dbias[g].float() + summed.reshape(-1, 1)).to(torch.bfloat16)
        start = end


def check_emulated(
    config: Config, shape: Shape, seed: int, bug=None, exact_gemm=False, round_dgrad=False, reference_rounds=None
) -> None:
    """Emulate the op on fresh inputs and run the GPU suite's checks on its outputs, against
    the reference with R rounded to bf16 as ``reference_rounds`` says (None: as the op)."""
    x = make_inputs(
        shape,
        config.act_func,
        config.act_params,
        seed,
        c_dtype=config.c_dtype,
        exact_gemm=exact_gemm,
        device="cpu",
    )
    d_row = poisoned_d(shape.m, shape.n, config.d_dtype, device="cpu")
    dprob_before = initial_dprob(shape.m, seed, device="cpu")
    dbias_before = initial_dbias(shape.l, shape.n, seed, device="cpu") if config.dbias else None
    dprob = dprob_before.clone()
    dbias = dbias_before.clone() if config.dbias else None
    emulate(config, x, d_row, dprob, dbias, bug, round_dgrad)
    expected = dglu_backward(
        x.a, x.b, x.c, shape.ends, x.alpha, x.beta, x.prob, config.act_func, config.act_params,
        round_dgrad=round_dgrad if reference_rounds is None else reference_rounds,
    )
    context = f"{config} {shape} seed {seed}"
    check_d(d_row, expected, context)
    check_untouched(
        "d_row past valid_m",
        d_row[shape.valid_m :],
        poisoned_d(shape.extra_rows, shape.n, config.d_dtype, device="cpu"),
        context,
    )
    check_dprob(dprob, dprob_before, expected, shape.n, context)
    if config.dbias:
        check_dbias(dbias, dbias_before, d_row, shape.ends, context)


UNEVEN = Shape(n=96, k=200, expert_rows=(256, 0, 256), extra_rows=37)
GEGLU_BOUNDS = {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0}


@pytest.mark.parametrize("config", SHIPPED, ids=str)
def test_an_fp32_emulation_of_the_kernel_passes(config: Config) -> None:
    check_emulated(config, UNEVEN, SHIPPED.index(config))


def test_large_k_with_exact_data_is_checked_exactly() -> None:
    shape = Shape(n=32, k=16384, expert_rows=(256,))
    check_emulated(Config("dswiglu", BF16, FP32, True, NARROW), shape, 5, exact_gemm=True)
    with pytest.raises(AssertionError, match="^d_row: "):
        check_emulated(
            Config("dswiglu", BF16, FP32, True, NARROW),
            shape,
            5,
            bug="dropped-k-tile",
            exact_gemm=True,
        )


BUGS = {
    "swapped": Config("dsituglu", BF16, BF16, False, WIDE),
    "exclusive-clamp": Config("dgeglu_dsv4", BF16, BF16, False, WIDE),
    "previous-alpha": Config("dgeglu", FP16, FP16, False, WIDE),
    "alpha-once": Config("dswiglu", FP32, BF16, False, NARROW),
    "dprob-times-prob": Config("dgeglu", BF16, FP32, False, NARROW),
    "dbias-drops-a-tile": Config("dswiglu", FP32, FP32, True, NARROW),
    "dropped-k-tile": Config("dswiglu", BF16, BF16, True, WIDE),
}


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bugs_fail_a_check(bug: str) -> None:
    with pytest.raises(AssertionError, match="elements outside tolerance"):
        check_emulated(BUGS[bug], UNEVEN, 11, bug=bug)


@pytest.mark.parametrize("d_dtype", [BF16, FP32], ids=["bf16-D", "fp32-D"])
@pytest.mark.parametrize("activation", ["dswiglu", "dgeglu", "dgeglu_dsv4", "dsituglu"])
def test_a_kernel_that_ignores_beta_fails_for_every_activation(activation: str, d_dtype) -> None:
    """The checks tell X = beta * C from C (the old dGeGLU and dSiTU-GLU) on D, with the
    loosest D tolerance (bf16) as well; the emulation with beta passes the same checks."""
    config = Config(activation, BF16, d_dtype, False, WIDE if d_dtype == BF16 else NARROW)
    check_emulated(config, UNEVEN, 13)
    with pytest.raises(AssertionError, match=r"^d_row: \d+ of \d+ elements outside tolerance"):
        check_emulated(config, UNEVEN, 13, bug="no-beta")


ROUNDED = [
    Config("dswiglu", BF16, BF16, True, WIDE),
    Config("dgeglu", BF16, BF16, False, WIDE),
    Config("dgeglu_dsv4", BF16, BF16, True, WIDE),
    Config("dsituglu", BF16, BF16, True, WIDE),
    Config("dswiglu", BF16, FP32, True, NARROW),
    Config("dgeglu", FP16, FP32, False, NARROW),
]


@pytest.mark.parametrize("config", ROUNDED, ids=str)
def test_rounded_r_passes_and_the_checks_tell_it_from_unrounded(config: Config) -> None:
    """round_dgrad_to_input_dtype: R rounded to bf16 (at most half a bf16 step, 2^-9
    relative) is found on D where D is fp32 (on D or dprob where D is 16-bit)."""
    first = "d_row" if config.d_dtype == FP32 else "(d_row|dprob)"
    check_emulated(config, UNEVEN, 17, exact_gemm=True, round_dgrad=True)
    for kernel_rounds in (True, False):
        with pytest.raises(AssertionError, match=rf"^{first}: \d+ of \d+ elements outside tolerance"):
            check_emulated(config, UNEVEN, 17, exact_gemm=True, round_dgrad=kernel_rounds,
                           reference_rounds=not kernel_rounds)


def test_the_rounding_reference_needs_exact_gemm_sums() -> None:
    x = make_inputs(UNEVEN, "dswiglu", {}, 3, device="cpu")
    with pytest.raises(ValueError, match="^round_dgrad: the reference rounds the kernels' fp32 R"):
        dglu_backward(x.a, x.b, x.c, UNEVEN.ends, x.alpha, x.beta, x.prob, "dswiglu", {}, round_dgrad=True)


def test_inputs_put_x_on_the_clamp_bounds_and_beta_far_from_one() -> None:
    """Every third expert's beta is 1/2 or 2, so X = beta * C meets dGeGLU's bounds exactly;
    the others' betas are far from 1 and X lands next to the bounds."""
    shape = Shape(n=64, k=64, expert_rows=(256, 256, 256, 256, 256, 256))
    x = make_inputs(shape, "dgeglu", GEGLU_BOUNDS, 3, device="cpu")
    assert x.beta[2].item() == 0.5 and x.beta[5].item() == 2.0
    assert all(abs(b - 1) >= 0.3 for b in x.beta.tolist())
    ends = shape.ends
    for g, (start, end) in enumerate(zip([0, *ends], ends)):
        xs = (x.c[start:end].float() * x.beta[g]).reshape(-1)
        for bound in (7.0, -7.0):
            near = (xs - bound).abs() <= abs(bound) * 2.0**-7
            assert int(near.sum()) > 10, (g, bound)
            assert bool((xs == bound).any()) == (g % 3 == 2), (g, bound)


def test_exact_accumulation_is_recognised() -> None:
    exact = make_inputs(Shape(32, 16384, (256,)), "dswiglu", {}, 0, exact_gemm=True, device="cpu")
    normal = make_inputs(Shape(32, 256, (256,)), "dswiglu", {}, 0, device="cpu")
    for x, want in ((exact, True), (normal, False)):
        a, b = x.a.reshape(256, -1).double(), x.b[:, :, 0].double()
        assert exact_accumulation(a, b, a.abs() @ b.abs().T) is want
    a = exact.a.reshape(256, -1).double()
    b = exact.b[:, :, 0].double()
    assert exact_accumulation(a * 2.0**-30, b, (a * 2.0**-30).abs() @ b.abs().T)
    assert not exact_accumulation(a + 2.0**-20, b, (a + 2.0**-20).abs() @ b.abs().T)


@pytest.mark.parametrize("dtype", [BF16, FP16, FP32])
@pytest.mark.parametrize("value", [7.0, -7.0])
def test_neighbours_are_adjacent_in_the_dtype(dtype, value) -> None:
    spacing = 4 * torch.finfo(dtype).eps  # between 4 and 8
    assert sorted(neighbours(value, dtype)) == [value - spacing, value, value + spacing]


def test_shipped_configs_match_the_default_spec() -> None:
    specs = pytest.importorskip("dglu_build.specs")
    variants = specs.load_specs(Path(__file__).resolve().parents[2] / "kernel_specs/default.yaml")
    # act_out variants run in tests/gpu/test_act_out_gpu.py beside their siblings, which
    # SHIPPED lists; the block-scaled ones in tests/gpu/test_blockscaled_gpu.py
    # Blackwell's run in tests/gpu/test_sm100_gpu.py
    variants = [v for v in variants if v.ab_dtype == "bf16" and v.arch == "sm_90a"]
    shipped = [v for v in variants if not v.act_out]
    siblings = {v._replace(act_out=False) for v in variants if v.act_out}
    assert siblings and siblings <= set(shipped)
    assert len(SHIPPED) == len(set(SHIPPED)) == len(shipped)
    assert {
        (
            v.act_func,
            tuple(sorted(v.act_params)),
            v.c_dtype,
            v.d_dtype,
            v.dbias,
            (v.tile_m, v.tile_n),
            v.weight_mode,
            v.b_major,
            v.scheduler,
            (v.cluster_m, v.cluster_n),
            v.deterministic,
        )
        for v in shipped
    } == {key_fields(config) for config in SHIPPED}


class EmulatedDglu:
    """Stands in for the dglu module in tests/gpu/harness.py: both APIs run emulate().

    Discrete weights are read through b_ptrs as the device would: each pointer must be the
    address of one of the expert matrices inputs.expert_weights made (``matrices``).
    """

    def __init__(self, bug: str | None = None) -> None:
        self.bug = bug
        self.matrices: dict[int, torch.Tensor] = {}

    def grouped_gemm_dglu_wrapper_sm90(self, **arguments):
        x = self._inputs_of(arguments)
        m, n = x.a.shape[0], x.b.shape[0]
        d_row = torch.empty(m, 2 * n, 1, dtype=arguments["d_dtype"])
        dbias = (
            torch.zeros(x.b.shape[2], 2 * n, 1, dtype=torch.bfloat16)
            if arguments["generate_dbias"]
            else None
        )
        dprob = arguments["dprob_tensor"]
        emulate(_activation_of(arguments, d_row.dtype), x, d_row, dprob, dbias, self.bug, self._rounds(arguments))
        return {"d_row_tensor": d_row, "dprob_tensor": dprob, "dbias_tensor": dbias}

    def GroupedGemmDgluSm90(self, **samples):  # noqa: N802 (the class it stands in for)
        fake = self

        class Op:
            def check_support(self) -> bool:
                return True

            def compile(self) -> None:
                pass

            def execute(self, **arguments) -> None:
                d_row, dbias = arguments["d_row_tensor"], arguments["dbias_tensor"]
                activation = _activation_of(samples, d_row.dtype)
                x = fake._inputs_of(arguments)
                emulate(activation, x, d_row, arguments["dprob_tensor"], dbias, fake.bug, fake._rounds(samples))

        return Op()

    def _rounds(self, options) -> bool:
        """round_dgrad_to_input_dtype, unless the seeded bug ignores it."""
        return options.get("round_dgrad_to_input_dtype", False) and self.bug != "ignores-rounding"

    def _inputs_of(self, arguments) -> Inputs:
        """The call's tensors; B is b_tensor, or the matrices b_ptrs points at."""
        b = arguments.get("b_tensor")
        if b is None:
            pointers = arguments["b_ptrs"].tolist()
            if self.bug == "rotated-b_ptrs":  # expert g reads expert g + 1's matrix
                pointers = pointers[1:] + pointers[:1]
            b = torch.stack([self.matrices[p] for p in pointers], dim=2)
        return Inputs(
            a=arguments["a_tensor"],
            b=b,
            **{
                field: arguments[
                    "padded_offsets" if field == "padded_offsets" else f"{field}_tensor"
                ]
                for field in ("c", "padded_offsets", "alpha", "beta", "prob")
            },
        )


def _activation_of(arguments, d_dtype):
    params = {name: value for name, value in arguments.items() if name in ALL_CONSTANTS}
    return SimpleNamespace(act_func=arguments["act_func"], act_params=params, d_dtype=d_dtype)


ALL_CONSTANTS = {name for config in SHIPPED for name in config.act_params}


@pytest.fixture
def emulated_harness(monkeypatch: pytest.MonkeyPatch):
    """tests/gpu/harness.py on the CPU over EmulatedDglu (set .bug to seed one)."""
    import harness
    import inputs

    fake = EmulatedDglu()
    make_experts = inputs.expert_weights

    def registered_experts(*args, **kwargs):
        experts = make_experts(*args, **kwargs)
        fake.matrices.update({m.data_ptr(): m for m in experts.matrices})
        return experts

    monkeypatch.setattr(inputs, "expert_weights", registered_experts)
    monkeypatch.setattr(harness, "dglu", fake)
    monkeypatch.setattr(harness, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return harness, fake


def test_sweep_cases_pass_on_an_emulated_op(emulated_harness) -> None:
    harness, _ = emulated_harness
    from sweep import SWEEP_CASES, sweep_case

    cases = [sweep_case(i) for i in range(SWEEP_CASES)]
    assert {case.config for case in cases} == set(SHIPPED)
    assert {case.api for case in cases} == {"class", "wrapper"}
    for case in cases[::64]:
        harness.run_case(case)


@pytest.mark.parametrize("api", ["class", "wrapper"])
def test_the_harness_fails_a_seeded_bug(emulated_harness, api: str) -> None:
    harness, fake = emulated_harness
    fake.bug = "swapped"
    case = harness.Case(Config("dswiglu", BF16, FP16, True, WIDE), UNEVEN, 3, api=api)
    with pytest.raises(AssertionError, match=f"^d_row: .* via the {api} API"):
        harness.run_case(case)


@pytest.mark.parametrize("api", ["class", "wrapper"])
def test_the_harness_asks_for_rounded_r_and_checks_it(emulated_harness, api: str) -> None:
    """A case with round_dgrad passes round_dgrad_to_input_dtype=True and checks against the
    rounding reference: an op that ignores the option fails."""
    harness, fake = emulated_harness
    case = harness.Case(Config("dgeglu", BF16, FP32, True, NARROW), UNEVEN, 5, api=api, exact_gemm=True,
                        round_dgrad=True)
    harness.run_case(case)
    fake.bug = "ignores-rounding"
    with pytest.raises(AssertionError, match=f"^d_row: .* via the {api} API.*R rounded to bf16"):
        harness.run_case(case)


@pytest.mark.parametrize("b_major", ["k", "n"])
@pytest.mark.parametrize("api", ["class", "wrapper"])
def test_the_harness_passes_discrete_weights_through_b_ptrs(
    emulated_harness, api: str, b_major: str
) -> None:
    """A discrete case reaches the op as b_ptrs to separate matrices of the right layout;
    an op that reads the wrong expert fails a check."""
    harness, fake = emulated_harness
    config = Config("dgeglu", BF16, BF16, True, WIDE, weight_mode="discrete", b_major=b_major)
    case = harness.Case(config, UNEVEN, 4, api=api)
    harness.run_case(case)
    x = harness.case_inputs(case)
    strides = {"k": (UNEVEN.k, 1), "n": (1, UNEVEN.n)}[b_major]
    assert {m.stride() for m in x.experts.matrices} == {strides}
    assert len({m.data_ptr() for m in x.experts.matrices + x.experts.decoys}) == 2 * UNEVEN.l
    assert all(d.isnan().all() for d in x.experts.decoys)
    assert torch.equal(x.b, x.experts.stacked())
    fake.bug = "rotated-b_ptrs"
    with pytest.raises(AssertionError, match=f"^d_row: .* via the {api} API"):
        harness.run_case(case)
