"""Load a variant's kernels into the device's context and run them for one problem.

Loaded variants are cached per (variant, device). run_variant returns the call's
ReadyCall (grids, launch configurations, packed parameters with their TMA descriptors,
and the pooled workspaces they were made for); the caller keeps it with its call
(dglu.bound) and hands it back, so a repeated call only clears its workspaces and enqueues
its kernels. A call with no ReadyCall yet (new tensor addresses: the wrapper's fresh
outputs) starts from the last plan made for the loaded variant, stream and cleared tensors
when its scalars, grids and workspaces are the same (or from a ReadyCall the caller has,
with derive): only the parameters of the tensors that moved are packed (and their TMA
descriptors encoded) anew.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from . import workspaces as workspace_pool
from .cache import BoundedCache
from .contract.schema import KernelSpec, Variant
from .driver import device_context, device_info, driver_version, kernel_function, module_for
from .errors import CudaDriverError, KernelLaunchError, KernelLoadError
from .grid import Grid, is_empty, launch_grid
from .integrity import read_verified_cubin
from .launch import Launch, launch_kernel, prepare_launch
from .occupancy import max_active_clusters
from .params import POINTER_BYTES, KernelArguments, pack_params
from .problem import Problem, TensorView
from .tma import encode_tensor_map

LOADED_CAPACITY = 256  # loaded variants kept (a few hundred bytes each)

_loaded: BoundedCache[LoadedVariant] = BoundedCache(LOADED_CAPACITY)


class LoadedVariant:
    """A variant whose kernels are loaded on one device, in launch order. (A plain class:
    a dataclass costs ~0.5 ms to create at import.)"""

    def __init__(
        self, variant: Variant, device: int, functions: tuple[Any, ...],
        active_clusters: tuple[int | None, ...] = (),  # per kernel: its ``active_clusters`` grid's z
    ) -> None:
        self.variant = variant
        self.device = device
        self.functions = functions
        self.active_clusters = active_clusters

    def __repr__(self) -> str:
        return f"LoadedVariant({self.variant.name!r}, device={self.device})"

    @functools.cached_property
    def identity(self) -> tuple[str, str, int]:
        """(variant name, cubin sha256, device): a cheap cache key for this loaded variant."""
        return (self.variant.name, self.variant.sha256, self.device)

    @functools.cached_property
    def last_plans(self) -> dict[tuple[int, tuple[str, ...]], LastPlan]:
        """The last plan made per (stream, cleared tensors): where a new one starts from."""
        return {}

    @functools.cached_property
    def tensor_params(self) -> tuple[tuple[tuple[int, str, str], ...], ...]:
        """Per kernel, (index, tensor, kind) of each parameter that comes from a tensor:
        its TMA descriptor, or (first) its address."""
        return tuple(
            tuple((i, p.tensor, p.kind) for i, p in enumerate(kernel.params) if p.tensor is not None)
            for kernel in self.variant.kernels
        )

    @functools.cached_property
    def _params_of(self) -> dict[tuple[str, ...], tuple[tuple[tuple[int, str, str], ...], ...]]:
        """params_of's answers, by tuple of tensor names."""
        return {}

    def params_of(self, tensors: tuple[str, ...]) -> tuple[tuple[tuple[int, str, str], ...], ...]:
        """Per kernel, the tensor_params of ``tensors`` (kept per tuple of names: a plan for
        moved tensors patches only those)."""
        found = self._params_of.get(tensors)
        if found is None:
            found = self._params_of[tensors] = tuple(
                tuple(param for param in kernel if param[1] in tensors) for kernel in self.tensor_params
            )
        return found


def load_variant(variant: Variant, device: int) -> LoadedVariant:
    """Load (once per context and cubin) and return the variant's kernels on ``device``."""
    key = (variant.name, variant.sha256, device)
    return _loaded.get_or_make(key, lambda: _load(variant, device))


def _version_text(version: int) -> str:
    return f"{version // 1000}.{version % 1000 // 10}"


def _load(variant: Variant, device: int) -> LoadedVariant:
    installed = driver_version()
    if installed < variant.min_driver:
        raise CudaDriverError(
            f"variant {variant.name} needs CUDA driver {_version_text(variant.min_driver)} or "
            f"newer (its cubin's PTX ISA); this driver is {_version_text(installed)} "
            f"(cuDriverGetVersion {installed}): update the NVIDIA driver"
        )
    limit = device_info(device).max_dynamic_smem_bytes
    for kernel in variant.kernels:
        if kernel.dynamic_smem_bytes > limit:
            raise CudaDriverError(
                f"variant {variant.name}: kernel {kernel.symbol} needs {kernel.dynamic_smem_bytes} "
                f"bytes of shared memory, device {device} allows {limit}"
            )
    with device_context(device) as context:
        try:
            module = module_for(context, variant.sha256, lambda: read_verified_cubin(variant))
            functions = tuple(
                kernel_function(module, kernel.symbol, kernel.dynamic_smem_bytes)
                for kernel in variant.kernels
            )
            active_clusters = tuple(
                max_active_clusters(function, kernel) if kernel.grid.rule == "active_clusters" else None
                for kernel, function in zip(variant.kernels, functions, strict=True)
            )
        except CudaDriverError as exc:
            raise KernelLoadError(
                f"variant {variant.name}: cannot load {variant.cubin_path} on cuda:{device} "
                f"({exc}); nothing was launched. {_load_remedy(exc.error_name)}",
                exc.error_name,
            ) from exc
    return LoadedVariant(variant=variant, device=device, functions=functions, active_clusters=active_clusters)


def _load_remedy(error_name: str | None) -> str:
    """What to do about a cubin the driver would not load."""
    if error_name == "CUDA_ERROR_OUT_OF_MEMORY":
        return "Free device memory (torch.cuda.empty_cache()) and retry."
    if error_name in ("CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_INVALID_IMAGE"):
        return "The cubin does not suit this device or driver: rebuild it or reinstall dglu."
    return "Rebuild the artifacts or reinstall dglu; a retry tries the load again."


def clear_caches() -> None:
    """Forget loaded variants and pooled workspaces (e.g. between tests)."""
    _loaded.clear()
    workspace_pool.release_all()


def _workspace_view(device: int, workspace: workspace_pool.Workspace) -> TensorView:
    return TensorView(device, workspace.pointer, (workspace.elements,), (1,), workspace.rule.dtype)


class CallPlan:
    """What one call enqueues on its stream, in order: the byte ranges to zero (pointer,
    size), the ranges to fill with a 32-bit word (pointer, size, word: an accumulated output
    that starts at -inf), then the kernel launches; and the tensor views the launches were
    made for."""

    __slots__ = ("clears", "launches", "views", "fills")

    def __init__(
        self,
        clears: tuple[tuple[int, int], ...],
        launches: tuple[Launch, ...],
        views: Mapping[str, TensorView] | None = None,
        fills: tuple[tuple[int, int, int], ...] = (),
    ) -> None:
        self.clears, self.launches, self.fills = clears, launches, fills
        self.views: Mapping[str, TensorView] = {} if views is None else views


class LastPlan:
    """A plan with the scalars, grids and tensor names it was made for (see the module
    docstring)."""

    __slots__ = ("scalars", "grids", "tensors", "plan")

    def __init__(
        self, scalars: Mapping[str, int], grids: tuple[Grid, ...], tensors: frozenset[str], plan: CallPlan
    ) -> None:
        self.scalars, self.grids, self.tensors, self.plan = scalars, grids, tensors, plan

    def serves(self, problem: Problem, grids: tuple[Grid, ...]) -> bool:
        """True when a plan for ``problem`` (of ``grids``) may start from this one."""
        return (
            self.grids == grids
            and (self.scalars is problem.scalars or self.scalars == problem.scalars)
            and self.tensors == problem.tensors.keys()
        )


def _plan(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    grids: tuple[Grid, ...],
    workspaces: Mapping[str, workspace_pool.Workspace],
    clear: tuple[str, ...],
    given_workspaces: bool = False,
    start: CallPlan | None = None,
) -> CallPlan:
    """The call's clears and every kernel's launch (none when ``grids`` is empty): TMA
    descriptors encoded, parameters packed. ``given_workspaces``: memory dglu did not
    allocate (XLA's), so its ``zero: by_consumer`` workspaces are cleared too. ``start``:
    a plan for the same scalars, grids and stream, whose launches are reused but for the
    parameters of the tensors whose views differ, when its workspaces are these."""
    scalars = problem.scalars
    clears, fills = _output_writes(loaded, problem, clear)
    if not grids:
        return CallPlan(tuple(clears), (), fills=fills)
    clears += workspace_pool.zeroed_ranges(workspaces, scalars, given_workspaces)
    if start is not None and all(
        start.views[name].pointer == workspace.pointer for name, workspace in workspaces.items()
    ):
        return _replanned(loaded, problem, start, tuple(clears), fills)
    views: dict[str, TensorView] = dict(problem.tensors)
    views.update((name, _workspace_view(loaded.device, workspace)) for name, workspace in workspaces.items())
    pointers = {name: view.pointer for name, view in views.items()}
    launches = []
    for kernel, function, grid in zip(loaded.variant.kernels, loaded.functions, grids, strict=True):
        tensor_maps = _tensor_maps(loaded, kernel.params, views)
        arguments = KernelArguments(pack_params(kernel, scalars, pointers, tensor_maps))
        launches.append(prepare_launch(function, kernel, grid, stream, arguments))
    return CallPlan(tuple(clears), tuple(launches), views, fills)


def _output_writes(
    loaded: LoadedVariant, problem: Problem, clear: tuple[str, ...]
) -> tuple[list[tuple[int, int]], tuple[tuple[int, int, int], ...]]:
    """The memsets of the outputs ``clear`` (tensors of ``problem``), as their arguments'
    ``start`` says: the ranges to zero (pointer, size) and to fill (pointer, size, word)."""
    starts = {role: loaded.variant.arguments[role].start for role in clear}
    tensors = problem.tensors
    clears = [(tensors[role].pointer, tensors[role].size) for role in clear if starts[role] == "zero"]
    fills = tuple((tensors[role].pointer, tensors[role].size, workspace_pool.START_WORDS[start])
                  for role, start in starts.items() if start != "zero")
    return clears, fills


def _replanned(
    loaded: LoadedVariant,
    problem: Problem,
    start: CallPlan,
    clears: tuple[tuple[int, int], ...],
    fills: tuple[tuple[int, int, int], ...],
    moved: tuple[str, ...] | None = None,
) -> CallPlan:
    """``start``'s launches with the parameters of the problem's tensors whose views moved
    (``moved``, else those whose views differ) packed anew (its workspaces, and so the
    views derived from them, are the same), after the memsets ``clears`` and ``fills``."""
    if moved is None:
        moved = tuple(name for name, view in problem.tensors.items() if start.views.get(name) != view)
    views = {name: problem.tensors[name] for name in moved}
    tma = loaded.variant.tma
    launches = []
    for params, launch in zip(loaded.params_of(moved), start.launches, strict=True):
        # a moved tensor's address: its TMA descriptor anew, or the first 8 bytes of its
        # pointer (and pointer_i32s) parameters: the scalars are the same
        packed = {
            i: encode_tensor_map(tma[tensor], views[tensor]) if kind == "tensormap"
            else views[tensor].pointer.to_bytes(POINTER_BYTES, "little")
            for i, tensor, kind in params
        }
        if packed:
            launch = launch.with_arguments(launch.arguments.replaced(packed))
        launches.append(launch)
    return CallPlan(clears, tuple(launches), {**start.views, **views}, fills)


def derive(
    loaded: LoadedVariant, source: ReadyCall, problem: Problem, clear: tuple[str, ...], moved: tuple[str, ...]
) -> ReadyCall | None:
    """The ReadyCall of ``problem``, which is ``source``'s problem but for the views of the
    tensors ``moved`` (inputs at new addresses, the wrapper's new outputs), for the same
    stream and ``clear``: ``source``'s launches with only the parameters and clears of those
    tensors made anew; None when ``source`` launches nothing (run_variant then plans
    ``problem``). Its workspaces are ``source``'s: run_variant checks that they are still
    pooled before it enqueues."""
    if not source.grids:
        return None
    clears, fills = _output_writes(loaded, problem, clear)
    clears += source.plan.clears[len(clears):]  # then the workspaces' (the same ones)
    plan = _replanned(loaded, problem, source.plan, tuple(clears), fills, moved)
    return ReadyCall(plan, source.grids, source.generation, source.workspaces)


def _tensor_maps(loaded: LoadedVariant, params: Any, views: Mapping[str, TensorView]) -> dict[str, bytes]:
    """The TMA descriptors of the ``tensormap`` parameters among ``params``."""
    return {
        p.tensor: encode_tensor_map(loaded.variant.tma[p.tensor], views[p.tensor])
        for p in params
        if p.kind == "tensormap"
    }


class ReadyCall:
    """A call's plan, the grids it was made for, and the generation of the stream's pool
    and the addresses of the workspaces the plan's come from (generation None: it uses
    none): valid while the pool is of that generation (dglu.workspaces.still_pooled)."""

    __slots__ = ("plan", "grids", "generation", "workspaces")

    def __init__(
        self, plan: CallPlan, grids: tuple[Grid, ...], generation: int | None, workspaces: tuple[int, ...]
    ) -> None:
        self.plan, self.grids, self.generation, self.workspaces = plan, grids, generation, workspaces


def run_variant(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    clear: tuple[str, ...] = (),
    ready: ReadyCall | None = None,
) -> ReadyCall | None:
    """Launch every kernel of the variant, in manifest order, on the stream handle ``stream``.

    ``clear`` names tensors of the problem (the wrapper's new dbias) to zero on ``stream``
    first. When a kernel's grid is empty (M = 0: no tiles) nothing else is allocated or
    launched: there is nothing to compute and the outputs keep their contents. Otherwise
    the stream's workspaces are acquired and the zeroed ones cleared on ``stream``
    (dglu.workspaces); one lock per stream keeps a call's memsets and launches together.
    Every allocation, TMA encoding and parameter packing happens before the first memset
    is enqueued, and the memsets only touch dglu's own memory (workspaces, the wrapper's
    new dbias), so a failure before the first kernel launch leaves the caller's tensors
    untouched (see _enqueue for one after it).

    ``ready``: a ReadyCall an earlier run_variant returned (or derive made) for this
    problem, stream and ``clear``: enqueued as it is while its stream's pool still holds
    its workspaces (and is not capturing a graph: asked only of a stream that can
    capture), else its grids and, for the same workspace addresses, its plan serve again.
    Returns the ReadyCall enqueued, for the caller to keep; None when the call was
    captured: a capturing stream with workspaces to provide gets graph-owned ones, and its
    plan is not kept (a replay never calls back). A call that fails while enqueuing makes
    the pool forget its ``zero: by_consumer`` workspaces, which a kernel may have left dirty.
    """
    pool = workspace_pool.stream_pool(loaded.device, stream)
    with pool.lock, device_context(loaded.device):
        if ready is None or not workspace_pool.still_pooled(pool, ready.generation):
            grids = ready.grids if ready is not None else _grids(loaded, problem, stream, clear)
            if grids and loaded.variant.workspaces and pool.capturing():
                _run_captured(loaded, problem, stream, grids, clear, pool.cu_stream)
                return None
            ready = _ready_call(loaded, problem, stream, grids, clear, pool, ready)
        try:
            _enqueue(loaded, ready.plan, pool.cu_stream)
        except KernelLaunchError:
            workspace_pool.forget_consumed(pool)
            raise
    return ready


def _run_captured(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    grids: tuple[Grid, ...],
    clear: tuple[str, ...],
    cu_stream: Any,
) -> None:
    """Capture the call with graph-owned workspaces, allocated before its clears and freed
    after its last kernel, inside the graph (dglu.workspaces)."""
    rules = loaded.variant.workspaces
    made = workspace_pool.graph_workspaces(rules, problem.scalars, loaded.device, cu_stream)
    try:
        _enqueue(loaded, _plan(loaded, problem, stream, grids, made, clear), cu_stream)
    finally:
        workspace_pool.free_graph_workspaces(made, cu_stream)


def _enqueue(loaded: LoadedVariant, plan: CallPlan, cu_stream: Any) -> None:
    """Enqueue the plan's clears and fills, then its launches. They only touch dglu's
    memory, so until the first kernel is enqueued the caller's tensors are untouched; once
    one ran, what it wrote (D_row, dprob and dbias accumulated in place) cannot be taken
    back, and a failure of a later kernel says so."""
    if plan.clears or plan.fills:
        _enqueue_writes(loaded, plan, cu_stream)
    for index, launch in enumerate(plan.launches):
        try:
            launch_kernel(launch)
        except CudaDriverError as exc:
            raise KernelLaunchError(
                f"variant {loaded.variant.name}: launching kernel {launch.kernel.role} "
                f"({index + 1} of {len(plan.launches)}, grid {launch.grid}) on cuda:"
                f"{loaded.device} failed ({exc}); {_written(plan.launches[:index], loaded.variant)} "
                f"{_LAUNCH_REMEDY}",
                exc.error_name,
            ) from exc


def _enqueue_writes(loaded: LoadedVariant, plan: CallPlan, cu_stream: Any) -> None:
    """Enqueue the plan's clears (zeros) and fills (a 32-bit word repeated)."""
    writes = [(pointer, size, ()) for pointer, size in plan.clears]
    writes += [(pointer, size, (word,)) for pointer, size, word in plan.fills]
    for pointer, size, word in writes:
        try:
            workspace_pool.clear(pointer, size, cu_stream, *word)
        except CudaDriverError as exc:
            raise KernelLaunchError(
                f"variant {loaded.variant.name}: clearing {size} bytes at {pointer:#x} on "
                f"cuda:{loaded.device} failed ({exc}); no kernel was launched and no "
                f"argument was written. {_LAUNCH_REMEDY}",
                exc.error_name,
            ) from exc


_LAUNCH_REMEDY = (
    "If the error comes from an earlier asynchronous fault (e.g. CUDA_ERROR_ILLEGAL_ADDRESS, "
    "CUDA_ERROR_LAUNCH_FAILED), the CUDA context is unusable and the process must restart; "
    "otherwise the caches are intact and the call can be retried."
)


def _written(launched: tuple[Launch, ...], variant: Variant) -> str:
    """What the caller's tensors hold after the launches of ``launched`` were enqueued: only
    a kernel with one of the call's outputs among its parameters (b_descriptors writes its
    workspace only) may have written them."""
    if not launched:
        return "no kernel was launched, so no argument was written."
    writers = [launch.kernel.role for launch in launched if _takes_an_output(launch.kernel, variant)]
    if not writers:
        enqueued = ", ".join(launch.kernel.role for launch in launched)
        return f"kernel(s) {enqueued} were enqueued but write only dglu's workspaces, so no argument was written."
    return (
        f"kernel(s) {', '.join(writers)} were already enqueued and may have written the outputs (D_row, "
        "and dprob and dbias accumulated in place): discard them, or restore dprob and dbias "
        "from a copy, before retrying."
    )


def _takes_an_output(kernel: KernelSpec, variant: Variant) -> bool:
    """Whether a parameter of ``kernel`` is (a view of) an output or accumulated argument."""
    for param in kernel.params:
        name = param.tensor
        while name in variant.views:  # a view may be of another view (validation.derived_views)
            name = variant.views[name].of
        if name in variant.arguments and variant.arguments[name].io != "in":
            return True
    return False


def _ready_call(
    loaded: LoadedVariant,
    problem: Problem,
    stream: int,
    grids: tuple[Grid, ...],
    clear: tuple[str, ...],
    pool: workspace_pool.StreamWorkspaces,
    previous: ReadyCall | None,
) -> ReadyCall:
    """Acquire the call's pooled workspaces and make its plan (``previous``'s when made for
    these workspace addresses). Hold ``pool.lock``."""
    rules = loaded.variant.workspaces
    workspaces = (
        workspace_pool.acquire(rules, problem.scalars, loaded.device, pool) if grids else {}
    )
    pointers = tuple([w.pointer for w in workspaces.values()])
    if previous is not None and previous.workspaces == pointers:
        plan = previous.plan
    else:
        last = loaded.last_plans.get((stream, clear))
        start = last.plan if last is not None and last.serves(problem, grids) else None
        plan = _plan(loaded, problem, stream, grids, workspaces, clear, start=start)
        loaded.last_plans[(stream, clear)] = LastPlan(problem.scalars, grids, frozenset(problem.tensors), plan)
    return ReadyCall(plan, grids, pool.generation if workspaces else None, pointers)


def _grids(loaded: LoadedVariant, problem: Problem, stream: int, clear: tuple[str, ...]) -> tuple[Grid, ...]:
    """The problem's grids: the last plan's when it was made for these very scalars (the
    wrapper's calls with new output addresses share their problem's scalars), else made."""
    last = loaded.last_plans.get((stream, clear))
    if last is not None and last.scalars is problem.scalars:
        return last.grids
    return _launch_grids(loaded, problem)


def _launch_grids(loaded: LoadedVariant, problem: Problem) -> tuple[Grid, ...]:
    """Each kernel's grid; () when one of them is empty (nothing to launch)."""
    sm_count = device_info(loaded.device).sm_count
    kernels = loaded.variant.kernels
    clusters = loaded.active_clusters or (None,) * len(kernels)
    grids = tuple(launch_grid(k, problem.scalars, sm_count, c) for k, c in zip(kernels, clusters, strict=True))
    return () if any(is_empty(grid) for grid in grids) else grids
