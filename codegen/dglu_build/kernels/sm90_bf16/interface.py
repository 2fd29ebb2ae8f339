"""What the sm90 BF16 family declares for the manifest, once, in pure Python.

The op's arguments as the kernels take them, derived scalars, limits, descriptor views,
workspaces, the kernels (parameters, launch shape) and the TMA rules of a variant
(docs/manifest.md). The compile step launches the kernels by these same declarations.
"""

from __future__ import annotations

from dglu.contract.element_types import ELEMENT_TYPES, FLOAT_TYPES

from ..front import HOPPER_REFUSED_OPERANDS, float_front
from ..declaration import KernelDeclaration, Int32, Pointer, TmaAtom, TmaTensor, TENSORMAP_BYTES
from .config import (
    BLOCK_COLUMNS,
    DBIAS_SLAB_ROWS,
    DESCRIPTOR_THREADS,
    FINISH_THREADS,
    PARTS_FINISH_WARPS,
    SWIZZLE_BITS,
    TILE_K,
    Config,
)

M_ALIGNED = 256  # expert row ranges start at multiples of 256: a 128-row tile never straddles two
MAX_EXPERTS = 1024  # the warp-parallel expert search covers 32 * 32 experts in two rounds
TMA_ALIGN_BYTES = 16  # TMA needs 16-byte aligned addresses and row pitches

SCALARS = {"n2": "2*n", "l_n2": "l*n2"}
# round_dgrad_to_input_dtype (cuDNN FE's option): R = alpha^2 A B^T rounded to A's dtype
# before the epilogue; a runtime flag of the main kernel (docs/manifest.md ``flags``)
DGRAD_ROUNDING_FLAG = "round_dgrad_to_input_dtype"


def takes_dgrad_rounding(config: Config) -> bool:
    """The BF16 contract's main kernel takes the rounding flag; the block-scaled
    contract's (the MXFP8 family's composition) has no such option."""
    return not config.block_scaled_contract


def flags(config: Config) -> list[str]:
    """The variant's runtime flags, set from the call's options of the same names."""
    return [DGRAD_ROUNDING_FLAG] if takes_dgrad_rounding(config) else []


def scalars(config: Config) -> dict[str, str]:
    """Derived scalars; deterministic mode adds the partial sums' extents: the n-tiles
    (dprob's partials per row) and the slabs of DBIAS_SLAB_ROWS rows (dbias's per column)."""
    if not config.deterministic:
        return dict(SCALARS)
    return {**SCALARS, "n_tiles": f"n/{config.tile_n}", "m_slabs": f"m/{DBIAS_SLAB_ROWS}"}


def _argument(shape: list, strides: list, dtype: str, io: str, align: int | None = None,
              rank_drop: bool = False) -> dict:
    """An ARGUMENT; ``align`` None: one element."""
    rule = {"shape": shape, "strides": strides, "dtypes": [dtype], "io": io,
            "align": align or ELEMENT_TYPES[dtype].size}
    return {**rule, "rank_drop": True} if rank_drop else rule


def _b_strides(config: Config) -> list:
    """B's (N, K, L) strides: K contiguous, or N contiguous (discrete weights, b_major "n")."""
    return [1, "n", "n*k"] if config.b_n_major else ["k", 1, "n*k"]


def arguments(config: Config) -> dict[str, dict]:
    """The op's tensor arguments this variant takes, in the order they are checked."""
    per_expert = _argument(["l"], [1], "fp32", "in")
    if config.discrete_weights:
        b = {"b_ptrs": _argument(["l"], [1], "i64", "in")}
    else:
        b = {"b": _argument(["n", "k", "l"], _b_strides(config), config.ab_dtype, "in", TMA_ALIGN_BYTES)}
    return {
        "a": _argument(["m", "k", 1], ["k", 1, "m*k"], config.ab_dtype, "in", TMA_ALIGN_BYTES, rank_drop=True),
        **b,
        "c": _argument(["m", "n2", 1], ["n2", 1, "m*n2"], config.c_dtype, "in", TMA_ALIGN_BYTES, rank_drop=True),
        "d_row": _argument(["m", "n2", 1], ["n2", 1, "m*n2"], config.d_dtype, "out", TMA_ALIGN_BYTES,
                           rank_drop=True),
        "padded_offsets": _argument(["l"], [1], "i32", "in"),
        "alpha": per_expert,
        "beta": per_expert,
        "prob": _argument(["m", 1, 1], [1, 1, 1], "fp32", "in"),
        "dprob": _argument(["m", 1, 1], [1, 1, 1], "fp32", "accumulate"),
        **({"dbias": _argument(["l", "n2", 1], ["n2", 1, 1], "bf16", "accumulate", TMA_ALIGN_BYTES)}
           if config.dbias else {}),
        # prob * GLU(X), the MLP's second-GEMM input that dW2 needs; rows past valid_m unwritten
        **({"act_out": _argument(["m", "n", 1], ["n", 1, "m*n"], "bf16", "out", TMA_ALIGN_BYTES, rank_drop=True)}
           if config.act_out else {}),
    }


def limits(config: Config) -> dict[str, dict]:
    """Limits on the problem's scalars."""
    k_multiple = TMA_ALIGN_BYTES * 8 // ELEMENT_TYPES[config.ab_dtype].bits
    return {
        "n": {"min": BLOCK_COLUMNS, "multiple_of": BLOCK_COLUMNS,
              "why": f"gate/input columns come in blocks of {BLOCK_COLUMNS}"},
        "k": {"min": k_multiple, "multiple_of": k_multiple,
              "why": f"rows of A span a multiple of {TMA_ALIGN_BYTES} bytes"},
        "l": {"min": 1, "max": MAX_EXPERTS, "why": f"the kernels search at most {MAX_EXPERTS} experts"},
    }


def views(config: Config) -> dict[str, dict]:
    """Discrete weights: the template of one expert's (N, K) matrix that b_descriptors copies."""
    if not config.discrete_weights:
        return {}
    return {"b_expert": {"of": "b_ptrs", "dtype": config.ab_dtype, "shape": ["n", "k", 1],
                         "strides": _b_strides(config), "address_align_down": TMA_ALIGN_BYTES}}


def workspaces(config: Config) -> dict[str, dict]:
    """The scratch tensors this variant's kernels use."""
    found = {}
    if config.deterministic:
        # per-tile partial sums, each written once by a plain store, reduced in a fixed
        # order by dprob_finish and dbias_finish
        found["dprob_parts"] = {"dtype": "fp32", "count": "n_tiles*m", "align": 16, "zero": "never"}
        if config.dbias:
            found["dbias_parts"] = {"dtype": "fp32", "count": "m_slabs*n2", "align": 16, "zero": "never"}
    elif config.dbias:
        # fp32 dbias sums, added into the caller's bf16 dbias by dbias_finish, which zeroes
        # what it read (zeroed once when allocated)
        found["dbias_ws"] = {"dtype": "fp32", "count": "l_n2", "align": 16, "zero": "by_consumer"}
    if config.discrete_weights:
        # one TMA descriptor per expert, written by b_descriptors
        found["b_desc_ws"] = {"dtype": "i64", "count": f"{TENSORMAP_BYTES // 8}*l", "align": TENSORMAP_BYTES,
                              "zero": "never"}
    if config.dynamic_schedule:
        # the int32 count of tiles claimed past the first wave (16 bytes)
        found["tile_counter"] = {"dtype": "i32", "count": "4", "align": 16, "zero": "each_call"}
    return found


def b_tensor(config: Config) -> str:
    """The tensor the main kernel's B descriptor describes."""
    return "b_expert" if config.discrete_weights else "b"


def main_kernel(config: Config) -> KernelDeclaration:
    """The fused kernel; discrete weights read B through per-expert descriptors
    (``b_desc_ws``) made from a template for one expert's matrix. Deterministic mode
    gives it the partial-sum workspaces where the others give dprob and dbias_ws; the BF16
    contract's kernel takes the rounding flag after l, and act_out variants append the
    act_out pointer (the others' kernel has no such parameters)."""
    dprob, dbias_sums = ("dprob_parts", "dbias_parts") if config.deterministic else ("dprob", "dbias_ws")
    return KernelDeclaration(
        role="main",
        params=(
            TmaTensor("a"),
            TmaTensor(b_tensor(config)),
            TmaTensor("c"),
            TmaTensor("d_row"),
            Pointer("padded_offsets"),
            Pointer("alpha"),
            Pointer("beta"),
            Pointer("prob"),
            Pointer(dprob),
            Pointer(dbias_sums, optional=True),
            Pointer("b_desc_ws", optional=not config.discrete_weights),
            Pointer("tile_counter", optional=not config.dynamic_schedule),
            Int32("n"),
            Int32("l"),
            *(Int32(flag) for flag in flags(config)),
            *([Pointer("act_out")] if config.act_out else []),
        ),
        block=config.threads_per_cta,
        grid={"rule": "persistent_tiles", "tile_m": config.tile_m, "tile_n": config.tile_n},
        cluster_m=config.cluster_m,
    )


B_DESCRIPTORS = KernelDeclaration(
    role="b_descriptors",
    params=(TmaAtom("b_expert"), Pointer("b_ptrs"), Pointer("b_desc_ws"), Int32("n"), Int32("k"), Int32("l")),
    block=DESCRIPTOR_THREADS,
    grid={"rule": "elementwise", "count": "l"},
)
DBIAS_FINISH = KernelDeclaration(
    role="dbias_finish",
    params=(Pointer("dbias_ws"), Pointer("dbias"), Int32("l_n2")),
    block=FINISH_THREADS,
    grid={"rule": "elementwise", "count": "l_n2"},
)

# deterministic mode: the partial sums, reduced in a fixed order
DPROB_FINISH = KernelDeclaration(
    role="dprob_finish",
    params=(Pointer("dprob_parts"), Pointer("dprob"), Pointer("padded_offsets"), Int32("m"), Int32("n_tiles"),
            Int32("l")),
    block=FINISH_THREADS,
    grid={"rule": "elementwise", "count": "m"},
)
PARTS_FINISH = KernelDeclaration(  # with dbias: dbias's slabs and dprob's rows in one launch
    role="parts_finish",
    params=(Pointer("dbias_parts"), Pointer("dbias"), Pointer("dprob_parts"), Pointer("dprob"),
            Pointer("padded_offsets"), Int32("m"), Int32("n2"), Int32("n_tiles"), Int32("l")),
    block=FINISH_THREADS,
    grid={"rule": "elementwise", "count": f"l_n2*{PARTS_FINISH_WARPS}"},  # a block: 32 dbias elements
)


def kernels(config: Config) -> list[KernelDeclaration]:
    """The variant's kernels in launch order."""
    if config.deterministic:
        finishers = [PARTS_FINISH if config.dbias else DPROB_FINISH]
    else:
        finishers = [DBIAS_FINISH] if config.dbias else []
    return [*([B_DESCRIPTORS] if config.discrete_weights else []), main_kernel(config), *finishers]


def tma_rules(config: Config) -> dict[str, dict]:
    """TMA descriptors: A (M, K), B (N, K, L) or one expert's (N, K), C and D (M, 2N);
    innermost first, 128B swizzle."""
    common = {"swizzle": "128B", "l2_promotion": "128B", "oob_fill": "none", "interleave": "none"}
    ab = {**common, "dtype": config.ab_dtype}
    if config.b_n_major:
        # N innermost: a 128-byte swizzle row holds 64 of N, so a tile takes tile_n/64 boxes
        b = {"b_expert": {**ab, "dims": [0, 1], "box": [SWIZZLE_BITS // ELEMENT_TYPES[config.ab_dtype].bits, TILE_K]}}
    elif config.discrete_weights:
        b = {"b_expert": {**ab, "dims": [1, 0], "box": [TILE_K, config.tile_n]}}
    else:
        # with a 2-CTA cluster each CTA loads (and multicasts) half of B's tile
        b = {"b": {**ab, "dims": [1, 0, 2], "box": [TILE_K, config.b_tile_n, 1]}}
    slots = config.slots
    return {
        "a": {**ab, "dims": [1, 0], "box": [TILE_K, config.tile_m]},
        **b,
        "c": {**common, "dtype": config.c_dtype, "dims": [1, 0], "box": [slots.c.box_cols, config.tile_m]},
        "d_row": {**common, "dtype": config.d_dtype, "dims": [1, 0], "box": [slots.d.box_cols, config.tile_m]},
    }


def tma_extents(config: Config, tensor: str) -> list[str]:
    """A TMA tensor's int32 extents: its seed shape over the descriptor's rank."""
    shapes = {name: rule["shape"] for name, rule in {**arguments(config), **views(config)}.items()}
    return shapes[tensor][: len(tma_rules(config)[tensor]["dims"])]


# What the front door accepts for this family (dglu.contract.front): BF16 operands, C and D
# in bf16, fp16 or fp32; no block-scaled argument; FP4 refused as on every Hopper family.
FRONT = float_front(FLOAT_TYPES, HOPPER_REFUSED_OPERANDS)


def entry(config: Config) -> dict:
    """The manifest fields of a variant that need no compile (kernels come from the compile)."""
    return {
        "front": FRONT,
        "m_aligned": M_ALIGNED,
        "arguments": arguments(config),
        "scalars": scalars(config),
        "flags": flags(config),
        "limits": limits(config),
        "views": views(config),
        "workspaces": workspaces(config),
        "tma": tma_rules(config),
    }
