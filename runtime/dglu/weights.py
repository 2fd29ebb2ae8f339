"""The op's weights: dense (N, K, L) B, or discrete per-expert (N, K) matrices behind b_ptrs.

As in the seed, the mode follows from the arguments: b_tensor (sample_b in the class API)
for dense weights; b_ptrs with n and b_dtype (num_experts, b_shape and b_dtype in the class
API) for discrete ones. Both or neither, or discrete weights missing one of their
arguments, is a ValueError. b_dtype must be A's dtype (A and B of one dtype); which
weights a variant takes, and how, is its manifest entry's. b_ptrs itself is checked with
the other tensors (dglu.validation) and never read on the host: the kernels read it on the
device, so a captured CUDA graph stays correct.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contract.front import FrontPolicy
from .contract.records import Record
from .front import dtype_name, operand_type

DENSE, DISCRETE = "dense", "discrete"


class DiscreteWeights(Record):
    """What discrete weights fix that no tensor shows, and the arguments that gave it."""

    n: int
    n_from: str
    k: int | None = None  # class API: b_shape's K, which A's K must equal
    l: int | None = None  # class API: num_experts, which b_ptrs' length must equal
    l_from: str = "b_ptrs"
    dtype: str = "bf16"  # b_dtype's element type name

    def given_scalars(self) -> dict[str, tuple[int, str]]:
        """The scalars these arguments fix, each with the argument it came from."""
        given = {"n": (self.n, self.n_from)}
        if self.k is not None:
            given["k"] = (self.k, "b_shape")
        if self.l is not None:
            given["l"] = (self.l, self.l_from)
        return given

    def check_dtype_of(self, a_name: str, a_dtype: str) -> None:
        """A and B have one dtype."""
        if a_dtype != self.dtype:
            raise ValueError(
                f"b_dtype: {self.dtype} differs from {a_name}'s dtype {a_dtype}; "
                "A and B must have the same dtype"
            )


def weight_mode(dense_name: str, dense: Any, discrete: Mapping[str, Any]) -> str:
    """DENSE or DISCRETE, from which of the weight arguments were given."""
    given = [name for name, value in discrete.items() if value is not None]
    if dense is not None and given:
        raise ValueError(
            f"{dense_name} and {', '.join(given)}: dense and discrete weights exclude each "
            "other; pass one mode"
        )
    if dense is not None:
        return DENSE
    if not given:
        raise ValueError(
            f"{dense_name}: required (the stacked (N, K, L) expert weights), got None; "
            f"for discrete weights pass {', '.join(discrete)} instead"
        )
    missing = [name for name, value in discrete.items() if value is None]
    if missing:
        raise ValueError(
            f"{', '.join(missing)}: required with {', '.join(given)} (discrete weights "
            f"take {', '.join(discrete)}), got None"
        )
    return DISCRETE


def check_b_major(mode: str, b_major: str) -> None:
    """b_major orders discrete weights' matrices; dense B's order is its strides' (K-major
    in the BF16 contract; K- or N-major block-scaled B)."""
    if mode == DENSE and b_major != "k":
        raise ValueError(
            f"b_major: {b_major!r} applies to discrete weights (b_ptrs) only; dense B's order "
            "follows its strides (BF16 B is K-major, stride (K, 1, N*K)): pass b_major='k'"
        )


def dense_b_major(b: Any) -> str:
    """"n" when dense B (N, K, L) has N contiguous (stride 1 along N, N > 1), else "k"."""
    return "n" if b.dim() >= 2 and b.shape[0] > 1 and b.stride(0) == 1 else "k"


def variant_b_major(policy: FrontPolicy, mode: str, b_major: str, strides_major: str) -> str:
    """The b_major of the call's variant, by the family's policy: discrete weights' option;
    dense B's is "k" (check ``dense_b_k_major``) or its strides' order ``strides_major``
    (``b_major_from_strides``), which b_major may name but not contradict."""
    if "dense_b_k_major" in policy.checks:
        check_b_major(mode, b_major)
    if mode == DISCRETE or "b_major_from_strides" not in policy.checks:
        return b_major
    if b_major not in ("k", strides_major):
        raise ValueError(
            f"b_major: {b_major!r}, but b_tensor's strides are {strides_major.upper()}-major; dense "
            "B's order follows its strides: pass b_major='k' (the default) or a matching B"
        )
    return strides_major


def _positive_int(name: str, value: Any) -> int:
    if type(value) is not int or value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


def _dtype_name(b_dtype: Any, policy: FrontPolicy) -> str:
    operand_refusal = policy.refused_operands.get(str(b_dtype).removeprefix("torch."))
    if operand_refusal is not None:
        operand_type(policy, "b_dtype", b_dtype)  # raises with the policy's reason
    return dtype_name(policy, "b_dtype", b_dtype)


def wrapper_discrete(n: Any, b_dtype: Any, policy: FrontPolicy) -> DiscreteWeights:
    """The wrapper's discrete weights: N from ``n``; L will come from b_ptrs' length.
    ``policy``: the family's, whose ``b_dtype`` rule says the matrices' dtypes."""
    dtype = _dtype_name(b_dtype, policy)
    return DiscreteWeights(n=_positive_int("n", n), n_from="n", dtype=dtype)


def class_discrete(num_experts: Any, b_shape: Any, b_dtype: Any, policy: FrontPolicy) -> DiscreteWeights:
    """The class API's discrete weights: (N, K) from ``b_shape``, L from ``num_experts``."""
    dtype = _dtype_name(b_dtype, policy)
    if (
        not isinstance(b_shape, tuple | list)
        or len(b_shape) != 2
        or not all(type(value) is int and value > 0 for value in b_shape)
    ):
        raise ValueError(f"b_shape: expected (N, K), two positive ints, got {b_shape!r}")
    n, k = b_shape
    return DiscreteWeights(
        n=n,
        n_from="b_shape",
        k=k,
        l=_positive_int("num_experts", num_experts),
        l_from="num_experts",
        dtype=dtype,
    )
