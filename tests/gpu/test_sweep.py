"""Randomized sweep (sweep.py draws the cases), every output element checked.

Every failure names the fixed base seed and the case index;
``pytest 'tests/gpu/test_sweep.py::test_sweep[case17]'`` reruns one case (with
DGLU_SWEEP_SEED=<base seed> when the failing run used another base seed).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the GPU tests need torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from configs import SHIPPED  # noqa: E402
from harness import run_case  # noqa: E402
from sweep import BASE_SEED, SWEEP_CASES, sweep_case  # noqa: E402

pytestmark = pytest.mark.gpu


def test_sweep_draws_every_shipped_variant_and_both_apis() -> None:
    cases = [sweep_case(i) for i in range(SWEEP_CASES)]
    assert {case.config for case in cases} == set(SHIPPED)
    assert {case.api for case in cases} == {"class", "wrapper"}
    assert any(case.shape.valid_m == 0 for case in cases)
    assert any(case.shape.l == 1 for case in cases) and any(case.shape.l == 1024 for case in cases)


@pytest.mark.parametrize("index", range(SWEEP_CASES), ids=lambda i: f"case{i}")
def test_sweep(index: int) -> None:
    case = sweep_case(index)
    try:
        run_case(case)
    except AssertionError as error:
        raise AssertionError(
            f"sweep case {index} of base seed {BASE_SEED} (DGLU_SWEEP_SEED={BASE_SEED}; "
            f"rerun: pytest 'tests/gpu/test_sweep.py::test_sweep[case{index}]'): {error}"
        ) from error
