"""What the sm90 MXFP8 family declares for the manifest, once, in pure Python.

The arguments are the seed's block-scaled ones; the scale-factor tensors (SFA, SFB, SFD_row,
SFD_col) have the seed's logical shape (32, 4, ceil(rows/128), 4, ceil(Kc/128), L) and the
strides of its permuted allocation (docs/blockscaled_contract.md). The fused kernel
(fused.py) takes the sm90 BF16 family's declared parameters over FP8 A and B (or B's
expert template), C (any of its dtypes, FP8 too: the epilogue reads it in shared memory)
and the effective offsets, then the scale factors and the quantized outputs; no workspace
grows with M or K (dbias's fp32 sums are L x 2N, as in the BF16 family).
"""

from __future__ import annotations

from dglu.contract.element_types import ELEMENT_TYPES, FLOAT_TYPES, FP8_TYPES

from ..declaration import Int32, KernelDeclaration, Pointer, TmaTensor
from ..front import AMAX_REFUSED, HOPPER_REFUSED_OPERANDS, NO_E5M3_SCALES, SEED_OUTPUTS, accepted, dtypes, required, spelled
from ..scale_factors import SF_ATOM_BYTES, scale_factor_argument
from ..sm90_bf16 import interface as bf16
from .config import CONVERT_THREADS, SF_VEC, Config

EPILOGUE_OPS = (None, "identity", "relu", "srelu")  # validated, applied by no dGLU kernel (NVIDIA's neither)
FLAGS = ("discrete_col_sfd", "use_single_group_runtime_offsets")

SCALARS = {
    "n2": "2*n",
    "l_n2": "l*n2",
    "n2_blocks": "n2/32",  # along D's columns
    "m_atoms": "m/128",  # 128-row atoms of SFA and SFD_row, 128-column ones of SFD_col
    "n_atoms": "n/128",
    "n2_atoms": "n2/128",
    "k_atoms": "k/128",  # 4-block atoms along K
    "k_pitch": "512*k_atoms",  # bytes per 128 rows of SFA and SFB
    "n2_pitch": "512*n2_atoms",  # of SFD_row
    "m_pitch": "512*m_atoms",  # of SFD_col
    "sfa_bytes": "m_atoms*k_pitch",
    "sfb_bytes": "n_atoms*k_pitch",  # per expert
    "sfd_row_bytes": "m_atoms*n2_pitch",
    "sfd_col_bytes": "n2_atoms*m_pitch",
}
# the expressions above spell them out
assert SF_VEC == 32 and SF_ATOM_BYTES == 512


def _argument(shape: list, strides: list, dtype: str, io: str, align: int | None = None, **extra) -> dict:
    """An ARGUMENT; ``align`` None: one element."""
    return {"shape": shape, "strides": strides, "dtypes": [dtype], "io": io,
            "align": align or ELEMENT_TYPES[dtype].size, **extra}


def _scale_factors(row_atoms: str, k_atoms: str, l: str | int, pitch: str, size: str, io: str) -> dict:
    """A scale-factor ARGUMENT of the seed's logical shape and permuted strides (E8M0)."""
    return scale_factor_argument(row_atoms, k_atoms, l, pitch, size, io)


def _matrix(rows: str, cols: str, dtype: str, io: str) -> dict:
    """An (rows, cols, 1) N-major matrix of the op (A, C, D_row, D_col); rank 2 accepted."""
    return _argument([rows, cols, 1], [cols, 1, f"{rows}*{cols}"], dtype, io, bf16.TMA_ALIGN_BYTES,
                     rank_drop=True)


def _b_strides(config: Config) -> list:
    return [1, "n", "n*k"] if config.b_n_major else ["k", 1, "n*k"]


def arguments(config: Config) -> dict[str, dict]:
    """The op's tensor arguments this variant takes, in the order they are checked."""
    per_expert = _argument(["l"], [1], "fp32", "in")
    if config.discrete_weights:
        b = {"b_ptrs": _argument(["l"], [1], "i64", "in"), "sfb_ptrs": _argument(["l"], [1], "i64", "in")}
    else:
        b = {
            "b": _argument(["n", "k", "l"], _b_strides(config), config.ab_dtype, "in", bf16.TMA_ALIGN_BYTES),
            "sfb": _scale_factors("n_atoms", "k_atoms", "l", "k_pitch", "sfb_bytes", "in"),
        }
    return {
        "a": _matrix("m", "k", config.ab_dtype, "in"),
        "sfa": _scale_factors("m_atoms", "k_atoms", 1, "k_pitch", "sfa_bytes", "in"),
        **b,
        "c": _matrix("m", "n2", config.c_dtype, "in"),
        "d_row": _matrix("m", "n2", config.d_dtype, "out"),
        "d_col": _matrix("m", "n2", config.d_dtype, "out"),
        "sfd_row": _scale_factors("m_atoms", "n2_atoms", 1, "n2_pitch", "sfd_row_bytes", "out"),
        "sfd_col": _scale_factors("n2_atoms", "m_atoms", 1, "m_pitch", "sfd_col_bytes", "out"),
        "norm_const": _argument([1], [1], "fp32", "in"),
        "padded_offsets": _argument(["l"], [1], "i32", "in"),
        "alpha": per_expert,
        "beta": per_expert,
        "prob": _argument(["m", 1, 1], [1, 1, 1], "fp32", "in"),
        "dprob": _argument(["m", 1, 1], [1, 1, 1], "fp32", "accumulate"),
        **({"dbias": _argument(["l", "n2", 1], ["n2", 1, 1], "bf16", "accumulate", bf16.TMA_ALIGN_BYTES)}
           if config.dbias else {}),
    }


def limits(config: Config) -> dict[str, dict]:
    """Limits on the problem's scalars: the BF16 kernel's, K in whole 16-byte FP8 rows."""
    found = bf16.limits(config.main)
    found["k"] = {"min": bf16.TMA_ALIGN_BYTES, "multiple_of": bf16.TMA_ALIGN_BYTES,
                  "why": f"rows of FP8 A span a multiple of {bf16.TMA_ALIGN_BYTES} bytes"}
    return found


def views(config: Config) -> dict[str, dict]:
    """The fused kernel's TMA views: with discrete weights the template of one expert's FP8 B
    that b_descriptors copies."""
    return bf16.views(config.fused_main_declared)


def workspaces(config: Config) -> dict[str, dict]:
    """The effective offsets and the BF16 kernel's own (dbias's sums, the tile counter, B's
    descriptors)."""
    # padded_offsets, or [M] with use_single_group_runtime_offsets: written by effective_offsets
    offsets = {"offsets_ws": {"dtype": "i32", "count": "l", "align": 16, "zero": "never"}}
    return {**offsets, **bf16.workspaces(config.fused_main)}


# the BF16 family's names of the fused kernel's tensors -> this family's
MAIN_TENSOR_NAMES = {"padded_offsets": "offsets_ws"}  # the effective offsets


def _main(config: Config) -> KernelDeclaration:
    """The fused kernel (fused.py): the BF16 kernel's parameters over FP8 A and B (or B's
    expert template), C and the effective offsets, without D's descriptor, then the scale
    factors, the outputs and the discrete_col_sfd flag."""
    names = MAIN_TENSOR_NAMES
    declared = bf16.main_kernel(config.fused_main_declared)
    params = [
        p._replace(tensor=names.get(p.tensor, p.tensor)) if isinstance(p, (TmaTensor, Pointer)) else p
        for p in declared.params
        if not (isinstance(p, TmaTensor) and p.tensor == "d_row")
    ]
    scalars = [p for p in params if isinstance(p, Int32)]
    sfb = "sfb_ptrs" if config.discrete_weights else "sfb"
    outputs = [Pointer(name) for name in ("d_row", "d_col", "sfd_row", "sfd_col", "norm_const")]
    params = [p for p in params if not isinstance(p, Int32)] + [Pointer("sfa"), Pointer(sfb), *outputs, *scalars]
    return KernelDeclaration(declared.role, (*params, Int32("discrete_col_sfd")), declared.block, declared.grid,
                             declared.cluster_m)


EFFECTIVE_OFFSETS = KernelDeclaration(
    role="effective_offsets",
    params=(Pointer("padded_offsets"), Pointer("offsets_ws"), Int32("m"), Int32("l"),
            Int32("use_single_group_runtime_offsets")),
    block=CONVERT_THREADS,
    grid={"rule": "elementwise", "count": "1"},  # one block
)


def kernels(config: Config) -> list[KernelDeclaration]:
    """The variant's kernels in launch order: the offsets' clamp, B's descriptors (discrete
    weights), the fused kernel, dbias's finisher (dbias)."""
    return [
        EFFECTIVE_OFFSETS,
        *([bf16.B_DESCRIPTORS] if config.discrete_weights else []),
        _main(config),
        *([bf16.DBIAS_FINISH] if config.dbias else []),
    ]


def _fp8_operand_rules(config: Config) -> dict[str, dict]:
    """The TMA rules of FP8 A and B: unswizzled boxes of one tile's k-tile
    (TILE_K bytes of K, or tile_n bytes of N-major B), as fused.py's FP8 stages hold them."""
    common = {"swizzle": "none", "l2_promotion": "128B", "oob_fill": "none", "interleave": "none",
              "dtype": config.ab_dtype}
    tile_k = bf16.TILE_K
    if config.discrete_weights:
        b = {"b_expert": {**common, "dims": [0, 1] if config.b_n_major else [1, 0],
                          "box": [config.tile_n, tile_k] if config.b_n_major else [tile_k, config.tile_n]}}
    elif config.b_n_major:
        b = {"b": {**common, "dims": [0, 1, 2], "box": [config.tile_n, tile_k, 1]}}
    else:
        b = {"b": {**common, "dims": [1, 0, 2], "box": [tile_k, config.tile_n, 1]}}
    return {"a": {**common, "dims": [1, 0], "box": [tile_k, config.tile_m]}, **b}


def tma_rules(config: Config) -> dict[str, dict]:
    """FP8 A's and B's TMA rules, then C's: the BF16 kernel's, or FP8 C's unswizzled boxes of
    one epilogue warp's rows (config.Fp8CBoxes); D leaves through the epilogue's quantizer,
    not TMA."""
    c = bf16.tma_rules(config.main)["c"]
    if config.fp8_c:
        rows, cols = config.fp8_c_boxes.box
        c = {**c, "swizzle": "none", "box": [cols, rows]}
    return {**_fp8_operand_rules(config), "c": c}


def tma_extents(config: Config, tensor: str) -> list[str]:
    """A TMA tensor's int32 extents: its shape over the descriptor's rank."""
    shapes = {name: rule["shape"] for name, rule in {**arguments(config), **views(config)}.items()}
    return shapes[tensor][: len(tma_rules(config)[tensor]["dims"])]


_NEEDS_SCALES = "FP8 operands (MXFP8: the E8M0 scale factors of A and B, and norm_const)"
_NEEDS_OUTPUTS = "FP8 operands (MXFP8: FP8 D_row and D_col with SFD_row and SFD_col)"
_BOOL = "expected a bool"
# What the front door accepts for this family (dglu.contract.front): the seed's block-scaled
# contract with FP8 operands and E8M0 scales, one per 32 of K; FP4 refused (Hopper).
FRONT = {
    "operands": list(FP8_TYPES),
    "refused_operands": HOPPER_REFUSED_OPERANDS,
    "arguments": {
        **NO_E5M3_SCALES,
        "amax_tensor": accepted(None, why=AMAX_REFUSED),
        "sf_vec_size": accepted(
            SF_VEC,
            why=f"FP8 operands take one E8M0 scale per {SF_VEC} elements of K (MXFP8), so it must be "
            f"{SF_VEC} (16-element scales pair with FP4 operands, which Hopper cannot run)",
        ),
        "discrete_col_sfd": accepted(False, True, why=_BOOL),
        "use_single_group_runtime_offsets": accepted(False, True, why=_BOOL),
        "vector_f32": accepted(False, True, why=_BOOL),
        "round_dgrad_to_input_dtype": accepted(
            False,
            why="must be False with FP8 operands (the BF16 kernels' option; cuDNN FE's block-scaled "
            "kernels have none either)",
        ),
        "epilogue_op": accepted(*EPILOGUE_OPS, why=f"expected one of {list(EPILOGUE_OPS)}"),
        "sfa_tensor": required(_NEEDS_SCALES),
        "sfb_tensor": required(_NEEDS_SCALES, with_="b_tensor"),
        "sfb_ptrs": required(_NEEDS_SCALES, with_="b_ptrs"),
        "norm_const_tensor": required(_NEEDS_SCALES),
        "d_col_tensor": required(_NEEDS_OUTPUTS),
        "sfd_row_tensor": required(_NEEDS_OUTPUTS),
        "sfd_col_tensor": required(_NEEDS_OUTPUTS),
    },
    "dtypes": {
        "c_tensor": dtypes((*FLOAT_TYPES, *FP8_TYPES), f"C in {spelled((*FLOAT_TYPES, *FP8_TYPES))}"),
        "b_dtype": dtypes(FP8_TYPES, f"block-scaled operands: {spelled(FP8_TYPES)}"),
        "scale_factors": dtypes(
            ("e8m0",),
            "torch.float8_e8m0fnu (E8M0) scale factors, one per 32 of K (E4M3 scale factors go with "
            "sf_vec_size 16, NVFP4's FP4 operands, which Hopper cannot run)",
        ),
        "d_dtype": dtypes(
            FP8_TYPES,
            f"FP8 D from FP8 operands (D_row, D_col with SFD_row, SFD_col): {spelled(FP8_TYPES)} "
            "(bf16/fp16 D comes with FP4 operands, which Hopper cannot run)",
        ),
    },
    "checks": ["scaled_operands", "b_major_from_strides", "single_group_offsets", "vector_f32_needs_wide_c"],
    "outputs": list(SEED_OUTPUTS),
}


def entry(config: Config) -> dict:
    """The manifest fields of a variant that need no compile (kernels come from the compile)."""
    return {
        "front": FRONT,
        "m_aligned": bf16.M_ALIGNED,
        "arguments": arguments(config),
        "scalars": dict(SCALARS),
        "flags": list(FLAGS),
        "limits": limits(config),
        "views": views(config),
        "workspaces": workspaces(config),
        "tma": tma_rules(config),
    }
