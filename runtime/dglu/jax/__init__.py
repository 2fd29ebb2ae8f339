"""dglu from JAX: grouped GEMM + dGLU backward as an XLA FFI custom call, usable under
``jax.jit`` and from eager code, launching the installed cubins on XLA's stream.

``import dglu`` never imports this package (nor jax). The handler is Python (ctypes,
dglu.jax.ffi): no compiled extension, no CuTe DSL at run time. dglu.jax.mlp is a client: a
MoE expert MLP whose jax.custom_vjp backward takes dH and dprob from this entry.

Arguments follow the torch wrapper's seed names, as JAX arrays (dglu.jax.arrays):
- A (M, K[, 1]) and C (M, 2N[, 1]) row-major; padded_offsets (L,) int32; alpha, beta (L,)
  and prob (M, 1, 1) float32;
- dense weights: ``b_tensor``, one row-major (L, N, K) array (the same bytes as the torch
  path's K-major (N, K, L) view), or with ``b_major="n"`` (block-scaled families) a
  row-major (L, K, N) array (the N-major view); discrete weights: ``b_ptrs``, (L,) int64
  device addresses of per-expert (N, K) matrices (jax_enable_x64; or uint32 (L, 2) of the
  same bytes), with ``n`` and ``b_dtype``. The caller keeps those expert arrays alive and
  unmoved for every execution of the traced computation.
- ``dprob_tensor`` (optional): accumulated into and returned as a new array (the given one
  is never mutated); None starts from zeros.
- block-scaled operands, by the front policy of the family that runs A's dtype on the
  device (the torch wrapper's rules and messages): FP8 A and B (jnp.float8_e4m3fn or
  float8_e5m2, MXFP8) or, on Blackwell, FP4 pairs as uint8 (NVFP4; JAX has no packed FP4
  dtype); ``sfa_tensor``, ``sfb_tensor`` (or ``sfb_ptrs``, like b_ptrs) in the seed's
  permuted storage: row-major (L, ceil(rows/128), ceil(cols/128), 32, 4, 4) arrays of the
  scale dtype (jnp.float8_e8m0fnu for MXFP8, float8_e4m3fn for NVFP4), which the seed's
  (32, 4, ceil(rows/128), 4, ceil(cols/128), L) tensor is a permuted view of (from that
  view: ``jnp.transpose(view, dglu.jax.arrays.SEED_TO_SF_STORAGE)``); ``norm_const_tensor``
  (1,) float32; ``sf_vec_size`` 32 (MXFP8) or 16 (NVFP4); ``d_dtype``.

``deterministic=True`` selects the ``_det`` variants, as in the torch path: D, dprob and
dbias bitwise reproducible from call to call (no order-dependent float atomics).
``act_out=True`` selects the act_out variants and returns ``DgluActResults``, the same plus
act_out_tensor (M, N, 1) bf16, prob * GLU(C). ``round_dgrad_to_input_dtype`` sets the kernel
flag of that name (refused where the selected variant has none).

Returns ``DgluResults`` (a NamedTuple, in the seed's order, filled from the family's
output roles): d_row_tensor (M, 2N, 1) in d_dtype, d_col_tensor (block-scaled FP8 D),
dprob_tensor (M, 1, 1) float32, dbias_tensor (L, 2N, 1) bf16 with generate_dbias=True,
amax_tensor (L, 2, 1) float32 (NVFP4's 16-bit D), sfd_row_tensor and sfd_col_tensor in
the seed's storage form above; None for what the call's family does not produce. Rows of
D_row past valid_m = padded_offsets[-1] (owned by no expert) are left unwritten, as in the
torch path.

Shapes, dtypes and options are checked at trace time by the torch path's code, with its
messages (dglu.jax.checks), against the variant selected from the dtypes, the options and
the architecture of JAX's default device. Where that device is no GPU (tracing on a CPU
host, e.g. for jax.export), the checks use an installed variant of the configuration for
any architecture; either way the handler checks XLA's buffers again against the variant of
the device it runs on, before its first launch, and an error there is raised by the
execution (JaxRuntimeError). Not checked under tracing: padded_offsets' values (the kernels
clamp their walk to A's rows, so malformed offsets give wrong numbers, never out-of-bounds
accesses) and the addresses inside b_ptrs (read only on the device). The variant's
workspaces are hidden results of the custom call, sized by its manifest entry; the handler
zeroes those marked ``each_call`` or ``by_consumer`` (XLA's buffers are fresh each
call, so a consumer's zeroing does not carry over) and the accumulated outputs it
creates (dbias, amax: from zero, as the torch wrapper's) on XLA's stream.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from ..call import ARGUMENT_NAMES, WRAPPER_OUTPUTS
from ..contract.records import Record
from ..contract.schema import Variant
from ..dtypes import ELEMENT_TYPES
from ..errors import VariantNotFoundError
from ..external import padded_elements
from ..front import outputs
from ..problem import Problem
from ..selection import arch_for_capability
from .arrays import ArraySpec, array_shape, array_spec
from .checks import check_config, describe_call
from .config import ARG_ROLES, CallConfig

TARGET = "dglu_grouped_gemm_dglu"
PLATFORM = "CUDA"
TRACE_ARCH_SOURCE = "JAX's default device"


class DgluResults(Record):
    """The op's outputs in the seed's order (a pytree: returnable from jitted code)."""

    d_row_tensor: Any
    d_col_tensor: Any
    dprob_tensor: Any
    dbias_tensor: Any
    amax_tensor: Any
    sfd_row_tensor: Any
    sfd_col_tensor: Any


class DgluActResults(Record):
    """DgluResults plus act_out_tensor (M, N, 1) bf16, prob * GLU(C), for act_out=True."""

    d_row_tensor: Any
    d_col_tensor: Any
    dprob_tensor: Any
    dbias_tensor: Any
    amax_tensor: Any
    sfd_row_tensor: Any
    sfd_col_tensor: Any
    act_out_tensor: Any


class CallLayout(Record):
    """The custom call's static layout (hashable: the inner jit's static argument): its
    operands' variant roles, in order; its results as (role, shape, numpy dtype), then the
    hidden workspaces as (name, elements, numpy dtype); the operands aliased to results as
    (operand index, result index); dprob's (shape, numpy dtype) when the call starts it
    from zeros."""

    operands: tuple[str, ...]
    results: tuple[tuple[str, tuple[int, ...], str], ...]
    workspaces: tuple[tuple[str, int, str], ...]
    aliases: tuple[tuple[int, int], ...]
    zero_dprob: tuple[tuple[int, ...], str] | None


@functools.cache
def _register_gpu_target() -> None:
    """Register the handler for XLA:GPU once (at the first trace)."""
    from .ffi import Handler, register
    from .launch import handle

    register(TARGET, Handler(handle, command_buffer_compatible=True), PLATFORM)


def default_device_arch() -> str | None:
    """The cubin architecture of JAX's default device; None when it is no GPU."""
    device = jax.config.jax_default_device
    if not isinstance(device, jax.Device):
        device = jax.devices()[0]
    if device.platform != "gpu":
        return None
    capability = tuple(int(part) for part in device.compute_capability.split("."))
    arch = arch_for_capability(capability)
    if arch is None:
        raise VariantNotFoundError(
            f"{TRACE_ARCH_SOURCE} ({device.device_kind}, compute capability "
            f"{device.compute_capability}) has no cubin architecture dglu builds"
        )
    return arch


def _numpy(element_type: str) -> str:
    return ELEMENT_TYPES[element_type].torch_name  # numpy and torch share these names


def call_layout(variant: Variant, problem: Problem, operands: tuple[str, ...], dprob_given: bool) -> CallLayout:
    """The results, workspaces and aliases of ``variant``'s custom call for ``problem``
    with the ``operands`` (variant roles, in order)."""
    scalars = problem.scalars
    results = tuple(
        (role, array_shape(role, tuple(e.value(scalars) for e in rule.shape)), _numpy(rule.dtypes[0]))
        for role, rule in variant.arguments.items()
        if rule.io != "in"
    )
    roles = [role for role, _, _ in results]
    aliases = tuple((operands.index(role), roles.index(role)) for role in roles if role in operands)
    sizes = padded_elements(variant, scalars)
    workspaces = tuple(
        (name, sizes[name], _numpy(rule.dtype)) for name, rule in variant.workspaces.items()
    )
    dprob = variant.arguments["dprob"]
    zero_dprob = None if dprob_given else (
        tuple(e.value(scalars) for e in dprob.shape), _numpy(dprob.dtypes[0])
    )
    return CallLayout(operands, results, workspaces, aliases, zero_dprob)


@functools.partial(jax.jit, static_argnames=("config", "layout"))
def _custom_call(*operands: Any, config: CallConfig, layout: CallLayout) -> dict[str, Any]:
    if layout.zero_dprob is not None:  # the last operand: zeros, made here
        shape, dtype = layout.zero_dprob
        operands = (*operands, jnp.zeros(shape, dtype))
    shapes = [jax.ShapeDtypeStruct(shape, dtype) for _, shape, dtype in layout.results]
    shapes += [jax.ShapeDtypeStruct((size,), dtype) for _, size, dtype in layout.workspaces]
    roles = tuple(role for role, _, _ in layout.results)
    names = tuple(name for name, _, _ in layout.workspaces)
    outputs = jax.ffi.ffi_call(TARGET, shapes, input_output_aliases=dict(layout.aliases))(
        *operands, **config.attributes(layout.operands, roles, names)
    )
    return dict(zip(roles, outputs))


def _spec(role: str, name: str, value: Any, b_major: Any) -> tuple[str, ArraySpec]:
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise TypeError(f"{name}: expected a JAX array, got {type(value).__name__}")
    major = b_major if b_major in ("k", "n") else "k"  # another b_major is refused by the options
    return name, array_spec(role, jnp.shape(value), jnp.result_type(value), b_major=major)


def grouped_gemm_dglu_jax(
    a_tensor: Any = None,
    c_tensor: Any = None,
    sfa_tensor: Any = None,
    padded_offsets: Any = None,
    alpha_tensor: Any = None,
    beta_tensor: Any = None,
    prob_tensor: Any = None,
    dprob_tensor: Any = None,
    b_tensor: Any = None,
    sfb_tensor: Any = None,
    generate_dbias: bool = False,
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
    sf_fp8_dtype_override: str | None = None,
    vector_f32: bool = False,
    m_aligned: int = 256,
    discrete_col_sfd: bool = False,
    act_func: str = "dswiglu",
    linear_offset: float = 1.0,
    geglu_alpha: float = 1.702,
    glu_clamp_max: float = 7.0,
    glu_clamp_min: float = -7.0,
    situ_beta1: float = 4.0,
    situ_beta2: float = 25.0,
    epilogue_op: str | None = None,
    use_dynamic_sched: bool = False,
    use_single_group_runtime_offsets: bool = False,
    round_dgrad_to_input_dtype: bool = False,
    deterministic: bool = False,
    act_out: bool = False,
) -> DgluResults | DgluActResults:
    """Grouped GEMM + dGLU backward of JAX arrays (see the package docstring); the wrapper's
    parameters in its order (dglu.arguments), less current_stream and activation_tensor
    (dglu.arguments.NOT_OFFERED says why)."""
    values = dict(locals())
    arch = default_device_arch()
    arrays = {
        role: _spec(role, name, values[name], b_major)
        for role, name in ARGUMENT_NAMES.items()
        if values.get(name) is not None
    }
    given = {**values, **dict(arrays.values())}  # the checks see the arrays as specs
    config, policy = check_config(given, arrays, arch)
    variant, problem = describe_call(config, policy, arrays, arch, TRACE_ARCH_SOURCE, (*WRAPPER_OUTPUTS, "dprob"))
    roles = tuple(config.role(operand) for operand in ARG_ROLES)
    roles = tuple(role for role in roles if role in arrays or role == "dprob")  # dprob: given, or zeros
    layout = call_layout(variant, problem, roles, dprob_tensor is not None)
    _register_gpu_target()
    operands = tuple(values[ARGUMENT_NAMES[role]] for role in roles if role in arrays)
    made = _custom_call(*operands, config=config, layout=layout)
    results = DgluResults(**outputs(policy, made))
    return DgluActResults(*results, made["act_out"]) if act_out else results


grouped_gemm_dglu_jax_sm90 = grouped_gemm_dglu_jax
grouped_gemm_dglu_jax_sm100 = grouped_gemm_dglu_jax

__all__ = [
    "DgluActResults",
    "DgluResults",
    "grouped_gemm_dglu_jax",
    "grouped_gemm_dglu_jax_sm90",
    "grouped_gemm_dglu_jax_sm100",
]
