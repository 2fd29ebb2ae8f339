"""Deterministic mode (deterministic=True): D, dprob and dbias bitwise identical run to run
and across the static and dynamic schedulers, and correct against the float64 reference.

Every shipped deterministic variant runs REPEATS times on one problem with many tiles per
CTA and several n-tiles per row (so dprob sums partials of several CTAs and dbias of
several m-tiles per expert, where the fast path's float atomics would make the order, and
so the rounding, vary); each run's outputs must equal the first run's bit for bit. The
static and dynamic variants of one configuration must give the same bits too.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import SHIPPED, Config  # noqa: E402
from harness import Case, case_inputs, check_outputs, class_op, execute  # noqa: E402
from inputs import Shape, initial_dbias, initial_dprob, poisoned_d  # noqa: E402

pytestmark = pytest.mark.gpu

REPEATS = 20
SEED = 1107
# uneven experts, one empty, 2560 rows: 20 m-tiles, 4 n-tiles of 128 columns per row
SHAPE = Shape(n=512, k=256, expert_rows=(768, 0, 256, 1536), extra_rows=64)
DETERMINISTIC = [config for config in SHIPPED if config.deterministic]
STATIC_DYNAMIC = [
    config for config in DETERMINISTIC
    if config.scheduler == "static" and dataclasses.replace(config, scheduler="dynamic") in DETERMINISTIC
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes, for a comparison that tells -0.0 from 0.0 and NaN payloads apart."""
    return t.detach().contiguous().view(torch.uint8).clone()


def _run(config: Config, case: Case, x) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One class-API call on fresh copies of the same starting buffers; returns D, dprob, dbias."""
    d_row = poisoned_d(SHAPE.m, SHAPE.n, config.d_dtype)
    dprob = initial_dprob(SHAPE.m, case.seed)
    dbias = initial_dbias(SHAPE.l, SHAPE.n, case.seed) if config.dbias else None
    execute(class_op(config, x, d_row, dprob, dbias, config.tile), x, d_row, dprob, dbias)
    torch.cuda.synchronize()
    return d_row, dprob, dbias


def _outputs_bits(outputs) -> list[torch.Tensor | None]:
    return [None if t is None else _bits(t) for t in outputs]


def _assert_same_bits(first, other, context: str) -> None:
    for name, a, b in zip(("d_row", "dprob", "dbias"), first, other):
        if a is None:
            assert b is None, f"{context}: {name} present in one run only"
            continue
        differing = (a != b).sum().item()
        assert differing == 0, f"{context}: {name} differs in {differing} bytes"


def test_deterministic_variants_are_shipped() -> None:
    assert DETERMINISTIC and STATIC_DYNAMIC


@pytest.mark.parametrize("config", DETERMINISTIC, ids=str)
def test_repeated_calls_give_identical_bits(config: Config) -> None:
    case = Case(config, SHAPE, SEED)
    x = case_inputs(case)
    first = _run(config, case, x)
    check_outputs(
        case, x, first[0], first[1], initial_dprob(SHAPE.m, SEED), first[2],
        initial_dbias(SHAPE.l, SHAPE.n, SEED) if config.dbias else None,
    )
    first_bits = _outputs_bits(first)
    for repeat in range(1, REPEATS):
        _assert_same_bits(first_bits, _outputs_bits(_run(config, case, x)), f"{case.describe()}, run {repeat}")


@pytest.mark.parametrize("config", STATIC_DYNAMIC, ids=str)
def test_static_and_dynamic_give_identical_bits(config: Config) -> None:
    dynamic = dataclasses.replace(config, scheduler="dynamic")
    case = Case(config, SHAPE, SEED)
    x = case_inputs(case)
    _assert_same_bits(
        _outputs_bits(_run(config, case, x)), _outputs_bits(_run(dynamic, case, x)),
        f"{case.describe()} against its dynamic variant",
    )
