"""dglu from JAX: grouped GEMM + dGLU backward as an XLA FFI custom call, usable under
``jax.jit`` and from eager code, launching the installed cubins on XLA's stream.

``import dglu`` never imports this package (nor jax). The handler is Python (ctypes,
dglu.jax.ffi): no compiled extension, no CuTe DSL at run time.

Arguments follow the torch wrapper's seed names, as JAX arrays:
- A (M, K[, 1]) and C (M, 2N[, 1]) row-major; padded_offsets (L,) int32; alpha, beta (L,)
  and prob (M, 1, 1) float32;
- dense weights: ``b_tensor``, one row-major (L, N, K) array (the same bytes as the torch
  path's K-major (N, K, L) view); discrete weights: ``b_ptrs``, (L,) int64 device addresses
  of per-expert (N, K) bf16 matrices (jax_enable_x64; or uint32 (L, 2) of the same bytes),
  with ``n`` and ``b_dtype=jnp.bfloat16``. The caller keeps those expert arrays alive and
  unmoved for every execution of the traced computation.
- ``dprob_tensor`` (optional): accumulated into and returned as a new array (the given one
  is never mutated); None starts from zeros.

Returns ``DgluResults`` (a NamedTuple, in the seed's order): d_row_tensor (M, 2N, 1) in
d_dtype (default bf16), dprob_tensor (M, 1, 1) float32, dbias_tensor (L, 2N, 1) bf16 with
generate_dbias=True else None; the block-scaled outputs are None. Rows of D_row past
valid_m = padded_offsets[-1] (owned by no expert) are left unwritten, as in the torch path.

Shapes, dtypes and options are checked at trace time by the torch path's validation
(dglu.jax.checks). Not checked under tracing: padded_offsets' values (the kernels clamp
their walk to A's rows, so malformed offsets give wrong numbers, never out-of-bounds
accesses) and the addresses inside b_ptrs (read only on the device).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..options import check_absent
from .checks import check_call
from .config import CallConfig, DPROB_ARG, DPROB_RET, config_from_attributes

TARGET = "dglu_grouped_gemm_dglu"
PLATFORM = "CUDA"
BLOCK_SCALED = "block-scaled (FP8/FP4) operation is not available in dglu's SM90 BF16 backend"
ARGUMENT_NAMES = {
    "a": "a_tensor",
    "b": "b_tensor",
    "b_ptrs": "b_ptrs",
    "c": "c_tensor",
    "padded_offsets": "padded_offsets",
    "alpha": "alpha_tensor",
    "beta": "beta_tensor",
    "prob": "prob_tensor",
    "dprob": "dprob_tensor",
}


class DgluResults(NamedTuple):
    """The op's outputs in the seed's order (a pytree: returnable from jitted code)."""

    d_row_tensor: Any
    d_col_tensor: Any
    dprob_tensor: Any
    dbias_tensor: Any
    amax_tensor: Any
    sfd_row_tensor: Any
    sfd_col_tensor: Any


@functools.cache
def _register_gpu_target() -> None:
    """Register the handler for XLA:GPU once (at the first trace)."""
    from .ffi import Handler, register

    def handle(call: Any) -> None:
        from .launch import launch

        launch(call, config_from_attributes(call.attrs))

    register(TARGET, Handler(handle, command_buffer_compatible=True), PLATFORM)


@functools.partial(jax.jit, static_argnames=("config",))
def _custom_call(a, weights, c, padded_offsets, alpha, beta, prob, dprob, *, config: CallConfig):
    m, n2 = c.shape[0], 2 * (config.n or weights.shape[1])
    l = padded_offsets.shape[0]
    scalars = {"m": m, "n": n2 // 2, "k": a.shape[1], "l": l, "n2": n2, "l_n2": l * n2}
    if dprob is None:
        dprob = jnp.zeros((m, 1, 1), jnp.float32)
    results = [
        jax.ShapeDtypeStruct((m, n2, 1), jnp.dtype(_NUMPY[config.d_dtype])),
        jax.ShapeDtypeStruct((m, 1, 1), jnp.float32),
    ]
    if config.dbias:
        results.append(jax.ShapeDtypeStruct((l, n2, 1), jnp.bfloat16))
    results += [jax.ShapeDtypeStruct(s, jnp.dtype(t)) for s, t in config.workspace_shapes(scalars)]
    outputs = jax.ffi.ffi_call(TARGET, results, input_output_aliases={DPROB_ARG: DPROB_RET})(
        a, weights, c, padded_offsets, alpha, beta, prob, dprob.reshape(m, 1, 1),
        **config.attributes(),
    )  # fmt: skip
    return outputs[0], outputs[1], outputs[2] if config.dbias else None


_NUMPY = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def grouped_gemm_dglu_jax(
    a_tensor: Any,
    c_tensor: Any,
    sfa_tensor: Any = None,
    *,
    padded_offsets: Any,
    alpha_tensor: Any,
    beta_tensor: Any,
    prob_tensor: Any,
    dprob_tensor: Any = None,
    b_tensor: Any = None,
    sfb_tensor: Any = None,
    b_ptrs: Any = None,
    sfb_ptrs: Any = None,
    n: int | None = None,
    b_dtype: Any = None,
    b_major: str = "k",
    norm_const_tensor: Any = None,
    acc_dtype: Any = None,
    d_dtype: Any = None,
    cd_major: str = "n",
    mma_tiler_mn: tuple[int, int] | None = None,
    cluster_shape_mn: tuple[int, int] | None = None,
    sf_vec_size: int = 16,
    vector_f32: bool = False,
    m_aligned: int = 256,
    discrete_col_sfd: bool = False,
    act_func: str = "dswiglu",
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    linear_offset: float = 1.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    epilogue_op: str | None = None,
    generate_dbias: bool = False,
    use_dynamic_sched: bool = False,
) -> DgluResults:
    """Grouped GEMM + dGLU backward of JAX arrays (see the package docstring)."""
    check_absent(
        BLOCK_SCALED,
        NotImplementedError,
        sfa_tensor=sfa_tensor,
        sfb_tensor=sfb_tensor,
        sfb_ptrs=sfb_ptrs,
        norm_const_tensor=norm_const_tensor,
    )
    options = dict(locals())
    arrays = {
        "a": a_tensor,
        **({"b": b_tensor} if b_tensor is not None else {}),
        **({"b_ptrs": b_ptrs} if b_ptrs is not None else {}),
        "c": c_tensor,
        "padded_offsets": padded_offsets,
        "alpha": alpha_tensor,
        "beta": beta_tensor,
        "prob": prob_tensor,
        **({"dprob": dprob_tensor} if dprob_tensor is not None else {}),
    }
    config, _ = check_call(arrays, ARGUMENT_NAMES, options)
    _register_gpu_target()
    weights = b_ptrs if b_ptrs is not None else b_tensor
    d_row, dprob, dbias = _custom_call(
        a_tensor.reshape(a_tensor.shape[0], a_tensor.shape[1]),
        weights,
        c_tensor.reshape(c_tensor.shape[0], c_tensor.shape[1]),
        padded_offsets,
        alpha_tensor,
        beta_tensor,
        prob_tensor,
        dprob_tensor,
        config=config,
    )
    return DgluResults(d_row, None, dprob, dbias, None, None, None)


grouped_gemm_dglu_jax_sm90 = grouped_gemm_dglu_jax
grouped_gemm_dglu_jax_sm100 = grouped_gemm_dglu_jax

__all__ = [
    "DgluResults",
    "grouped_gemm_dglu_jax",
    "grouped_gemm_dglu_jax_sm90",
    "grouped_gemm_dglu_jax_sm100",
]
