"""What the wrapper and the class API share: argument names, an op's checked configuration,
the checks before the selection and the selection step (dglu.jax's too), the padded_offsets
check, the outputs the wrapper allocates and a call's prepared problem (dglu.api has the
wrapper, dglu.op the class API)."""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .arguments import ARGUMENTS
from .arrays import as_torch, torch_module
from .cache import BoundedCache
from .driver import device_info
from .dtypes import torch_dtype
from .errors import DeviceMemoryError, VariantNotFoundError
from .front import (
    check_operands,
    check_required,
    check_single_group,
    check_values,
    front_of_operands,
    require,
    tensor_dtype,
    vector_f32_needs_wide_c,
)
from .contract.dispatch import rules_for
from .contract.front import FrontPolicy
from .contract.keys import KEY_TABLE
from .contract.reader import full_variant
from .contract.schema import Variant
from .manifest import installed_dispatch, installed_variants, search_path
from .options import OpOptions, check_flags, check_m_aligned
from .problem import Problem, TensorView
from .selection import VariantRequest, arch_for_capability, select_variant
from .streams import on_stream
from .validation import check_offset_values, element_types
from .workspaces import is_capturing
from .weights import DiscreteWeights

# Tensor role (docs/manifest.md) -> its argument name in the wrapper and in execute().
ARGUMENT_NAMES = {
    "a": "a_tensor",
    "b": "b_tensor",
    "c": "c_tensor",
    "d_row": "d_row_tensor",
    "padded_offsets": "padded_offsets",
    "alpha": "alpha_tensor",
    "beta": "beta_tensor",
    "prob": "prob_tensor",
    "dprob": "dprob_tensor",
    "dbias": "dbias_tensor",
    "b_ptrs": "b_ptrs",
    "act_out": "act_out_tensor",
    "sfa": "sfa_tensor",
    "sfb": "sfb_tensor",
    "sfb_ptrs": "sfb_ptrs",
    "d_col": "d_col_tensor",
    "sfd_row": "sfd_row_tensor",
    "sfd_col": "sfd_col_tensor",
    "norm_const": "norm_const_tensor",
    "amax": "amax_tensor",
}
OPERAND_ROLES = ("a", "b", "sfa", "sfb")  # what the family's operand checks read
# Tensor role -> the wrapper's argument name (cuDNN FE's activation_tensor for act_out).
WRAPPER_NAMES = {**ARGUMENT_NAMES, "act_out": "activation_tensor"}
CHECK_OFFSETS_ENV = "DGLU_CHECK_OFFSETS"
CALL_CACHE_CAPACITY = 256  # described calls kept per op (class API) or in all (wrapper)
# Output addresses kept per wrapper call: torch's allocator hands a repeated call's outputs
# the few addresses the previous results freed.
OUTPUT_CACHE_CAPACITY = 16
# The weight arguments of each discrete mode, in the seed's order.
WRAPPER_DISCRETE = ("b_ptrs", "n", "b_dtype")
CLASS_DISCRETE = ("num_experts", "b_shape", "b_dtype")


# The options check_options takes, by their seed names: the weight, dbias and D_row
# arguments are checked beside it, sf_fp8_dtype_override by the family's value rules.
_BESIDE_OPTIONS = ("generate_dbias", "n", "b_dtype", "num_experts", "b_shape", "d_dtype", "sf_fp8_dtype_override")
CHECKED_OPTIONS = tuple(
    name for name, arg in ARGUMENTS.items() if arg.role == "option" and name not in _BESIDE_OPTIONS
)


def required(names: Sequence[str]) -> tuple[str, ...]:
    """Those of ``names`` (in their order) the op cannot run without (dglu.arguments)."""
    return tuple(name for name in names if ARGUMENTS[name].required)


# Variant key field -> the arguments that choose it (for the no-variant error).
WRAPPER_SOURCES = {field.name: field.wrapper_source for field in KEY_TABLE}
CLASS_SOURCES = {field.name: field.class_source for field in KEY_TABLE}


def given_operands(samples: bool, given: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """named_tensors of the operands (OPERAND_ROLES) that ``given`` (seed names) has."""
    tensors = {role: given[ARGUMENT_NAMES[role]] for role in OPERAND_ROLES}
    return named_tensors(samples, **{role: tensor for role, tensor in tensors.items() if tensor is not None})


def named_tensors(samples: bool, **tensors: Any) -> dict[str, tuple[str, Any]]:
    """Role -> (argument name, tensor); the class constructor's names are sample_<role>.
    Foreign CUDA arrays (DLPack, __cuda_array_interface__) become torch tensors over the
    same memory (dglu.arrays)."""
    return {
        role: (f"sample_{role}" if samples else ARGUMENT_NAMES[role], as_torch(tensor))
        for role, tensor in tensors.items()
    }


Config = TypeVar("Config")


def check_request(
    policy: FrontPolicy,
    given: Mapping[str, Any],
    operands: Mapping[str, tuple[str, Any]],
    b_dtype: Any,
    c_dtype: Any,
    configure: Callable[[FrontPolicy, Mapping[str, Any]], Config],
    needed: Sequence[str],
    subject: str,
    names: Mapping[str, str] | None = None,
) -> Config:
    """Every frontend's checks between the family and the selection, in the documented
    order (docs/frontends.md): the family's operand checks (``operands``: role -> (name,
    tensor) of those given; ``b_dtype`` as the policy reads it), option values (the
    family's, C's presence, vector_f32 against ``c_dtype``, then ``configure``'s: weights,
    options, D_row), then missing tensors (the family's, then ``needed``). ``given``: seed
    name -> value; ``names``: seed name -> the frontend's name in messages (the class
    API's samples); ``subject``: what needs the tensors ("call", "op"). Returns the
    configuration ``configure`` makes."""
    shown = names or {}
    check_operands(policy, operands, b_dtype)
    check_values(policy, given, names)
    c_name = shown.get("c_tensor", "c_tensor")
    if given["c_tensor"] is None:
        require({c_name: None}, f"every {subject} (the op's operands)")
    vector_f32_needs_wide_c(policy, given["vector_f32"], c_name, c_dtype)
    config = configure(policy, given)
    check_required(policy, given, names)
    require({shown.get(name, name): given[name] for name in needed}, f"every {subject} (the op's inputs)")
    return config


class OpConfig:
    """An op's checked non-tensor arguments: weight mode, options, D_row's dtype (None: the
    class API's sample_d_row gives it), dbias, and the front policy of the family that
    runs its operands (dglu.front). Equal when all are; hashed without the policy (it
    holds dicts; the other fields select it). A plain class: a dataclass costs ~0.5 ms to
    create at import."""

    __slots__ = ("mode", "discrete", "options", "d_dtype", "dbias", "policy", "_hash")

    def __init__(
        self, mode: str, discrete: DiscreteWeights | None, options: OpOptions, d_dtype: str | None,
        dbias: bool, policy: FrontPolicy,
    ) -> None:
        self.mode, self.discrete, self.options = mode, discrete, options
        self.d_dtype, self.dbias, self.policy = d_dtype, dbias, policy
        self._hash: int | None = None

    def _fields(self) -> tuple[Any, ...]:
        return (self.mode, self.discrete, self.options, self.d_dtype, self.dbias, self.policy)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is OpConfig and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __hash__(self) -> int:  # hashed on every wrapper call: computed once
        if self._hash is None:
            self._hash = hash(self._fields()[:5])
        return self._hash

    def __repr__(self) -> str:
        return (f"OpConfig(mode={self.mode!r}, discrete={self.discrete!r}, options={self.options!r}, "
                f"d_dtype={self.d_dtype!r}, dbias={self.dbias!r})")

    def given_scalars(self) -> dict[str, tuple[int, str]]:
        """Scalars the weight arguments fix (discrete weights' n, k, l)."""
        return self.discrete.given_scalars() if self.discrete else {}


def select(config: OpConfig, tensors: dict[str, tuple[str, Any]], sources: dict[str, str]) -> Variant:
    """select_call for the torch frontends' ``tensors`` (role -> (name, tensor)): their
    element types (checked first) and the architecture of A's device."""
    types = element_types(tensors)
    return select_call(config, types, tensors, device_arch(tensors["a"][1].device.index), sources)


def select_call(
    config: OpConfig,
    types: Mapping[str, str],
    tensors: Mapping[str, tuple[str, Any]],
    arch: str | None,
    sources: dict[str, str],
) -> Variant:
    """Every frontend's selection step (after check_request), in the documented order
    (docs/frontends.md): C's dtype among the family's, discrete weights' dtype against
    A's, the single-group offsets (L is in the key), the installed variant, then m_aligned
    and the kernel flags against it. ``types``: role -> element type name (A's, C's, and
    D_row's where ``config`` leaves D open); ``tensors``: role -> (name, tensor or JAX
    spec) of a, c and padded_offsets, whose shapes give the expert count and the problem
    class; ``arch``: None for any; ``sources``: key field -> the arguments that chose it."""
    policy, options = config.policy, config.options
    (a_name, a), (c_name, c), (offsets_name, offsets) = (tensors[role] for role in ("a", "c", "padded_offsets"))
    tensor_dtype(policy, c_name, "c_tensor", c)  # the family's C types
    if config.discrete:
        config.discrete.check_dtype_of(a_name, types["a"])
    check_single_group(policy, options.single_group, offsets_name, offsets, a.shape[0], options.m_aligned)
    variant = select_installed(
        options,
        arch,
        (types["a"], types["c"], config.d_dtype or types["d_row"]),
        config.dbias,
        config.mode,
        sources,
        expert_count(offsets.shape),
        problem_class(a.shape, c.shape, offsets),
    )
    check_m_aligned(options, variant)
    check_flags(options, variant)
    return variant


def select_installed(
    options: OpOptions,
    arch: str | None,
    dtypes: tuple[str, str, str],
    dbias: bool,
    weight_mode: str,
    sources: dict[str, str],
    experts: int | None = None,
    problem: Mapping[str, int] | None = None,
) -> Variant:
    """The installed variant of these options, architecture, (A/B, C, D) dtypes, dbias and
    weight mode (dglu.selection), read in full (ManifestError when its entry is bad); else
    VariantNotFoundError naming each field's ``sources`` (the arguments that chose it) and
    the command that builds the variant. With the tile left open the dispatch table's
    rules for ``problem`` (problem_class's fields) are preferred in turn, and with the
    cluster left open too, then one CTA per cluster. select_call selects through it."""
    tile = options.tile or (None, None)
    cluster = options.cluster or (None, None)
    request = VariantRequest(
        arch=arch,
        ab_dtype=dtypes[0],
        c_dtype=dtypes[1],
        d_dtype=dtypes[2],
        act_func=options.act_func,
        act_params=options.act_params,
        dbias=dbias,
        weight_mode=weight_mode,
        b_major=options.b_major,
        tile_m=tile[0],
        tile_n=tile[1],
        cluster_m=cluster[0],
        cluster_n=cluster[1],
        scheduler=options.scheduler,
        deterministic=options.deterministic,
        act_out=options.act_out,
        discrete_col_sfd=options.discrete_col_sfd,
        use_single_group_runtime_offsets=options.single_group,
        experts=experts,
    )
    searched = [f"{entry.directory} ({entry.origin})" for entry in search_path()]
    constants = ", ".join(name for name, _ in options.act_params) or "act_func"
    preferences = []
    if options.tile is None and problem is not None:
        preferences += [dict(rule.choose) for rule in rules_for(installed_dispatch(), arch, problem)]
    if options.cluster is None:
        preferences.append(ONE_CTA)
    chosen = select_variant(
        installed_variants(arch), request, searched, {**sources, "act_params": constants}, preferences
    )
    return full_variant(chosen)


ONE_CTA = {"cluster_m": 1, "cluster_n": 1}  # an open cluster's default


def problem_class(a_shape: Sequence[int], c_shape: Sequence[int], padded_offsets: Any) -> dict[str, int] | None:
    """The fields a dispatch rule bounds (dglu.contract.dispatch.PROBLEM_FIELDS): A's rows
    and K, N (half of C's columns), the expert count; None when a shape is not the
    op's (the checks after the selection say what is wrong)."""
    offsets_shape = getattr(padded_offsets, "shape", None)
    if len(a_shape) < 2 or len(c_shape) < 2 or offsets_shape is None or len(offsets_shape) != 1:
        return None
    return {"m": a_shape[0], "n": c_shape[1] // 2, "k": a_shape[1], "experts": offsets_shape[0]}


def installed_fronts(arch: str | None) -> dict[str, FrontPolicy]:
    """A/B element type -> the front policy of the installed family of ``arch`` (None: any
    architecture) that runs it (dglu.front), in selection order: the first family wins."""
    fronts: dict[str, FrontPolicy] = {}
    for variant in installed_variants(arch):
        for operand in variant.front.operands:
            fronts.setdefault(operand, variant.front)
    return fronts


def family_front(name: str, tensor: Any) -> FrontPolicy:
    """The front policy of the installed family that runs operand ``tensor`` (argument
    ``name``) on its device's architecture (dglu.front.front_of_operands refuses otherwise)."""
    arch = device_arch(tensor.device.index)
    return front_of_operands(name, tensor.dtype, arch, installed_fronts(arch))


def expert_count(padded_offsets_shape: tuple[int, ...]) -> int | None:
    """L, from padded_offsets' shape (l,); None when it has another rank (checked later)."""
    return padded_offsets_shape[0] if len(padded_offsets_shape) == 1 else None


def device_arch(device: int) -> str:
    """The exact cubin architecture of ``device``, if installed cubins cover it; else raise
    naming the device, its compute capability and the architectures installed (only then
    are the other architectures' variants read)."""
    info = device_info(device)
    arch = arch_for_capability(info.capability)
    if arch is None or not installed_variants(arch):
        covered = sorted({variant.key.arch for variant in installed_variants()})
        major, minor = info.capability
        needed = f"{arch} cubins" if arch else "cubins dglu can build"
        raise VariantNotFoundError(
            f"cuda:{info.ordinal} ({info.name}, compute capability {major}.{minor}) needs "
            f"{needed}; none are installed: they cover {', '.join(covered) or 'no architecture'} "
            f"(searched {', '.join(str(entry.directory) for entry in search_path())})"
        )
    return arch


_ENVIRON = os.environ
_CHECK_OFFSETS_KEY = _ENVIRON.encodekey(CHECK_OFFSETS_ENV)


def offsets_check_enabled() -> bool:
    """True when DGLU_CHECK_OFFSETS asks every call to check padded_offsets on the host.
    Read on every call from os.environ's own mapping (os.environ.get raises and catches a
    KeyError while the variable is unset: ~1 us, a sixth of a steady call)."""
    value = _ENVIRON._data.get(_CHECK_OFFSETS_KEY)
    return value is not None and _ENVIRON.decodevalue(value) not in ("", "0")


def check_offsets(padded_offsets: Any, problem: Problem, stream: int, m_aligned: int) -> None:
    """Check padded_offsets' values on the host, unless ``stream`` is capturing a graph."""
    if is_capturing(stream):
        return
    with on_stream(stream, problem.tensors["a"].device):
        values = as_torch(padded_offsets).tolist()
    check_offset_values("padded_offsets", values, problem.scalars["m"], m_aligned)



class OutputRule:
    """An output the wrapper allocates: its role, shape, strides (the variant's: e.g. the
    scale factors' permuted layout), torch dtype, whether the kernels accumulate into it
    (then it is zeroed on the call's stream), its view with a null address (the kernels'
    view of it, once allocated, is that view at the tensor's address) and the strides it is
    allocated with (allocation_strides)."""

    __slots__ = ("role", "shape", "strides", "dtype", "accumulate", "view", "allocated_strides")

    def __init__(
        self, role: str, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, accumulate: bool,
        view: TensorView,
    ) -> None:
        self.role, self.shape, self.strides, self.dtype = role, shape, strides, dtype
        self.accumulate, self.view = accumulate, view
        self.allocated_strides = allocation_strides(shape, strides)


def allocation_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The strides an output of ``shape`` and ``strides`` is allocated with: torch.empty's
    (a plain contiguous tensor, as callers expect: e.g. ``.view(torch.uint8)`` works) when
    a contiguous tensor has ``strides`` along its dimensions of size > 1, else ``strides``
    (the scale factors' permuted layout)."""
    contiguous, expected = [], 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size > 1 and stride != expected:
            return strides
        contiguous.append(expected)
        expected *= max(size, 1)
    return tuple(reversed(contiguous))


def allocate_outputs(rules: tuple[OutputRule, ...], device: int | None) -> dict[str, Any]:
    """The wrapper's new outputs on cuda:``device`` (the CPU when None); DeviceMemoryError,
    before anything is enqueued, when the device has no room for one. (torch.empty_strided:
    it parses its arguments faster than torch.empty.)"""
    torch = torch_module()
    torch_device = _torch_device(device)
    made = {}
    for rule in rules:
        try:
            made[rule.role] = torch.empty_strided(
                rule.shape, rule.allocated_strides, dtype=rule.dtype, device=torch_device
            )
        except torch.OutOfMemoryError as exc:
            size = math.prod(rule.shape) * rule.dtype.itemsize
            raise DeviceMemoryError(
                f"{rule.role}_tensor: no room for the output {tuple(rule.shape)} {rule.dtype} "
                f"({size} bytes) on cuda:{device} ({exc}); nothing was enqueued and no "
                "argument was written. Free device memory (drop unused tensors, "
                "torch.cuda.empty_cache()) or split the call into fewer rows"
            ) from exc
    return made


@functools.cache
def _torch_device(device: int | None) -> Any:
    """torch.device("cuda", device), or None (the CPU) when ``device`` is None."""
    import torch

    return torch.device("cuda", device) if device is not None else None


class Planned:
    """A call's problem with one set of output addresses and, once planned, its ReadyCall
    on one stream (dglu.runner)."""

    __slots__ = ("problem", "ready")

    def __init__(self, problem: Problem) -> None:
        self.problem, self.ready = problem, None


class PreparedCall:
    """What a call's tensors resolve to, kept per call signature (dglu.bound): the problem,
    the outputs the wrapper allocates, its plans (per output addresses and stream: the
    problem with those outputs and its ReadyCall) and where a new plan starts from."""

    def __init__(self, problem: Problem, variant: Variant, outputs: tuple[str, ...]) -> None:
        self.problem = problem
        self.outputs = tuple(_output_rule(role, variant.arguments[role], problem) for role in outputs)
        self.output_roles = tuple(rule.role for rule in self.outputs)
        self.cleared = tuple(rule.role for rule in self.outputs if rule.accumulate)
        self.plans: BoundedCache[Planned] = BoundedCache(OUTPUT_CACHE_CAPACITY)
        self.last: tuple[tuple[tuple[int, ...], int], Planned] | None = None  # the last plan's key and plan
        # where the next plan starts from: the stream and ReadyCall of the last launch and
        # the views of this call's problem that differ from that launch's (besides the
        # outputs); one attribute, so that threads read the three together
        self.start: tuple[int, Any, tuple[str, ...]] | None = None

    def moved(self, problem: Problem, views: tuple[str, ...]) -> PreparedCall:
        """This call for ``problem``, whose ``views`` (of inputs, and the views derived from
        them) differ from this call's problem's: the same outputs, no plans, its first
        plan to start from this call's last launch."""
        call = copy.copy(self)
        call.problem, call.plans, call.last = problem, BoundedCache(OUTPUT_CACHE_CAPACITY), None
        start = self.start
        call.start = (start[0], start[1], views) if start is not None and not start[2] else None
        return call

    def planned(self, key: tuple[tuple[int, ...], int]) -> Planned:
        """The plan of ``key``: the outputs' addresses (in self.outputs' order) and the
        stream; kept as the last plan (compared first by the caller)."""
        found = self.plans.get(key)
        if found is None:
            found = self.plans.get_or_make(key, lambda: Planned(self._with_outputs(key[0])))
        self.last = (key, found)
        return found

    def _with_outputs(self, pointers: tuple[int, ...]) -> Problem:
        """This call's problem with the outputs' views at ``pointers`` (itself without outputs)."""
        problem = self.problem
        if not self.outputs:
            return problem
        views = dict(problem.tensors)
        for rule, pointer in zip(self.outputs, pointers, strict=True):
            view = rule.view
            views[rule.role] = TensorView(view.device, pointer, view.shape, view.strides, view.dtype)
        return Problem(problem.scalars, problem.origins, views)


def _output_rule(role: str, argument: Any, problem: Problem) -> OutputRule:
    """The OutputRule of output ``role`` (its ARGUMENT rule) for ``problem``."""
    shape = tuple(e.value(problem.scalars) for e in argument.shape)
    strides = tuple(e.value(problem.scalars) for e in argument.strides)
    dtype = argument.dtypes[0]
    view = TensorView(problem.tensors["a"].device, 0, shape, strides, dtype)
    return OutputRule(role, shape, strides, torch_dtype(dtype), argument.io == "accumulate", view)


COMMON_ROLES = ("padded_offsets", "alpha", "beta", "prob", "dprob")
# allocated by the wrapper when the variant takes them
WRAPPER_OUTPUTS = ("d_row", "d_col", "sfd_row", "sfd_col", "dbias", "amax", "act_out")
