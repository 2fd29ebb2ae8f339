"""Trace-time checks of a JAX call: the torch path's validation code, applied to shapes and
dtypes (nothing here reads array values or needs a GPU).

JAX arrays are row-major and dense, so each one is presented to dglu.validation as a
tensor of its shape with contiguous strides (``ArraySpec``); dense weights, a row-major
``(L, N, K)`` array, are presented as the torch path's K-major ``(N, K, L)`` view of the
same bytes. Discrete weights' ``b_ptrs`` is an int64 ``(L,)`` array (jax_enable_x64), or
the same bytes as a uint32 ``(L, 2)`` array. Dtypes appear in messages with torch's
spelling (``torch.bfloat16``), as in the torch path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import validation
from ..dtypes import ELEMENT_TYPES
from ..options import check_options, output_dtype_name
from ..weights import DISCRETE, DiscreteWeights, _positive_int, check_b_major, weight_mode
from .config import ELEMENT_NAMES, CallConfig


class ArraySpec:
    """A JAX array's shape and dtype, with the few tensor methods dglu.validation reads."""

    def __init__(self, shape: tuple[int, ...], dtype: str, strides: tuple[int, ...] | None = None):
        self.shape = tuple(shape)
        self.dtype = f"torch.{dtype}"  # compared and printed as the torch path does
        self._itemsize = ELEMENT_TYPES[ELEMENT_NAMES[dtype]].size if dtype in ELEMENT_NAMES else 1
        self._strides = strides or _row_major(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return self._itemsize

    def data_ptr(self) -> int:
        return 0  # unknown under tracing; XLA's buffers are aligned past every rule's need


def _row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _dtype_name(array: Any) -> str:
    import numpy as np

    return np.dtype(array.dtype).name


def _check_rank_and_dtype(name: str, role: str, spec: ArraySpec, dtype: str) -> None:
    """validation's rank and dtype rule of ``role``, for a JAX array."""
    rule = validation.RULES[role]
    ranks = (rule.rank - 1, rule.rank) if rule.rank2_ok else (rule.rank,)
    if spec.dim() not in ranks:
        raise ValueError(
            f"{name}: expected shape {rule.shape_text}, got rank {spec.dim()} shape {spec.shape}"
        )
    if ELEMENT_NAMES.get(dtype) not in rule.dtypes:
        allowed = ", ".join(ELEMENT_TYPES[t].torch_name for t in rule.dtypes)
        raise ValueError(f"{name}: dtype {dtype} is not accepted; expected one of {allowed}")


def dense_weights_spec(b: Any) -> ArraySpec:
    """A row-major (L, N, K) array as the (N, K, L) K-major tensor the torch path takes."""
    if len(b.shape) != 3:
        raise ValueError(
            f"b_tensor: expected a row-major (L, N, K) array, got rank {len(b.shape)} "
            f"shape {tuple(b.shape)}"
        )
    l, n, k = b.shape
    return ArraySpec((n, k, l), _dtype_name(b), strides=(k, 1, n * k))


def b_ptrs_spec(b_ptrs: Any) -> ArraySpec:
    """An int64 (L,) array, or a uint32 (L, 2) array of the same bytes, as int64 (L,)."""
    dtype, shape = _dtype_name(b_ptrs), tuple(b_ptrs.shape)
    if dtype == "uint32" and len(shape) == 2 and shape[1] == 2:
        return ArraySpec((shape[0],), "int64")
    if dtype != "int64":
        raise ValueError(
            f"b_ptrs: dtype {dtype} is not accepted; expected int64 (L,) device addresses "
            "(jax_enable_x64), or uint32 (L, 2) holding the same bytes"
        )
    return ArraySpec(shape, dtype)


def check_call(
    arrays: Mapping[str, Any], argument_names: Mapping[str, str], options: Mapping[str, Any]
) -> tuple[CallConfig, validation.Dims]:
    """Check a call's arrays (role -> array; "b" or "b_ptrs" for the weights, "dprob" may
    be absent) and its seed-named options; return its CallConfig and problem sizes."""
    discrete_args = {
        "b_ptrs": arrays.get("b_ptrs"),
        "n": options["n"],
        "b_dtype": options["b_dtype"],
    }
    mode = weight_mode("b_tensor", arrays.get("b"), discrete_args)
    checked = check_options(**_option_arguments(options))
    check_b_major(mode, checked.b_major)
    discrete = _discrete(options["n"], options["b_dtype"]) if mode == DISCRETE else None
    d_dtype = output_dtype_name("d_dtype", _numpy_name(options["d_dtype"]))
    if not isinstance(options["generate_dbias"], bool):
        raise ValueError(f"generate_dbias: expected a bool, got {options['generate_dbias']!r}")
    specs = {}
    for role, array in arrays.items():
        name = argument_names[role]
        if role == "b":
            spec = dense_weights_spec(array)
        elif role == "b_ptrs":
            spec = b_ptrs_spec(array)
        else:
            spec = ArraySpec(tuple(array.shape), _dtype_name(array))
        _check_rank_and_dtype(name, role, spec, spec.dtype.removeprefix("torch."))
        specs[role] = (name, spec)
    dims = validation._dims(specs, checked.b_major, discrete)
    for role, (name, spec) in specs.items():
        validation._check_layout(name, spec, validation.RULES[role], dims)
    config = CallConfig(
        weight_mode=mode,
        n=discrete.n if discrete else 0,
        options=checked,
        d_dtype=d_dtype,
        dbias=options["generate_dbias"],
    )
    return config, dims


def _numpy_name(dtype: Any) -> Any:
    """A JAX/numpy dtype's name (torch-style names pass through), None unchanged."""
    import numpy as np

    if dtype is None or isinstance(dtype, str):
        return dtype
    try:
        return np.dtype(dtype).name
    except TypeError:
        return dtype  # not a dtype: output_dtype_name names it in its error


def _discrete(n: Any, b_dtype: Any) -> DiscreteWeights:
    """The discrete weights of ``n`` and ``b_dtype`` (bf16, as in the torch path)."""
    if _numpy_name(b_dtype) not in ("bfloat16", "torch.bfloat16"):
        raise ValueError(
            f"b_dtype: expected jnp.bfloat16 (discrete weights are bf16 matrices), got {b_dtype!r}"
        )
    return DiscreteWeights(n=_positive_int("n", n), n_from="n")


def _option_arguments(options: Mapping[str, Any]) -> dict[str, Any]:
    """The seed-named options check_options takes, acc_dtype as the torch path spells it."""
    names = (
        "mma_tiler_mn", "cluster_shape_mn", "sf_vec_size", "vector_f32", "m_aligned",
        "discrete_col_sfd", "act_func", "geglu_alpha", "glu_clamp_max", "glu_clamp_min",
        "linear_offset", "situ_beta1", "situ_beta2", "b_major", "epilogue_op",
        "use_dynamic_sched", "cd_major",
    )  # fmt: skip
    acc = _numpy_name(options["acc_dtype"])
    return {
        "acc_dtype": "torch.float32" if acc == "float32" else acc,
        **{name: options[name] for name in names},
    }
