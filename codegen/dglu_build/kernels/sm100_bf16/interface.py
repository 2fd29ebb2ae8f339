"""What the sm100 BF16 family declares for the manifest, once, in pure Python.

The kernels are cuDNN FE's: their parameters are what the DSL makes of
``MoEGroupedGemmDgluDbiasBf16Kernel.__call__``'s arguments with M, N and K symbolic and
the expert count compiled in (docs/manifest.md, "sm100_bf16"); the compile tier checks
every declared parameter against the cubin's KPARAM_INFO. The op's arguments, limits and
checks are those cuDNN FE's BF16 path applies (``GroupedGemmDgluBf16API.check_support``):
M % 256, N % 32, 16-byte aligned addresses and rows, L <= 1024, bf16 A/B and dbias,
C and D in bf16, fp16 or fp32.

The pieces both Blackwell families declare alike (cuDNN FE's two kernels share their
launch skeleton) are the public helpers here, which sm100_blockscaled's interface uses:
``argument``, ``matrix``, ``b_strides``, ``common_arguments``, ``b_expert_view``,
``workspaces``, ``helper_kernel``, ``TMA_COMMON``/``epilogue_tma`` and ``entry_fields``.
"""

from __future__ import annotations

from dglu.contract.element_types import ELEMENT_TYPES, FLOAT_TYPES

from ..front import float_front
from ..declaration import (
    Float32Constant,
    Int32,
    Int64,
    KernelDeclaration,
    Pointer,
    PointerExtents,
    TmaTensor,
    Zeros,
)
from .config import (
    EPILOGUE_TILE,
    HELPER_THREADS,
    M_ALIGNED,
    THREADS_PER_CTA,
    TILE_K,
    Config,
)

ALIGN_BYTES = 16  # cuDNN FE requires every data pointer 16-byte aligned
SCALARS = {"n2": "2*n"}
# by the bytes of one epilogue row of C or D (32 columns: 32 bytes for FP8, 64 for 16-bit, 128 for fp32)
SWIZZLES = {32: "32B", 64: "64B", 128: "128B"}
SWIZZLE_ELEMENTS = 64  # bf16 elements in one 128-byte swizzle row


def argument(shape: list, strides: list, dtype: str, io: str, align: int = ALIGN_BYTES, **extra: object) -> dict:
    """An ARGUMENT rule (docs/manifest.md); ``extra``: its optional fields (rank_drop, allocation)."""
    return {"shape": shape, "strides": strides, "dtypes": [dtype], "io": io, "align": align, **extra}


def matrix(rows: str, cols: str, dtype: str, io: str) -> dict:
    """An (rows, cols, 1) row-major matrix of the op (A, C, D_row, D_col); rank 2 accepted."""
    return argument([rows, cols, 1], [cols, 1, f"{rows}*{cols}"], dtype, io, rank_drop=True)


def b_strides(config: Config) -> list:
    """B's (N, K, L) strides: K contiguous, or N contiguous (b_major "n")."""
    return [1, "n", "n*k"] if config.b_n_major else ["k", 1, "n*k"]


def common_arguments(config: Config, ab_dtype: str, b: dict[str, dict], outputs: dict[str, dict],
                     after_a: dict[str, dict] | None = None) -> dict[str, dict]:
    """Both families' tensor arguments, in check order: A (then ``after_a``), the weights
    ``b``, C, D_row, the ``outputs`` beyond it, then the per-expert and per-row tensors and
    dbias (the kernel adds its bf16 partial sums with atomics: the wrapper's starts at zero)."""
    per_expert = argument(["l"], [1], "fp32", "in")
    return {
        "a": matrix("m", "k", ab_dtype, "in"),
        **(after_a or {}),
        **b,
        "c": matrix("m", "n2", config.c_dtype, "in"),
        "d_row": matrix("m", "n2", config.d_dtype, "out"),
        **outputs,
        "padded_offsets": argument(["l"], [1], "i32", "in"),
        "alpha": per_expert,
        "beta": per_expert,
        "prob": argument(["m", 1, 1], [1, 1, 1], "fp32", "in"),
        "dprob": argument(["m", 1, 1], [1, 1, 1], "fp32", "accumulate"),
        **({"dbias": argument(["l", "n2", 1], ["n2", 1, 1], "bf16", "accumulate")} if config.dbias else {}),
    }


def arguments(config: Config) -> dict[str, dict]:
    """The op's tensor arguments this variant takes, in the order they are checked."""
    if config.discrete_weights:
        b = {"b_ptrs": argument(["l"], [1], "i64", "in", align=8)}
    else:
        b = {"b": argument(["n", "k", "l"], b_strides(config), "bf16", "in")}
    return common_arguments(config, "bf16", b, {})


def limits(config: Config) -> dict[str, dict]:
    """cuDNN FE's shape checks, and the expert count compiled in."""
    k_multiple = ALIGN_BYTES * 8 // ELEMENT_TYPES["bf16"].bits
    return {
        "m": {"multiple_of": M_ALIGNED, "why": f"the kernel's expert row ranges are padded to {M_ALIGNED}"},
        "n": {"min": 32, "multiple_of": 32, "why": "gate/input columns come in blocks of 32"},
        "k": {"min": k_multiple, "multiple_of": k_multiple, "why": f"rows of A and B span a multiple of {ALIGN_BYTES} bytes"},
        "l": {"min": config.experts, "max": config.experts,
              "why": f"this variant's kernel is compiled for {config.experts} experts (build others with --experts)"},
    }


def b_expert_view(config: Config, dtype: str) -> dict[str, dict]:
    """Discrete weights: the template of one expert's (N, K) matrix of ``dtype`` (the main
    kernel's B descriptor; the helper writes each expert's own into the workspace)."""
    if not config.discrete_weights:
        return {}
    return {"b_expert": {"of": "b_ptrs", "dtype": dtype, "shape": ["n", "k", 1], "strides": b_strides(config),
                         "address_align_down": ALIGN_BYTES}}


def views(config: Config) -> dict[str, dict]:
    """The TMA views: with discrete weights, one expert's B."""
    return b_expert_view(config, "bf16")


def workspaces(config: Config) -> dict[str, dict]:
    """The kernel's scratch: per-expert B descriptors and/or the dynamic tile counter,
    written by the helper kernel before the main one reads them (never zeroed by dglu)."""
    return {"workspace": {"dtype": "i64", "count": config.workspace_bytes // 8, "align": 128, "zero": "never"}}


def b_tensor(config: Config) -> str:
    """The tensor the main kernel's B descriptor describes."""
    return "b_expert" if config.discrete_weights else "b"


def main_kernel(config: Config) -> KernelDeclaration:
    """cuDNN FE's main kernel: the 19 parameters (20 with dbias) of its launch."""
    b_extents = ("n", "k", 1) if config.discrete_weights else ("n", "k")
    mma_align = config.mma_state_bytes // 2
    return KernelDeclaration(
        role="main",
        params=(
            Zeros("mma_state", config.mma_state_bytes, mma_align),
            TmaTensor("a", ("m", "k")),
            TmaTensor(b_tensor(config), b_extents),
            TmaTensor("c", ("m", "n2")),
            TmaTensor("d_row", ("m", "n2")),
            Pointer("padded_offsets"),
            Pointer("alpha"),
            Pointer("beta"),
            PointerExtents("prob", ("m",)),
            PointerExtents("dprob", ("m",)),
            Float32Constant("linear_offset", config.linear_offset),
            *([PointerExtents("dbias", ("l", "n2"))] if config.dbias else []),
            Pointer("workspace"),
            Int32("l"),
            Int32("n"),
            Int32("k"),
        ),
        block=THREADS_PER_CTA,
        grid={"rule": "active_clusters"},
        cluster_m=config.cluster_m,
        cluster_n=config.cluster_n,
    )


def helper_kernel(config: Config, pointers: tuple[str, ...] = ("b_ptrs",), k: str = "k",
                  mma_states: tuple[str, ...] = ("mma_state",), mma_align: int | None = None) -> KernelDeclaration:
    """cuDNN FE's helper: one block per expert writes its descriptors (discrete: of the
    weight ``pointers``' tensors, K given as ``k``), block 0 resets the tile counter
    (dynamic); dense weights leave its weight arguments zero. Then the workspace and the
    kernel's zero ``mma_states`` (aligned to ``mma_align``, else half their size)."""
    if config.discrete_weights:
        weights = (*map(Pointer, pointers), Int32("n"), Int32(k), Int64("n" if config.b_n_major else k))
        count: str | int = "l"
    else:
        weights = (*(Zeros(name, 8, 8) for name in pointers), Zeros("n", 4, 4), Zeros("k", 4, 4),
                   Zeros("b_stride", 8, 8))
        count = 1
    align = mma_align or config.mma_state_bytes // 2
    mma = tuple(Zeros(name, config.mma_state_bytes, align) for name in mma_states)
    return KernelDeclaration(role="helper", params=(*weights, Pointer("workspace"), *mma), block=HELPER_THREADS,
                             grid={"rule": "elementwise", "count": count})


def kernels(config: Config) -> list[KernelDeclaration]:
    """The variant's kernels in launch order."""
    return [*([helper_kernel(config)] if config.has_helper else []), main_kernel(config)]


def tma_rules(config: Config) -> dict[str, dict]:
    """TMA descriptors, innermost first: A (K, M) and B (K, N, L) in 64-wide K boxes with
    128-byte swizzle (each CTA of a pair loads half of B's N); C and D (2N, M) in epilogue
    tiles of 32 columns by 128 rows, swizzled by the bytes of one row."""
    ab = {**TMA_COMMON, "dtype": "bf16", "swizzle": "128B"}
    if config.b_n_major:
        # N innermost: a 128-byte swizzle row holds 64 of N; the tile takes b_box_n/64 boxes
        b_rule = {**ab, "dims": [0, 1, 2], "box": [SWIZZLE_ELEMENTS, TILE_K, 1]}
    else:
        b_rule = {**ab, "dims": [1, 0, 2], "box": [TILE_K, config.b_box_n, 1]}
    return {
        "a": {**ab, "dims": [1, 0], "box": [TILE_K, config.cta_tile_m]},
        b_tensor(config): b_rule,
        "c": epilogue_tma(config.c_dtype, ELEMENT_TYPES[config.c_dtype].bits),
        "d_row": epilogue_tma(config.d_dtype, ELEMENT_TYPES[config.d_dtype].bits),
    }


TMA_COMMON = {"l2_promotion": "128B", "oob_fill": "none", "interleave": "none"}


def epilogue_tma(dtype: str, bits: int) -> dict:
    """The TMA rule of C, D_row or D_col (``dtype`` of ``bits``): (2N, M) in epilogue tiles
    of 32 columns by 128 rows, swizzled by the bytes of one row."""
    rows, cols = EPILOGUE_TILE
    return {**TMA_COMMON, "dtype": dtype, "dims": [1, 0], "box": [cols, rows], "swizzle": SWIZZLES[cols * bits // 8]}


# What the front door accepts for this family (dglu.contract.front): cuDNN FE's BF16 path.
FRONT = float_front(FLOAT_TYPES, {})


def entry_fields(config: Config, front: dict, scalars: dict[str, str], arguments: dict, limits: dict, views: dict,
                 tma: dict) -> dict:
    """The manifest fields of a variant that need no compile (kernels come from the
    compile): the family's declarations given, the workspace and row alignment both share."""
    return {"front": front, "m_aligned": M_ALIGNED, "arguments": arguments, "scalars": scalars, "limits": limits,
            "views": views, "workspaces": workspaces(config), "tma": tma}


def entry(config: Config) -> dict:
    """The manifest fields of a variant that need no compile (kernels come from the compile)."""
    return entry_fields(config, FRONT, dict(SCALARS), arguments(config), limits(config), views(config),
                        tma_rules(config))
