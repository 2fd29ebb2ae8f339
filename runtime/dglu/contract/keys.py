"""Variant keys: the fields that identify a kernel variant.

A variant key has the fields of ``KEY_FIELDS`` (docs/manifest.md, VARIANT "key"). The
values each kernel family allows are the family's own (the build side's plugins,
dglu_build.kernels.registry); the runtime selects from manifest data alone. Activation
constants and their defaults (the seed's) are in ``ACT_PARAM_DEFAULTS``. ``variant_name``
gives the readable, filesystem-safe name of a key from the table's ``name_part``s: it also
names the variant's kernel symbols, so it must not change for existing keys
(tests/cpu/test_variant_names.py holds every shipped name): a ``pingpong`` consumer appends
``_pp`` (``cooperative_rf`` ``_crf``), a ``deterministic`` key ``_det``, an ``act_out`` key (the kernel also writes prob * GLU(X),
X = beta * C) ``_aout``, a ``discrete_col_sfd`` key ``_dcs``, a
``use_single_group_runtime_offsets`` key ``_sgo`` and a key compiled for an expert count
``_e<n>``; their defaults ("cooperative", False, 0) add nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .records import Record


REQUIRED = object()  # a KeyField.default: the field has none (a key must give it)


class KeyField(Record):
    """One field of a variant key: everything that names or describes it.

    ``option`` is ``dglu-build add``'s option for it (``--tile`` for tile_m and tile_n
    together, the ``joint`` pair); ``style`` how the option takes it: "value" (``--arch
    sm_90a``, repeatable), "joint" (``--tile 128x64``, the pair's first field gives it),
    "params" (``--act-param NAME=VALUE``), "switch" (``--dbias/--no-dbias``) or "flag"
    (``--deterministic``, written only when True). ``build_default`` is the option's
    default, ``default`` the value a spec entry or manifest key leaving it out takes.
    ``wrapper_source`` and ``class_source`` name the arguments that choose it (for the
    no-variant message).

    ``name_part`` is how the field shows in the variant's name (``variant_name``): a format
    of its value ("{}": the value itself, its underscores dropped, as "_" separates the
    parts; a joint pair's first field formats both values, the second's is None), or a
    mapping of its values to words. A name lists the parts of the fields without a default
    in the table's order, then the suffixes of the others off their default in that order,
    "params" (act_params) among them: ``p`` and a hash of the constants, unless they are
    the activation's defaults. ``request_any``: a call may leave the field open (None in
    dglu.selection.VariantRequest: any variant's value); a request gives each other field
    or takes its key default."""

    name: str
    kind: type  # the JSON type
    description: str
    option: str
    style: str
    wrapper_source: str
    class_source: str
    build_default: Any = None
    default: Any = REQUIRED
    negated: str | None = None  # a switch's "off" option
    name_part: str | Mapping[Any, str] | None = "{}"
    request_any: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not REQUIRED


# The fields, in the canonical order of a variant's key (docs/manifest.md, VARIANT "key").
KEY_TABLE: tuple[KeyField, ...] = (
    KeyField("arch", str, "Target architecture", "--arch", "value", "the tensors' device", "the tensors' device",
             "sm_90a"),
    KeyField("ab_dtype", str, "Dtype of A and B", "--ab-dtype", "value", "a_tensor", "sample_a", "bf16"),
    KeyField("c_dtype", str, "Dtype of C", "--c-dtype", "value", "c_tensor", "sample_c", "bf16"),
    KeyField("d_dtype", str, "Dtype of D", "--d-dtype", "value", "d_dtype", "sample_d_row", "bf16"),
    KeyField("act_func", str, "Activation, e.g. dswiglu or dgeglu", "--act", "value", "act_func", "act_func"),
    KeyField("act_params", dict, "An activation constant", "--act-param", "params", "act_func", "act_func",
             name_part="p{}"),
    KeyField("dbias", bool, "Also compute the bias gradient", "--dbias", "switch", "generate_dbias",
             "sample_dbias", False, negated="--no-dbias", name_part={True: "dbias", False: "nodbias"}),
    KeyField("weight_mode", str, "Weight layout", "--weight-mode", "value", "b_tensor or b_ptrs",
             "sample_b or num_experts", "dense"),
    KeyField("b_major", str, "Major mode of B", "--b-major", "value", "b_major", "b_major", "k"),
    KeyField("tile_m", int, "Tile", "--tile", "joint", "mma_tiler_mn", "mma_tiler_mn", 128,
             name_part="{}x{}", request_any=True),
    KeyField("tile_n", int, "Tile", "--tile", "joint", "mma_tiler_mn", "mma_tiler_mn", 128,
             name_part=None, request_any=True),
    KeyField("cluster_m", int, "Cluster", "--cluster", "joint", "cluster_shape_mn", "cluster_shape_mn", 1,
             name_part="{}x{}", request_any=True),
    KeyField("cluster_n", int, "Cluster", "--cluster", "joint", "cluster_shape_mn", "cluster_shape_mn", 1,
             name_part=None, request_any=True),
    KeyField("scheduler", str, "Tile scheduler", "--scheduler", "value", "use_dynamic_sched", "use_dynamic_sched",
             "static", request_any=True),
    # how the MMA warpgroups share tiles: "cooperative" (both on each tile, accumulators
    # staged for epilogue warpgroups), "pingpong" (alternate tiles, the epilogue in their
    # registers; names end in _pp) or "cooperative_rf" (both on each tile, the epilogue in
    # their registers; _crf); the families' default is "cooperative"
    KeyField("consumer", str,
             "Consumer schedule of the MMA warpgroups (Hopper): cooperative, pingpong or cooperative_rf",
             "--consumer", "value", "the selection (dglu.selection)", "the selection (dglu.selection)",
             "cooperative", "cooperative", name_part={"pingpong": "pp", "cooperative_rf": "crf"}, request_any=True),
    KeyField("deterministic", bool, "Bitwise reproducible D, dprob and dbias (no order-dependent float atomics)",
             "--deterministic", "flag", "deterministic", "deterministic", False, False, negated="--fast",
             name_part="det"),
    KeyField("act_out", bool, "Also write prob * GLU(X), X = beta * C, (M, N) in bf16 (the input dW2 needs)", "--act-out",
             "flag", "act_out or activation_tensor", "act_out or sample_activation", False, False,
             negated="--no-act-out", name_part="aout"),
    # options the Blackwell block-scaled kernel compiles in (cuDNN FE's constructor), each a
    # variant of its own; families that read them at run time (sm90_mxfp8's kernel flags)
    # or not at all keep the default (the front policy's ``compiled_options`` says which)
    KeyField("discrete_col_sfd", bool, "SFD_col in each expert's own block (Blackwell MXFP8 with FP8 D)",
             "--discrete-col-sfd", "flag", "discrete_col_sfd", "discrete_col_sfd", False, False,
             negated="--no-discrete-col-sfd", name_part="dcs"),
    KeyField("use_single_group_runtime_offsets", bool,
             "One expert whose rows are A's M, padded_offsets never read (Blackwell block-scaled, experts 1)",
             "--use-single-group-runtime-offsets", "flag", "use_single_group_runtime_offsets",
             "use_single_group_runtime_offsets", False, False, negated="--no-use-single-group-runtime-offsets",
             name_part="sgo"),
    # 0: the kernels take any expert count L at run time (Hopper); n > 0: compiled for L = n
    # (Blackwell, cuDNN FE's kernel), the variant's name ending in _e<n>
    KeyField("experts", int, "Expert count compiled in: the Blackwell kernels take one L each; 0: any (Hopper)",
             "--experts", "value", "padded_offsets", "sample_padded_offsets", 0, 0, name_part="e{}", request_any=True),
)
KEY_FIELD_TABLE: dict[str, KeyField] = {field.name: field for field in KEY_TABLE}

# Field -> JSON type, in the canonical order of a variant's key.
KEY_FIELDS: dict[str, type] = {field.name: field.kind for field in KEY_TABLE}

# Fields a spec entry or a manifest key may leave out, and the value they then take.
KEY_FIELD_DEFAULTS: dict[str, Any] = {field.name: field.default for field in KEY_TABLE if field.has_default}


def key_record(name: str, module: str, doc: str, defaults: Mapping[str, Any], **namespace: Any) -> Any:
    """A Record class of the table's fields in its order (VariantKey, dglu.selection's
    VariantRequest): ``defaults`` the fields' defaults (those with one last; a default of
    None: the field may be None), ``namespace`` its methods. Record's metaclass makes it
    as a class statement listing the fields would (collections.namedtuple compiles its
    class from source: ~0.2 ms of import)."""
    annotations = {field.name: field.kind.__name__ for field in KEY_TABLE}
    annotations.update({field: f"{annotations[field]} | None" for field, value in defaults.items() if value is None})
    return type(Record)(name, (Record,), {
        "__module__": module, "__qualname__": name, "__doc__": doc, "__annotations__": annotations,
        **defaults, **namespace,
    })


def build_command(entry: Mapping[str, Any]) -> str:
    """The ``dglu-build add`` command line that would build the variant ``entry``."""
    parts = ["dglu-build add"]
    for field in KEY_TABLE:
        value = entry.get(field.name, field.default)
        if field.style == "value":
            if not (field.has_default and value == field.default):  # e.g. experts 0: any
                parts.append(f"{field.option} {value}")
        elif field.style == "params":
            parts += [f"{field.option} {name}={number}" for name, number in dict(value).items()]
        elif field.style == "switch":
            parts.append(field.option if value else field.negated)
        elif field.style == "flag" and value:
            parts.append(field.option)
        elif field.style == "joint" and field.name.endswith("_m"):
            parts.append(f"{field.option} {value}x{entry[field.name.removesuffix('_m') + '_n']}")
    return " ".join(parts)


# Activation -> its compile-time constants and their defaults (the seed's).
ACT_PARAM_DEFAULTS: dict[str, dict[str, float]] = {
    "dswiglu": {},
    "dgeglu": {"geglu_alpha": 1.702, "glu_clamp_max": 7.0, "glu_clamp_min": -7.0, "linear_offset": 1.0},
    "dsituglu": {"situ_beta1": 4.0, "situ_beta2": 25.0},
}
ALL_ACT_PARAMS: dict[str, float] = {
    name: value for params in ACT_PARAM_DEFAULTS.values() for name, value in params.items()
}

# Exact cubin architecture per compute capability: an "a" target runs only on its own
# capability (sm_100a code does not run on a 10.3 device).
ARCH_OF_CAPABILITY: dict[tuple[int, int], str] = {
    (9, 0): "sm_90a",
    (10, 0): "sm_100a",
    (10, 3): "sm_103a",
}


# Names of a family's allowed-value entries that constrain several key fields jointly
# (dglu_build.kernels.family.KernelFamily.allowed).
JOINT_FIELDS: dict[str, tuple[str, ...]] = {
    "tile_mn": ("tile_m", "tile_n"),
    "cluster_mn": ("cluster_m", "cluster_n"),
}


def _name_parts() -> tuple[tuple[str, Any, Mapping[Any, str] | None, str, str | None], ...]:
    """How each field that shows in a variant's name gives its part, in the name's order
    (see KeyField): (field, its default (REQUIRED if none; _PARAMS for act_params), the
    words of its values or None, the format of its value or None, the field the format
    also takes (a joint pair's second) or None)."""
    parts = []
    for field in KEY_TABLE:
        if field.name_part is None:
            continue
        words = field.name_part if isinstance(field.name_part, Mapping) else None
        text = None if words is not None else field.name_part
        second = field.name.removesuffix("_m") + "_n" if field.style == "joint" else None
        default = _PARAMS if field.style == "params" else field.default
        parts.append((field.name, default, words, text, second))
    return tuple(sorted(parts, key=lambda part: part[1] is not REQUIRED))


_PARAMS = object()  # act_params' place in _NAME_PARTS: shown unless the activation's defaults
_NAME_PARTS = _name_parts()


def variant_name(key: Mapping[str, Any]) -> str:
    """A readable, filesystem-safe name, unique per key (``act_params`` a mapping): the
    table's name parts (KeyField.name_part), joined by "_"."""
    parts = []
    for name, default, words, text, second in _NAME_PARTS:
        if default is REQUIRED:
            value = key[name]
        elif default is _PARAMS:
            value = dict(key[name])
            if value == ACT_PARAM_DEFAULTS[key["act_func"]]:
                continue
            value = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]
        else:
            value = key.get(name, default)
            if value == default:
                continue
        if words is not None:
            parts.append(words[value])
        elif second is None:
            parts.append(text.format(str(value).replace("_", "")))
        else:
            parts.append(text.format(str(value).replace("_", ""), str(key[second]).replace("_", "")))
    return "_".join(parts)
