"""Check the op's non-tensor arguments and turn them into the variant fields they select.

The values a family accepts for its options (sf_vec_size, vector_f32, epilogue_op, the
kernel-flag options, ...) and why it refuses the others are the family's front policy,
read from its manifest entries (dglu.front); this module checks the rest, the same for
every family: activation constants given for an activation that does not use them are
refused, use_dynamic_sched picks the scheduler (False: "static", True: "dynamic");
deterministic picks the variants whose D, dprob and dbias are bitwise reproducible (True)
or the fast ones (False); act_out=True picks the variants that also write prob * GLU(X)
(act_out_tensor); cluster_shape_mn=None means the seed's default: (2, 1), a CTA pair, for
a 256-row tile (Blackwell's 2-CTA instructions), else (1, 1), one CTA per cluster;
mma_tiler_mn=None leaves the tile and the consumer to the selection (dglu.selection: the
dispatch table's rule for the problem, dglu.contract.dispatch, among the variants the call's
other arguments allow), and with cluster_shape_mn=None too the cluster (else one CTA);
m_aligned must be the
selected variant's. A tile, cluster or scheduler that no installed variant has is refused
by the selection, with the command that builds it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .contract.front import FrontPolicy
from .contract.keys import ACT_PARAM_DEFAULTS, ALL_ACT_PARAMS
from .contract.records import Record
from .front import check_values

B_MAJORS = ("k", "n")
SINGLE_CTA_CLUSTER = (1, 1)
CTA_PAIR_CLUSTER = (2, 1)
CTA_PAIR_TILE_M = 256  # a 256-row tile runs on a CTA pair (2-CTA MMA instructions)


def _default_cluster(tile: tuple[int, int] | None) -> tuple[int, int] | None:
    """The seed's cluster_shape_mn=None: a CTA pair for a 256-row tile, else one CTA; with
    the tile left open too, the selection's (dglu.selection: the dispatch table's rule for
    the problem, else one CTA)."""
    if tile is None:
        return None
    return CTA_PAIR_CLUSTER if tile[0] == CTA_PAIR_TILE_M else SINGLE_CTA_CLUSTER

class OpOptions(Record):
    """The variant fields chosen by arguments (the tensors choose the dtypes)."""

    act_func: str
    act_params: tuple[tuple[str, float], ...]
    b_major: str
    tile: tuple[int, int] | None  # None: the selection's default
    cluster: tuple[int, int] | None  # None: the selection's (tile and cluster both left open)
    scheduler: str  # "static" or "dynamic"
    m_aligned: int  # checked against the selected variant's
    deterministic: bool = False  # True: the variant without order-dependent float atomics
    act_out: bool = False  # True: the variant that also writes prob * GLU(X)
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
    policy: FrontPolicy,
) -> OpOptions:
    """Check the configuration arguments (seed names) and return the variant fields they
    select; ``policy``: the front policy of the family that runs the call's operands,
    whose rules give the values each option accepts (dglu.front)."""
    given = locals()
    if cd_major != "n":
        raise ValueError(f"cd_major: must be 'n' (C and D must be N-major), got {cd_major!r}")
    check_values(policy, {name: value for name, value in given.items() if name != "policy"})
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
        discrete_col_sfd=bool(discrete_col_sfd),
        single_group=bool(use_single_group_runtime_offsets),
        vector_f32=bool(vector_f32),
        epilogue_op=epilogue_op,
        round_dgrad=round_dgrad_to_input_dtype,
    )


def check_m_aligned(options: OpOptions, variant: Any) -> None:
    """m_aligned must be the selected variant's row alignment of expert ranges."""
    if options.m_aligned != variant.m_aligned:
        raise ValueError(
            f"m_aligned: must be {variant.m_aligned} (variant {variant.name}'s experts own "
            f"{variant.m_aligned}-row aligned ranges), got {options.m_aligned!r}"
        )


def check_flags(options: OpOptions, variant: Any) -> None:
    """Each option that sets a kernel flag to 1 selects a variant whose kernel reads that
    flag (its manifest entry lists it) or compiles the option in (its front policy's
    ``compiled_options``: the selection matched its key); else refuse, naming the option
    and the variant."""
    for name, value in options.flags().items():
        if value and name not in variant.flags and name not in variant.front.compiled_options:
            raise ValueError(
                f"{name}: True, but the selected variant {variant.name}'s kernel has no such "
                f"flag (its manifest entry lists {list(variant.flags) or 'none'}): pass False, "
                "or install a variant whose kernel implements it"
            )
