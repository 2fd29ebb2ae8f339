"""What the sm90 MXFP8 family declares for the manifest, once, in pure Python.

The arguments are the seed's block-scaled ones; the scale-factor tensors (SFA, SFB, SFD_row,
SFD_col) have the seed's logical shape (32, 4, ceil(rows/128), 4, ceil(Kc/128), L) and the
strides of its permuted allocation (docs/blockscaled_contract.md). The fused kernel is the
sm90 BF16 family's, declared by that family and renamed onto this family's workspaces: the
decoded A and B, C (widened to BF16 when it is FP8), the fp32 D and the effective offsets.
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
    "k_halves": "k/16",  # 16-element half blocks along K: the dequantizers' items per row
    "n2_blocks": "n2/32",  # along D's columns
    "m_blocks": "m/32",  # along D's rows (SFD_col; quantize_d's row tiles)
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
    "a_items": "m*k_halves",
    "b_items": "l*n*k_halves",
    "row_items": "m*n2_blocks",
    # quantize_d: one block of CONVERT_THREADS threads per 32-row x CONVERT_THREADS-column tile of D
    "n2_tiles": "n2/256",
    "d_tile_items": "256*m_blocks*n2_tiles",
}
# the expressions above spell them out
assert SF_VEC == 32 and SF_ATOM_BYTES == 512 and CONVERT_THREADS == 256


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


# workspace -> the (M, K) / (N, K, L) / (M, 2N) view the fused kernel's TMA reads or writes
_OPERAND_VIEWS = {
    "a_op": ("a_bf16", "bf16", ["m", "k", 1], ["k", 1, "m*k"]),
    "b_op": ("b_bf16", "bf16", ["n", "k", "l"], ["k", 1, "n*k"]),
    "c_op": ("c_bf16", "bf16", ["m", "n2", 1], ["n2", 1, "m*n2"]),
    "d_acc": ("d_f32", "fp32", ["m", "n2", 1], ["n2", 1, "m*n2"]),
}


def _view_names(config: Config) -> list[str]:
    decoded = ("a_op", "b_op")  # the mainloop decode reads A and B themselves
    return [v for v in _OPERAND_VIEWS if (v != "c_op" or config.c_widened)
            and not (config.mainloop_decode and v in decoded)
            and not (config.epilogue_quantize and v == "d_acc")]


def views(config: Config) -> dict[str, dict]:
    """The fused kernel's TMA views of the workspaces (and, decoding in the mainloop with
    discrete weights, the template of one expert's FP8 B that b_descriptors copies)."""
    found = {
        name: {"of": of, "dtype": dtype, "shape": shape, "strides": strides,
               "address_align_down": bf16.TMA_ALIGN_BYTES}
        for name, (of, dtype, shape, strides) in _OPERAND_VIEWS.items()
        if name in _view_names(config)
    }
    if config.mainloop_decode:
        found.update(bf16.views(config.fused_main_declared))
    return found


def workspaces(config: Config) -> dict[str, dict]:
    """Decoded operands (unless decoded in the mainloop), the fp32 D, the effective offsets,
    and the BF16 kernel's own."""
    decoded = {} if config.mainloop_decode else {
        "a_bf16": {"dtype": "bf16", "count": "m*k", "align": 128, "zero": "never"},
        "b_bf16": {"dtype": "bf16", "count": "l*n*k", "align": 128, "zero": "never"},
    }
    found = {
        **decoded,
        **({"c_bf16": {"dtype": "bf16", "count": "m*n2", "align": 128, "zero": "never"}}
           if config.c_widened else {}),
        **({} if config.epilogue_quantize else
           {"d_f32": {"dtype": "fp32", "count": "m*n2", "align": 128, "zero": "never"}}),
        # padded_offsets, or [M] with use_single_group_runtime_offsets: written by dequant_a
        # (effective_offsets with the mainloop decode)
        "offsets_ws": {"dtype": "i32", "count": "l", "align": 16, "zero": "never"},
    }
    main = config.fused_main if config.mainloop_decode else config.main
    return {**found, **bf16.workspaces(main)}


def main_tensor_names(config: Config) -> dict[str, str]:
    """The BF16 family's names of the fused kernel's tensors -> this family's: its views of
    the workspaces (C itself unless it is widened; A and B themselves with the mainloop
    decode) and the effective offsets."""
    names = {"a": "a_op", "b": "b_op", "c": "c_op" if config.c_widened else "c", "d_row": "d_acc",
             "padded_offsets": "offsets_ws"}
    if config.mainloop_decode:
        names.update(a="a", b="b")
    return names


def _renamed_main(config: Config) -> KernelDeclaration:
    """The BF16 family's fused kernel over this family's views and effective offsets."""
    names = main_tensor_names(config)
    declared = bf16.main_kernel(config.main)
    params = tuple(
        p._replace(tensor=names.get(p.tensor, p.tensor)) if isinstance(p, (TmaTensor, Pointer)) else p
        for p in declared.params
    )
    return KernelDeclaration(declared.role, params, declared.block, declared.grid, declared.cluster_m)


def _mainloop_decode_main(config: Config) -> KernelDeclaration:
    """The mainloop-decode kernel (fused.py): the BF16 kernel's parameters over FP8 A and B
    (or B's expert template), this family's C, fp32 D and effective offsets, then the scale
    factors."""
    names = main_tensor_names(config)
    declared = bf16.main_kernel(config.fused_main_declared)
    params = [
        p._replace(tensor=names.get(p.tensor, p.tensor)) if isinstance(p, (TmaTensor, Pointer)) else p
        for p in declared.params
    ]
    scalars = [p for p in params if isinstance(p, Int32)]
    sfb = "sfb_ptrs" if config.discrete_weights else "sfb"
    params = [p for p in params if not isinstance(p, Int32)] + [Pointer("sfa"), Pointer(sfb), *scalars]
    return KernelDeclaration(declared.role, tuple(params), declared.block, declared.grid, declared.cluster_m)


def _one_pass_main(config: Config) -> KernelDeclaration:
    """The one-pass kernel (fused.py's Sm90Mxfp8OnePass): the mainloop-decode kernel's
    parameters without D's descriptor, then its outputs, and the discrete_col_sfd flag."""
    declared = _mainloop_decode_main(config)
    params = [p for p in declared.params if not (isinstance(p, TmaTensor) and p.tensor == "d_acc")]
    scalars = [p for p in params if isinstance(p, Int32)]
    outputs = [Pointer(name) for name in ("d_row", "d_col", "sfd_row", "sfd_col", "norm_const")]
    params = [p for p in params if not isinstance(p, Int32)] + outputs + scalars + [Int32("discrete_col_sfd")]
    return KernelDeclaration(declared.role, tuple(params), declared.block, declared.grid, declared.cluster_m)


EFFECTIVE_OFFSETS = KernelDeclaration(
    role="effective_offsets",
    params=(Pointer("padded_offsets"), Pointer("offsets_ws"), Int32("m"), Int32("l"),
            Int32("use_single_group_runtime_offsets")),
    block=CONVERT_THREADS,
    grid={"rule": "elementwise", "count": "1"},  # one block
)


def _elementwise(role: str, params: tuple, count: str) -> KernelDeclaration:
    return KernelDeclaration(role=role, params=params, block=CONVERT_THREADS, grid={"rule": "elementwise", "count": count})


def kernels(config: Config) -> list[KernelDeclaration]:
    """The variant's kernels in launch order (config.py tells the design)."""
    b, sfb = ("b_ptrs", "sfb_ptrs") if config.discrete_weights else ("b", "sfb")
    dequant_a = _elementwise(
        "dequant_a",
        (Pointer("a"), Pointer("sfa"), Pointer("a_bf16"), Pointer("padded_offsets"), Pointer("offsets_ws"),
         Int32("m"), Int32("k"), Int32("l"), Int32("use_single_group_runtime_offsets")),
        "a_items",
    )
    dequant_b = _elementwise(
        "dequant_b", (Pointer(b), Pointer(sfb), Pointer("b_bf16"), Int32("n"), Int32("k"), Int32("l")), "b_items"
    )
    widen_c = _elementwise("widen_c", (Pointer("c"), Pointer("c_bf16"), Int32("row_items")), "row_items")
    quantize_d = _elementwise(
        "quantize_d",
        (Pointer("d_f32"), Pointer("d_row"), Pointer("d_col"), Pointer("sfd_row"), Pointer("sfd_col"),
         Pointer("norm_const"), Pointer("offsets_ws"), Int32("m"), Int32("n2"), Int32("l"),
         Int32("discrete_col_sfd")),
        "d_tile_items",
    )
    if config.mainloop_decode:
        operands = [EFFECTIVE_OFFSETS, *([bf16.B_DESCRIPTORS] if config.discrete_weights else [])]
        main = _one_pass_main(config) if config.epilogue_quantize else _mainloop_decode_main(config)
    else:
        operands = [dequant_a, dequant_b]
        main = _renamed_main(config)
    return [
        *operands,
        *([widen_c] if config.c_widened else []),
        main,
        *([bf16.DBIAS_FINISH] if config.dbias else []),
        *([] if config.epilogue_quantize else [quantize_d]),
    ]


def _fp8_operand_rules(config: Config) -> dict[str, dict]:
    """The mainloop decode's TMA rules of FP8 A and B: unswizzled boxes of one tile's k-tile
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
    """The BF16 kernel's TMA rules, renamed onto the views (C stays C unless widened); with
    the mainloop decode, FP8 A's and B's own."""
    rules = bf16.tma_rules(config.main)
    names = main_tensor_names(config)
    renamed = {names[tensor]: rule for tensor, rule in rules.items()}
    if config.mainloop_decode:
        renamed = {name: rule for name, rule in renamed.items() if name not in ("a", "b")}
        renamed = {**_fp8_operand_rules(config), **renamed}
    if config.epilogue_quantize:
        del renamed["d_acc"]
    return renamed


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
