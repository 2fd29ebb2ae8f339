"""Check the op's tensors against the seed's BF16 contract and describe them as a Problem.

Order of the checks, all before anything is allocated or launched:
1. each argument is a torch.Tensor of an accepted rank and dtype;
2. M and K come from A; N and L from B, or for discrete weights (dglu.weights) N from n
   (or b_shape) and L from b_ptrs' length (or num_experts); then N % 32 == 0, K rows of
   16-byte multiples, 1 <= L <= 1024, A and B of one dtype (and A's K equal to b_shape's);
3. each tensor's shape and strides are the seed's (A (M, K[, 1]) K-major; B (N, K, L) with
   stride (K, 1, N*K), or (1, N, N*K) for b_major "n"; b_ptrs (L,) int64, contiguous;
   C and D_row (M, 2N[, 1]) N-major; padded_offsets, alpha, beta (L,); prob, dprob
   (M, 1, 1); dbias (L, 2N, 1)); a dimension of size 1 may have any stride; data pointers
   are aligned (16 bytes for A, B, C, D_row, dbias; one element for the vectors);
4. every tensor lives on the same CUDA device.
``check_offset_values`` checks padded_offsets' values once they are on the host. The
addresses inside b_ptrs are the caller's to keep valid, (N, K) in b_major order and
16-byte aligned: they are only read on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .dtypes import ELEMENT_TYPES, FLOAT_TYPES, element_type_of
from .problem import Problem, TensorView
from .weights import DiscreteWeights

MAX_EXPERTS = 1024
COLUMN_BLOCK = 32
TMA_ALIGN_BYTES = 16


class Dims(NamedTuple):
    """Problem sizes, and where they were read from (for error messages)."""

    m: int
    n: int
    k: int
    l: int
    b_major: str
    origin: str

    def explain(self) -> str:
        return f"M={self.m}, N={self.n}, K={self.k}, L={self.l} ({self.origin})"


class _Rule(NamedTuple):
    shape_text: str
    rank: int
    shape: Callable[[Dims | Problem], tuple[int, ...]]  # outputs' rules get the Problem
    strides: Callable[[Dims | Problem], tuple[int, ...]]
    dtypes: tuple[str, ...]
    align: int | None  # bytes; None: one element
    rank2_ok: bool = False


def _b_strides(d: Dims) -> tuple[int, ...]:
    return (d.k, 1, d.n * d.k) if d.b_major == "k" else (1, d.n, d.n * d.k)


_CD = _Rule(
    "(M, 2N, 1)",
    3,
    lambda d: (d.m, 2 * d.n, 1),
    lambda d: (2 * d.n, 1, 2 * d.m * d.n),
    FLOAT_TYPES,
    TMA_ALIGN_BYTES,
    rank2_ok=True,
)
_PER_EXPERT = _Rule("(L,)", 1, lambda d: (d.l,), lambda d: (1,), ("fp32",), None)
_PER_ROW = _Rule("(M, 1, 1)", 3, lambda d: (d.m, 1, 1), lambda d: (1, 1, 1), ("fp32",), None)

RULES: dict[str, _Rule] = {
    "a": _Rule(
        "(M, K, 1)",
        3,
        lambda d: (d.m, d.k, 1),
        lambda d: (d.k, 1, d.m * d.k),
        FLOAT_TYPES,
        TMA_ALIGN_BYTES,
        rank2_ok=True,
    ),
    "b": _Rule("(N, K, L)", 3, lambda d: (d.n, d.k, d.l), _b_strides, FLOAT_TYPES, TMA_ALIGN_BYTES),
    "c": _CD,
    "d_row": _CD,
    "padded_offsets": _Rule("(L,)", 1, lambda d: (d.l,), lambda d: (1,), ("i32",), None),
    "alpha": _PER_EXPERT,
    "beta": _PER_EXPERT,
    "prob": _PER_ROW,
    "dprob": _PER_ROW,
    "b_ptrs": _Rule("(L,)", 1, lambda d: (d.l,), lambda d: (1,), ("i64",), None),
    "dbias": _Rule(
        "(L, 2N, 1)",
        3,
        lambda d: (d.l, 2 * d.n, 1),
        lambda d: (2 * d.n, 1, 1),
        ("bf16",),
        TMA_ALIGN_BYTES,
    ),
}

TensorArgs = Mapping[str, tuple[str, Any]]  # role -> (argument name, tensor)


def _check_type_and_rank(name: str, tensor: Any, rule: _Rule) -> None:
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor of shape {rule.shape_text}, got "
            f"{type(tensor).__name__}"
        )
    ranks = (rule.rank - 1, rule.rank) if rule.rank2_ok else (rule.rank,)
    if tensor.dim() not in ranks:
        raise ValueError(
            f"{name}: expected shape {rule.shape_text}, got rank {tensor.dim()} "
            f"shape {tuple(tensor.shape)}"
        )
    element = element_type_of(tensor.dtype)
    if element is None or element.name not in rule.dtypes:
        allowed = ", ".join(f"torch.{ELEMENT_TYPES[t].torch_name}" for t in rule.dtypes)
        raise ValueError(f"{name}: dtype {tensor.dtype} is not accepted; expected one of {allowed}")


def _sources(args: TensorArgs, discrete: DiscreteWeights | None) -> tuple[int, str, int, str]:
    """N, the argument it comes from, L, the argument it comes from."""
    if discrete is None:
        b_name, b = args["b"]
        return b.shape[0], b_name, b.shape[2], b_name
    if discrete.l is not None:
        return discrete.n, discrete.n_from, discrete.l, discrete.l_from
    b_ptrs_name, b_ptrs = args["b_ptrs"]
    return discrete.n, discrete.n_from, b_ptrs.shape[0], b_ptrs_name


def _dims(args: TensorArgs, b_major: str, discrete: DiscreteWeights | None) -> Dims:
    a_name, a = args["a"]
    n, n_from, l, l_from = _sources(args, discrete)
    nl_origin = f"N, L from {n_from}" if n_from == l_from else f"N from {n_from}; L from {l_from}"
    dims = Dims(
        m=a.shape[0],
        n=n,
        k=a.shape[1],
        l=l,
        b_major=b_major,
        origin=f"M, K from {a_name}; {nl_origin}",
    )
    if dims.n <= 0 or dims.n % COLUMN_BLOCK:
        raise ValueError(
            f"{n_from}: N = {dims.n} must be a positive multiple of {COLUMN_BLOCK} "
            f"(gate/input columns come in blocks of {COLUMN_BLOCK})"
        )
    if not 1 <= dims.l <= MAX_EXPERTS:
        raise ValueError(f"{l_from}: L = {dims.l} experts, expected 1..{MAX_EXPERTS}")
    k_multiple = TMA_ALIGN_BYTES // a.element_size()
    if dims.k <= 0 or dims.k % k_multiple:
        raise ValueError(
            f"{a_name}: K = {dims.k} must be a positive multiple of {k_multiple} "
            f"(rows of {a.dtype} must span a multiple of {TMA_ALIGN_BYTES} bytes)"
        )
    if discrete is None:
        _check_same_dtype(a_name, a, *args["b"])
    else:
        _check_discrete(a_name, a, discrete)
    return dims


def _check_same_dtype(a_name: str, a: Any, b_name: str, b: Any) -> None:
    if a.dtype != b.dtype:
        raise ValueError(
            f"{b_name}: dtype {b.dtype} differs from {a_name}'s {a.dtype}; "
            "A and B must have the same dtype"
        )


def _check_discrete(a_name: str, a: Any, discrete: DiscreteWeights) -> None:
    """A against what the discrete weights' arguments say of B: its dtype and K."""
    b_dtype = f"torch.{ELEMENT_TYPES[discrete.dtype].torch_name}"
    if str(a.dtype) != b_dtype:
        raise ValueError(
            f"{a_name}: dtype {a.dtype} differs from b_dtype {b_dtype}; "
            "A and B must have the same dtype"
        )
    if discrete.k is not None and a.shape[1] != discrete.k:
        raise ValueError(
            f"{a_name}: K = {a.shape[1]} differs from b_shape's K = {discrete.k} "
            "(each expert's matrix is (N, K))"
        )


def _check_layout(name: str, tensor: Any, rule: _Rule, dims: Dims) -> None:
    shape = rule.shape(dims)
    actual = tuple(tensor.shape)
    if actual != shape and not (rule.rank2_ok and actual + (1,) == shape):
        raise ValueError(
            f"{name}: shape {actual} does not match {rule.shape_text} = {shape} "
            f"with {dims.explain()}"
        )
    expected = rule.strides(dims)
    for axis, (size, stride) in enumerate(zip(actual, tensor.stride(), strict=True)):
        if size > 1 and stride != expected[axis]:
            raise ValueError(
                f"{name}: strides {tuple(tensor.stride())} differ from the required "
                f"{expected[:len(actual)]} (dimension {axis}); pass a contiguous "
                "tensor in the seed layout"
            )
    align = rule.align or tensor.element_size()
    if tensor.data_ptr() % align:
        raise ValueError(f"{name}: data pointer {tensor.data_ptr():#x} is not {align}-byte aligned")


def _check_devices(args: TensorArgs) -> None:
    first_name, first = next(iter(args.values()))
    if first.device.type != "cuda":
        raise ValueError(f"{first_name}: expected a CUDA tensor, got one on {first.device}")
    for name, tensor in args.values():
        if tensor.device != first.device:
            raise ValueError(
                f"{name}: on {tensor.device}, but {first_name} is on {first.device}; "
                "all tensors must share one CUDA device"
            )


def describe_tensors(
    args: TensorArgs, b_major: str, discrete: DiscreteWeights | None = None
) -> Problem:
    """Check every tensor (see the module docstring) and return the call's Problem.

    ``args`` holds "b" for dense weights, or (with ``discrete``) "b_ptrs" when the call has
    them; its views then include "b_expert", the template of one expert's descriptor.
    """
    for role, (name, tensor) in args.items():
        _check_type_and_rank(name, tensor, RULES[role])
    dims = _dims(args, b_major, discrete)
    for role, (name, tensor) in args.items():
        _check_layout(name, tensor, RULES[role], dims)
    _check_devices(args)
    views = {role: _view(role, tensor, dims) for role, (_, tensor) in args.items()}
    if discrete is not None and "b_ptrs" in views:
        views["b_expert"] = _expert_template(views["b_ptrs"], dims, discrete.dtype)
    return Problem(m=dims.m, n=dims.n, k=dims.k, l=dims.l, tensors=views)


def _expert_template(b_ptrs: TensorView, dims: Dims, dtype: str) -> TensorView:
    """One expert's (N, K, 1) matrix in b_major order, for the b_expert descriptor template.

    Its address is b_ptrs' own rounded down to 16 bytes (inside the same allocation, which
    CUDA aligns to at least 256): the b_descriptors kernel puts each expert's address from
    b_ptrs into its copy, so the template's address is never read.
    """
    return TensorView(
        device=b_ptrs.device,
        pointer=b_ptrs.pointer - b_ptrs.pointer % TMA_ALIGN_BYTES,
        shape=(dims.n, dims.k, 1),
        strides=_b_strides(dims),
        dtype=dtype,
    )


def _view(role: str, tensor: Any, sizes: Dims | Problem) -> TensorView:
    """A checked tensor as the kernels see it: seed-rank shape, the seed's strides."""
    rule = RULES[role]
    return TensorView(
        device=tensor.device.index,
        pointer=tensor.data_ptr(),
        shape=rule.shape(sizes),
        strides=rule.strides(sizes),
        dtype=element_type_of(tensor.dtype).name,
    )


def output_view(role: str, tensor: Any, problem: Problem) -> TensorView:
    """The view of an output the runtime allocated itself in the seed layout (unchecked)."""
    return _view(role, tensor, problem)


def check_offset_values(name: str, values: Sequence[int], m: int, m_aligned: int) -> int:
    """Check cumulative expert end offsets against M; return valid_m (the last one)."""
    previous = 0
    for index, value in enumerate(values):
        if value % m_aligned:
            raise ValueError(f"{name}: entry {index} = {value} is not a multiple of {m_aligned}")
        if value < previous:
            before = f"entry {index - 1} = {previous}" if index else "0"
            raise ValueError(
                f"{name}: entry {index} = {value} is smaller than {before}; "
                "offsets are cumulative expert ends and never decrease"
            )
        previous = value
    if previous > m:
        raise ValueError(
            f"{name}: the last entry (valid_m = {previous}) exceeds M = {m}, "
            "the number of rows of A"
        )
    return previous
