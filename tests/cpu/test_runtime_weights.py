"""dglu.weights: which weight mode a call's arguments ask for, and the discrete arguments."""

from __future__ import annotations

import pytest
from conftest_runtime import bf16_policy
from dglu.weights import (
    DENSE,
    DISCRETE,
    DiscreteWeights,
    check_b_major,
    class_discrete,
    weight_mode,
    wrapper_discrete,
)

WRAPPER = ("b_ptrs", "n", "b_dtype")


POLICY = bf16_policy()


def discrete_args(*values) -> dict[str, object]:
    return dict(zip(WRAPPER, values, strict=True))


def test_dense_or_discrete_by_what_is_given() -> None:
    assert weight_mode("b_tensor", object(), discrete_args(None, None, None)) == DENSE
    assert weight_mode("b_tensor", None, discrete_args(object(), 96, "bf16")) == DISCRETE
    assert weight_mode("b_tensor", None, {"b_ptrs": object()}) == DISCRETE


@pytest.mark.parametrize(
    ("dense", "discrete", "message"),
    [
        (
            object(),
            discrete_args(object(), None, None),
            "b_tensor and b_ptrs: dense and discrete weights exclude each other",
        ),
        (
            object(),
            discrete_args(None, 96, None),
            "b_tensor and n: dense and discrete weights exclude each other",
        ),
        (
            None,
            discrete_args(None, None, None),
            "b_tensor: required (the stacked (N, K, L) expert weights), got None; "
            "for discrete weights pass b_ptrs, n, b_dtype instead",
        ),
        (
            None,
            discrete_args(object(), None, None),
            "n, b_dtype: required with b_ptrs (discrete weights take b_ptrs, n, b_dtype)",
        ),
        (
            None,
            discrete_args(None, 96, "bf16"),
            "b_ptrs: required with n, b_dtype",
        ),
    ],
)
def test_both_neither_or_part_is_refused(dense, discrete, message) -> None:
    with pytest.raises(ValueError) as raised:
        weight_mode("b_tensor", dense, discrete)
    assert str(raised.value).startswith(message), str(raised.value)


def test_wrapper_arguments() -> None:
    torch = pytest.importorskip("torch")
    assert wrapper_discrete(160, torch.bfloat16, POLICY) == DiscreteWeights(n=160, n_from="n")
    for n in (0, -32, 96.0, True, "96"):
        with pytest.raises(ValueError, match=f"^n: expected a positive int, got {n!r}$"):
            wrapper_discrete(n, torch.bfloat16, POLICY)
    assert wrapper_discrete(96, torch.float16, POLICY).dtype == "fp16"  # the variant checks A's
    for dtype in (torch.int32, "bf16"):
        with pytest.raises(ValueError, match="^b_dtype: expected the torch dtype of the experts'"):
            wrapper_discrete(96, dtype, POLICY)
    with pytest.raises(ValueError, match="^b_dtype: got torch.uint8; no FP4 tensor cores on Hopper"):
        wrapper_discrete(96, torch.uint8, POLICY)  # the seed's FP4 dtype: the family's reason


def test_class_arguments() -> None:
    torch = pytest.importorskip("torch")
    weights = class_discrete(8, (160, 200), torch.bfloat16, POLICY)
    assert (weights.n, weights.k, weights.l) == (160, 200, 8)
    assert (weights.n_from, weights.l_from, weights.dtype) == ("b_shape", "num_experts", "bf16")
    assert class_discrete(1, [32, 8], torch.bfloat16, POLICY).k == 8
    for shape in ((160,), (160, 0), (160, 200, 1), "160x200", (160.0, 200)):
        with pytest.raises(ValueError, match=r"^b_shape: expected \(N, K\), two positive ints"):
            class_discrete(8, shape, torch.bfloat16, POLICY)
    with pytest.raises(ValueError, match="^num_experts: expected a positive int, got 0$"):
        class_discrete(0, (160, 200), torch.bfloat16, POLICY)
    assert class_discrete(8, (160, 200), torch.float32, POLICY).dtype == "fp32"
    with pytest.raises(ValueError, match="^b_dtype: expected the torch dtype.*got torch.int8"):
        class_discrete(8, (160, 200), torch.int8, POLICY)


def test_b_dtype_must_be_a_dtype() -> None:
    torch = pytest.importorskip("torch")
    weights = wrapper_discrete(96, torch.bfloat16, POLICY)
    weights.check_dtype_of("a_tensor", "bf16")
    with pytest.raises(ValueError, match="^b_dtype: bf16 differs from a_tensor's dtype fp16"):
        weights.check_dtype_of("a_tensor", "fp16")


def test_b_major_n_is_for_discrete_weights() -> None:
    check_b_major(DENSE, "k")
    check_b_major(DISCRETE, "k")
    check_b_major(DISCRETE, "n")
    with pytest.raises(ValueError, match="^b_major: 'n' applies to discrete weights"):
        check_b_major(DENSE, "n")
