"""What the wrapper and the class API share: argument names, an op's checked configuration,
the checks before the selection and the selection step (dglu.jax's too) and the
padded_offsets check (dglu.api has the wrapper, dglu.op the class API, dglu.prepared a
call's tensors resolved against its variant)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from .arguments import ARGUMENTS
from .arrays import as_torch
from .driver import device_info
from .errors import VariantNotFoundError
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
from .problem import Problem
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



COMMON_ROLES = ("padded_offsets", "alpha", "beta", "prob", "dprob")
# allocated by the wrapper when the variant takes them
WRAPPER_OUTPUTS = ("d_row", "d_col", "sfd_row", "sfd_col", "dbias", "amax", "act_out")
