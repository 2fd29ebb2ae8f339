"""Check the op's non-tensor arguments and turn them into the variant fields they select.

Arguments a backend cannot honour raise (never silently ignored): on the BF16 backend the
block-scaled options and vector_f32; on both, activation constants given for an activation
that does not use them. The block-scaled backend takes sf_vec_size=32 with FP8 operands
(MXFP8) and 16 with FP4 operands (NVFP4, where the device runs them: dglu.blockscaled),
discrete_col_sfd and use_single_group_runtime_offsets (kernel flags), vector_f32 (no
effect: Hopper has no packed-f32 math) and epilogue_op in EPILOGUE_OPS (validated and part
of the op's configuration, applied by none of NVIDIA's dGLU kernels, so by none of ours). use_dynamic_sched picks the scheduler (False: "static", True: "dynamic"); deterministic picks
the variants whose D, dprob and dbias are bitwise reproducible (True) or the fast ones (False);
act_out=True picks the variants that also write prob * GLU(X) (act_out_tensor);
cluster_shape_mn=None means the seed's default: (2, 1), a CTA pair, for a 256-row tile
(Blackwell's 2-CTA instructions), else (1, 1), one CTA per cluster;
mma_tiler_mn=None leaves the tile to the selection (dglu.selection); m_aligned must be the
selected variant's. A tile, cluster or
scheduler that no installed variant has is refused by the selection, with the command that
builds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from .contract.keys import ACT_PARAM_DEFAULTS, ALL_ACT_PARAMS
from .dtypes import FLOAT_TYPES, FP8_TYPES, element_type_of

B_MAJORS = ("k", "n")
SINGLE_CTA_CLUSTER = (1, 1)
CTA_PAIR_CLUSTER = (2, 1)
CTA_PAIR_TILE_M = 256  # a 256-row tile runs on a CTA pair (2-CTA MMA instructions)


def _default_cluster(tile: tuple[int, int] | None) -> tuple[int, int]:
    """The seed's cluster_shape_mn=None: a CTA pair for a 256-row tile, else one CTA."""
    return CTA_PAIR_CLUSTER if tile is not None and tile[0] == CTA_PAIR_TILE_M else SINGLE_CTA_CLUSTER

MXFP8_SF_VEC_SIZE = 32
NVFP4_SF_VEC_SIZE = 16  # FP4 operands' E4M3 scales (Blackwell)
EPILOGUE_OPS = (None, "identity", "relu", "srelu")

# Arguments with one accepted value on the BF16 backend: (name, value, exception type, why).
_FIXED = (
    ("sf_vec_size", 16, ValueError, "scale-factor vectors belong to the block-scaled backend"),
    (
        "discrete_col_sfd",
        False,
        ValueError,
        "column scale factors belong to the block-scaled backend",
    ),
    ("epilogue_op", None, ValueError, "the BF16 contract has no epilogue op"),
    ("vector_f32", False, NotImplementedError, "the packed-f32 epilogue is not available on SM90"),
    (
        "use_single_group_runtime_offsets",
        False,
        ValueError,
        "single-group runtime offsets belong to the block-scaled backend",
    ),
)


class OpOptions(NamedTuple):
    """The variant fields chosen by arguments (the tensors choose the dtypes)."""

    act_func: str
    act_params: tuple[tuple[str, float], ...]
    b_major: str
    tile: tuple[int, int] | None  # None: the selection's default
    cluster: tuple[int, int]
    scheduler: str  # "static" or "dynamic"
    m_aligned: int  # checked against the selected variant's
    deterministic: bool = False  # True: the variant without order-dependent float atomics
    act_out: bool = False  # True: the variant that also writes prob * GLU(X)
    block_scaled: bool = False  # the MXFP8 backend (FP8 operands with E8M0 scales)
    discrete_col_sfd: bool = False  # block-scaled: SFD_col in the per-expert layout
    single_group: bool = False  # block-scaled: one expert whose rows come from A's shape
    vector_f32: bool = False  # block-scaled: accepted, no effect on Hopper
    epilogue_op: str | None = None  # block-scaled: validated, applied by no dGLU kernel
    round_dgrad: bool = False  # R rounded to A's dtype before the epilogue (a kernel flag)

    def flags(self) -> dict[str, int]:
        """The values of the kernel flags (docs/manifest.md ``flags``) these options set, by
        their option names: a variant reads those its entry lists."""
        return {
            "discrete_col_sfd": int(self.discrete_col_sfd),
            "use_single_group_runtime_offsets": int(self.single_group),
            "round_dgrad_to_input_dtype": int(self.round_dgrad),
        }


def _pair(name: str, value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if (
        not isinstance(value, tuple | list)
        or len(value) != 2
        or not all(type(v) is int and v > 0 for v in value)
    ):
        raise ValueError(f"{name}: expected None or two positive ints, got {value!r}")
    return (value[0], value[1])


def _act_params(act_func: str, constants: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    for name, value in constants.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{name}: expected a finite number, got {value!r}")
    used = ACT_PARAM_DEFAULTS[act_func]
    for name, default in ALL_ACT_PARAMS.items():
        if name not in used and constants[name] != default:
            raise ValueError(
                f"{name}: act_func={act_func!r} does not use it; got {constants[name]!r} "
                f"(leave it at its default {default!r})"
            )
    if act_func == "dgeglu" and not constants["glu_clamp_min"] < constants["glu_clamp_max"]:
        raise ValueError(
            f"glu_clamp_min: must be below glu_clamp_max ({constants['glu_clamp_max']!r}), "
            f"got {constants['glu_clamp_min']!r}"
        )
    for name in ("situ_beta1", "situ_beta2") if act_func == "dsituglu" else ():
        if constants[name] <= 0:
            raise ValueError(
                f"{name}: must be positive (dSiTU-GLU divides by it), got {constants[name]!r}"
            )
    return tuple(sorted((name, float(constants[name])) for name in used))


def check_options(
    *,
    acc_dtype: Any,
    mma_tiler_mn: Any,
    cluster_shape_mn: Any,
    sf_vec_size: Any,
    vector_f32: Any,
    m_aligned: Any,
    discrete_col_sfd: Any,
    act_func: Any,
    geglu_alpha: Any,
    glu_clamp_max: Any,
    glu_clamp_min: Any,
    linear_offset: Any,
    situ_beta1: Any,
    situ_beta2: Any,
    b_major: Any,
    epilogue_op: Any,
    use_dynamic_sched: Any,
    cd_major: Any = "n",
    deterministic: Any = False,
    act_out: Any = False,
    use_single_group_runtime_offsets: Any = False,
    round_dgrad_to_input_dtype: Any = False,
    block_scaled: bool = False,
    fp4: bool = False,
) -> OpOptions:
    """Check the configuration arguments (seed names) and return the variant fields they
    select; ``block_scaled``: the call's operands are FP8 (``fp4``: FP4) with scale factors."""
    given = locals()
    if cd_major != "n":
        raise ValueError(f"cd_major: must be 'n' (C and D must be N-major), got {cd_major!r}")
    if block_scaled:
        _check_block_scaled_options(given)
    else:
        for name, required, error, why in _FIXED:
            if given[name] != required:
                raise error(f"{name}: must be {required!r} ({why}), got {given[name]!r}")
    if acc_dtype is not None and str(acc_dtype) != "torch.float32":
        raise ValueError(
            f"acc_dtype: must be torch.float32 (the only accumulator), got {acc_dtype}"
        )
    if act_func not in ACT_PARAM_DEFAULTS:
        raise ValueError(
            f"act_func: expected one of {sorted(ACT_PARAM_DEFAULTS)}, got {act_func!r}"
        )
    if b_major not in B_MAJORS:
        raise ValueError(f"b_major: expected one of {list(B_MAJORS)}, got {b_major!r}")
    if type(m_aligned) is not int or m_aligned <= 0:
        raise ValueError(f"m_aligned: expected a positive int, got {m_aligned!r}")
    if not isinstance(use_dynamic_sched, bool):
        raise ValueError(f"use_dynamic_sched: expected a bool, got {use_dynamic_sched!r}")
    if not isinstance(deterministic, bool):
        raise ValueError(f"deterministic: expected a bool, got {deterministic!r}")
    if not isinstance(act_out, bool):
        raise ValueError(f"act_out: expected a bool, got {act_out!r}")
    if not isinstance(round_dgrad_to_input_dtype, bool):
        raise ValueError(f"round_dgrad_to_input_dtype: expected a bool, got {round_dgrad_to_input_dtype!r}")
    constants = {name: given[name] for name in ALL_ACT_PARAMS}
    return OpOptions(
        act_func=act_func,
        act_params=_act_params(act_func, constants),
        b_major=b_major,
        tile=_pair("mma_tiler_mn", mma_tiler_mn),
        cluster=_pair("cluster_shape_mn", cluster_shape_mn) or _default_cluster(_pair("mma_tiler_mn", mma_tiler_mn)),
        scheduler="dynamic" if use_dynamic_sched else "static",
        m_aligned=m_aligned,
        deterministic=deterministic,
        act_out=act_out,
        block_scaled=block_scaled,
        discrete_col_sfd=bool(discrete_col_sfd),
        single_group=bool(use_single_group_runtime_offsets),
        vector_f32=bool(vector_f32),
        epilogue_op=epilogue_op,
        round_dgrad=round_dgrad_to_input_dtype,
    )


def _check_block_scaled_options(given: Mapping[str, Any]) -> None:
    """The block-scaled backend's options (see the module docstring)."""
    if given["fp4"]:
        if given["sf_vec_size"] != NVFP4_SF_VEC_SIZE:
            raise ValueError(
                f"sf_vec_size: FP4 operands take one E4M3 scale per {NVFP4_SF_VEC_SIZE} elements of K "
                f"(NVFP4), so it must be {NVFP4_SF_VEC_SIZE}; got {given['sf_vec_size']!r}"
            )
    elif given["sf_vec_size"] != MXFP8_SF_VEC_SIZE:
        raise ValueError(
            f"sf_vec_size: FP8 operands take one E8M0 scale per {MXFP8_SF_VEC_SIZE} elements of K "
            f"(MXFP8), so it must be {MXFP8_SF_VEC_SIZE}; got {given['sf_vec_size']!r} (16-element "
            "scales pair with FP4 operands, which Hopper cannot run)"
        )
    for name in ("discrete_col_sfd", "use_single_group_runtime_offsets", "vector_f32"):
        if not isinstance(given[name], bool):
            raise ValueError(f"{name}: expected a bool, got {given[name]!r}")
    if given["round_dgrad_to_input_dtype"] is not False:
        raise ValueError(
            "round_dgrad_to_input_dtype: must be False with FP8 operands (the BF16 kernels' option; "
            f"cuDNN FE's block-scaled kernels have none either), got {given['round_dgrad_to_input_dtype']!r}"
        )
    if given["epilogue_op"] not in EPILOGUE_OPS:
        raise ValueError(f"epilogue_op: expected one of {list(EPILOGUE_OPS)}, got {given['epilogue_op']!r}")


def check_m_aligned(options: OpOptions, variant: Any) -> None:
    """m_aligned must be the selected variant's row alignment of expert ranges."""
    if options.m_aligned != variant.m_aligned:
        raise ValueError(
            f"m_aligned: must be {variant.m_aligned} (variant {variant.name}'s experts own "
            f"{variant.m_aligned}-row aligned ranges), got {options.m_aligned!r}"
        )


def check_flags(options: OpOptions, variant: Any) -> None:
    """Each option that sets a kernel flag to 1 selects a variant whose kernel reads that
    flag (its manifest entry lists it); else refuse, naming the option and the variant."""
    for name, value in options.flags().items():
        if value and name not in variant.flags:
            raise ValueError(
                f"{name}: True, but the selected variant {variant.name}'s kernel has no such "
                f"flag (its manifest entry lists {list(variant.flags) or 'none'}): pass False, "
                "or install a variant whose kernel implements it"
            )


def check_absent(reason: str, error: type[Exception], **arguments: Any) -> None:
    """Raise ``error`` naming the first of ``arguments`` that is not None."""
    for name, value in arguments.items():
        if value is not None:
            raise error(f"{name}: {reason}; pass None")


def output_dtype_name(name: str, dtype: Any, block_scaled: bool = False) -> str:
    """The manifest name of an output dtype argument (None: torch.bfloat16). Block-scaled
    (FP8) operands produce FP8 D with its scale factors: torch.float8_e4m3fn or e5m2."""
    if dtype is None and not block_scaled:
        return "bf16"
    element = element_type_of(dtype) if dtype is not None else None
    if block_scaled and (element is None or element.name not in FP8_TYPES):
        raise ValueError(
            f"{name}: FP8 operands produce FP8 D (D_row, D_col with SFD_row, SFD_col): expected "
            f"torch.float8_e4m3fn or torch.float8_e5m2, got {dtype!r} (bf16/fp16 D comes "
            "with FP4 operands, which Hopper cannot run)"
        )
    if not block_scaled and (element is None or element.name not in FLOAT_TYPES):
        raise ValueError(
            f"{name}: expected torch.bfloat16, torch.float16 or torch.float32, " f"got {dtype!r}"
        )
    return element.name
