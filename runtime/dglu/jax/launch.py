"""The one seam between the JAX entry and dglu's runtime: a decoded FFI call in, the
variant's memsets and kernels enqueued on XLA's stream out.

Uses of the runtime (all here, to port in one place): ``validation.RULES`` / ``Dims`` /
``_expert_template`` (the seed layouts of the tensor views), ``problem.Problem`` /
``TensorView``, ``api._select`` and ``api.WRAPPER_SOURCES`` (variant selection),
``runner.load_variant`` / ``_launch_grids`` / ``_plan`` (loading, grids, TMA descriptors
and packed parameters), ``workspaces.Workspace`` / ``clear`` and ``launch.launch_kernel``.
The runtime's workspace pool is not used: XLA allocates the workspaces as hidden results.

First call with given buffer addresses (XLA never captures that one): select and load the
variant, encode descriptors, pack parameters; the plan is cached by configuration, device,
stream and every buffer's address and dims. A call with cached addresses, e.g. while XLA
captures a command buffer, only enqueues cuMemsetD32Async and cuLaunchKernelEx: no
allocation, synchronisation, module load or read of device memory.
"""

from __future__ import annotations

from ..api import WRAPPER_SOURCES, _select
from ..cache import BoundedCache
from ..driver import device_context
from ..launch import launch_kernel
from ..problem import WORKSPACES, Problem, TensorView
from ..runner import CallPlan, _launch_grids, _plan, load_variant
from ..validation import RULES, Dims, _expert_template
from ..weights import DISCRETE
from ..workspaces import Workspace, clear
from .config import ARG_ROLES, DPROB_RET, ELEMENT_NAMES, CallConfig
from .ffi import Buffer, DecodedCall

PLAN_CAPACITY = 256
_plans: BoundedCache[CallPlan] = BoundedCache(PLAN_CAPACITY)


def launch(call: DecodedCall, config: CallConfig) -> None:
    """Enqueue the op for ``call``'s buffers on its stream (see the module docstring)."""
    from cuda.bindings import driver

    device, stream = call.device_ordinal(), call.stream()
    key = (config, device, stream, *((b.data, b.dims) for b in call.args + call.rets))
    plan = _plans.get_or_make(key, lambda: _prepare(call, config, device, stream))
    cu_stream = driver.CUstream(stream)
    with device_context(device):
        for pointer, size in plan.clears:
            clear(pointer, size, cu_stream)
        for prepared in plan.launches:
            launch_kernel(prepared)


def _prepare(call: DecodedCall, config: CallConfig, device: int, stream: int) -> CallPlan:
    problem = problem_of(call, config, device)
    variant = _select(
        problem,
        config.options,
        d_dtype=config.d_dtype,
        dbias=config.dbias,
        weights=config.weight_mode,
        sources=WRAPPER_SOURCES,
    )
    loaded = load_variant(variant, device)
    if tuple(loaded.workspace_names) != config.workspaces:
        raise RuntimeError(
            f"variant {variant.name} needs workspaces {loaded.workspace_names}, the call "
            f"provides {list(config.workspaces)} (dglu.jax.config.CallConfig.workspaces)"
        )
    workspace_rets = call.rets[len(call.rets) - len(config.workspaces) :]
    workspaces = {
        name: _workspace(name, buffer) for name, buffer in zip(config.workspaces, workspace_rets)
    }
    clears = ("dbias",) if config.dbias else ()
    return _plan(loaded, problem, stream, _launch_grids(loaded, problem), workspaces, clears)


def _workspace(name: str, buffer: Buffer) -> Workspace:
    align = WORKSPACES[name].align
    if buffer.data % align:
        raise RuntimeError(
            f"workspace {name}: XLA placed it at {buffer.data:#x}, not {align}-byte aligned"
        )
    return Workspace(name, buffer.data, buffer.size, None)


def problem_of(call: DecodedCall, config: CallConfig, device: int) -> Problem:
    """The runtime's Problem of the call's buffers: seed-layout views of XLA's buffers."""
    args = dict(zip(ARG_ROLES, call.args, strict=True))
    a, weights = args["a"], args["weights"]
    discrete = config.weight_mode == DISCRETE
    m, k = a.dims[0], a.dims[1]
    l, n = (weights.dims[0], config.n) if discrete else (weights.dims[0], weights.dims[1])
    dims = Dims(m=m, n=n, k=k, l=l, b_major=config.options.b_major, origin="the FFI call")
    buffers = {role: args[role] for role in ARG_ROLES if role not in ("weights", "dprob")}
    buffers["b_ptrs" if discrete else "b"] = weights
    buffers["d_row"] = call.rets[0]
    buffers["dprob"] = call.rets[DPROB_RET]
    if config.dbias:
        buffers["dbias"] = call.rets[DPROB_RET + 1]
    views = {role: _view(role, buffer, dims, device) for role, buffer in buffers.items()}
    if discrete:
        views["b_expert"] = _expert_template(views["b_ptrs"], dims, "bf16")
    return Problem(m=m, n=n, k=k, l=l, tensors=views)


def _view(role: str, buffer: Buffer, dims: Dims, device: int) -> TensorView:
    rule = RULES[role]
    dtype = "i64" if role == "b_ptrs" else ELEMENT_NAMES[buffer.dtype]  # uint32 pairs too
    return TensorView(device, buffer.data, rule.shape(dims), rule.strides(dims), dtype)
