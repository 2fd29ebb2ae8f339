"""What the sm100 block-scaled family declares for the manifest, once, in pure Python.

The kernels are cuDNN FE's: their parameters are what the DSL makes of
``BlockScaledMoEGroupedGemmDgluDbiasKernel.__call__``'s arguments with M, N and K
symbolic and the expert count compiled in. The compile tier checks every declared
parameter against the cubin's KPARAM_INFO (tests/cpu/test_sm100_blockscaled_family.py);
the launch-parity tier checks the values against the DSL's own host code
(tests/cpu/test_sm100_blockscaled_launch_parity.py). Read from that host code:

- the scale-factor TMA descriptors are over the seed's permuted buffers read as whole
  512-byte atoms (128 rows x 4 blocks), a box holding the atoms of one CTA's rows and of one
  K tile (1 for MXFP8, 4 for NVFP4: ``sf_k_tile_atoms``): MXFP8 SFA as (256 x u16, row atoms,
  K atoms), SFB as (64 x u64, row atoms, K atoms, L); NVFP4 SFA as (256 x u16, K atoms, row
  atoms), SFB as (64 x u64 x K atoms, row atoms, L) (the views and rules below);
- a TMA tensor's extents for SFA/SFB are its atom counts (ceil(rows/128), ceil(K/(4*vec)));
- SFD_row and SFD_col (MXFP8) are {pointer, row atoms, column atoms, pitch} structs.

FP4 operands (``e2m1x2``: torch.float4_e2m1fn_x2, two values a byte) are declared in their
storage shape: for an FP4 variant the problem's ``k`` counts bytes of a row of A (K/2 values'
pairs) and ``k_values`` = 2k is the GEMM's K, which the kernel's parameters carry.
"""

from __future__ import annotations

from dglu.contract.element_types import ELEMENT_TYPES, FLOAT_TYPES, FP8_TYPES

from ..declaration import Int32, KernelDeclaration, Pointer, PointerExtents, TmaTensor, Zeros
from ..front import NO_E5M3_SCALES, SEED_OUTPUTS, accepted, dtypes, required, spelled
from ..sm100_bf16 import interface as bf16
from ..sm100_bf16.config import THREADS_PER_CTA
from ..scale_factors import SF_ATOM_BYTES, scale_factor_argument
from .config import AB_BITS, FP4, MXFP8, NVFP4, Config, Recipe

ALIGN_BYTES = bf16.ALIGN_BYTES
TILE_K_BYTES = 128  # K of one TMA box of A or B: 128 bytes (128-byte swizzle)
SF_ATOM_ROWS = 128
SFA_ITEM = ("u16", 256)  # SFA's TMA element (the kernel's internal type) and items per atom
SFB_ITEM = ("u64", 64)
TMA_BOX_ITEMS = 256  # the most elements a TMA box spans in one dimension
MMA_STATES = ("mma_state", "mma_state_sfb")  # the two TiledMma parameters (A/B's and SFB's), 4-byte aligned
MMA_STATE_ALIGN = 4


def _scale_factors(row_atoms: str, col_atoms: str, l: str | int, pitch: str, size: str, io: str, dtype: str) -> dict:
    """A scale-factor ARGUMENT, 16-byte aligned: the kernel reads it by TMA."""
    return scale_factor_argument(row_atoms, col_atoms, l, pitch, size, io, dtype, ALIGN_BYTES)


def scalars(config: Config) -> dict[str, str]:
    """Derived scalars: the GEMM's K in values, the atom counts and pitches (bytes) of the
    scale-factor buffers, each buffer's bytes."""
    block = 4 * config.recipe.sf_vec_size  # K values per atom column
    k_values = "2*k" if config.fp4 else "k"
    found = {
        "n2": "2*n",
        "k_values": k_values,
        "m_atoms": "m/128",
        "n_atoms": "n/128",
        "n2_atoms": "n2/128",
        "k_atoms": f"k_values/{block}",
        "k_pitch": f"{SF_ATOM_BYTES}*k_atoms",  # bytes per 128 rows of SFA and SFB
        "sfa_bytes": "m_atoms*k_pitch",
        "sfb_bytes": "n_atoms*k_pitch",  # per expert
        "sfa_pitch": f"{SFA_ITEM[1]}*k_atoms",  # the same in SFA's TMA items, and SFB's
        "sfb_pitch": f"{SFB_ITEM[1]}*k_atoms",
        "sfb_items": "n_atoms*sfb_pitch",
    }
    if config.generate_sfd:  # MXFP8: 4 blocks of 32 = 128 values per atom column
        found.update({
            "n2_pitch": f"{SF_ATOM_BYTES}*n2_atoms",  # of SFD_row
            "m_pitch": f"{SF_ATOM_BYTES}*m_atoms",  # of SFD_col
            "sfd_row_bytes": "m_atoms*n2_pitch",
            "sfd_col_bytes": "n2_atoms*m_pitch",
        })
    return found


def arguments(config: Config) -> dict[str, dict]:
    """The op's tensor arguments this variant takes, in the order they are checked: the
    sm100 BF16 family's, with the scale factors after A and B, and D_col, SFD_row,
    SFD_col, norm_const (MXFP8) or amax (a 16-bit D) after D_row."""
    ab, sf = config.ab_dtype, config.recipe.sf_dtype
    if config.discrete_weights:
        b = {name: bf16.argument(["l"], [1], "i64", "in", align=8) for name in ("b_ptrs", "sfb_ptrs")}
    else:
        b = {"b": bf16.argument(["n", "k", "l"], bf16.b_strides(config), ab, "in"),
             "sfb": _scale_factors("n_atoms", "k_atoms", "l", "k_pitch", "sfb_bytes", "in", sf)}
    outputs = {}
    if config.generate_sfd:
        outputs = {
            "d_col": bf16.matrix("m", "n2", config.d_dtype, "out"),
            "sfd_row": _scale_factors("m_atoms", "n2_atoms", 1, "n2_pitch", "sfd_row_bytes", "out", sf),
            "sfd_col": _scale_factors("n2_atoms", "m_atoms", 1, "m_pitch", "sfd_col_bytes", "out", sf),
            "norm_const": bf16.argument([1], [1], "fp32", "in", align=4),
        }
    if config.amax:  # per-expert amax of D (the kernel's atomic max: cuDNN FE's wrapper starts it at -inf)
        outputs["amax"] = bf16.argument(["l", 2, 1], [2, 1, 1], "fp32", "accumulate", align=4, start="-inf")
    sfa = {"sfa": _scale_factors("m_atoms", "k_atoms", 1, "k_pitch", "sfa_bytes", "in", sf)}
    return bf16.common_arguments(config, ab, b, outputs, after_a=sfa)


def limits(config: Config) -> dict[str, dict]:
    """cuDNN FE's shape checks (K in whole 16-byte rows of A and B), the expert count compiled in."""
    found = bf16.limits(config)
    found["k"] = {"min": ALIGN_BYTES, "multiple_of": ALIGN_BYTES,
                  "why": f"rows of A and B span a multiple of {ALIGN_BYTES} bytes"
                         + (" (K counts bytes of FP4 pairs)" if config.fp4 else "")}
    return found


def views(config: Config) -> dict[str, dict]:
    """The TMA views: the scale factors as whole atoms of the kernel's internal types, and
    with discrete weights the templates of one expert's B and SFB (the helper writes each
    expert's own descriptors into the workspace)."""
    sfa_type, sfa_items = SFA_ITEM
    sfb_type, sfb_items = SFB_ITEM
    sfb_of, experts = ("sfb_ptrs", 1) if config.discrete_weights else ("sfb", "l")
    sfb_shape, sfb_strides = [sfb_items, "n_atoms", "k_atoms", experts], [1, "sfb_pitch", sfb_items, "sfb_items"]
    if _sfb_rows_merged(config):  # an atom and its K neighbours as one dimension: all K atoms of 128 rows
        sfb_shape, sfb_strides = ["sfb_pitch", "n_atoms", experts], [1, "sfb_pitch", "sfb_items"]
    found = {
        "sfa_atoms": {"of": "sfa", "dtype": sfa_type, "shape": [sfa_items, "m_atoms", "k_atoms"],
                      "strides": [1, "sfa_pitch", sfa_items], "address_align_down": ALIGN_BYTES},
        "sfb_atoms": {"of": sfb_of, "dtype": sfb_type, "shape": sfb_shape, "strides": sfb_strides,
                      "address_align_down": ALIGN_BYTES},
    }
    return {**found, **bf16.b_expert_view(config, config.ab_dtype)}


def main_kernel(config: Config) -> KernelDeclaration:
    """cuDNN FE's main kernel: 23 parameters (NVFP4) to 30 (MXFP8 with dbias)."""
    l_or_1 = 1 if config.discrete_weights else "l"
    sfd = ()
    if config.generate_sfd:
        sfd = (
            TmaTensor("d_col", ("m", "n2")),
            PointerExtents("sfd_row", ("m_atoms", "n2_atoms", "n2_pitch"), 24),
            # discrete_col_sfd: the kernel lays SFD_col over D as SFD_row (each expert's rows its own block)
            PointerExtents("sfd_col", ("m_atoms", "n2_atoms", "n2_pitch" if config.discrete_col_sfd else "m_pitch"), 24),
            Pointer("norm_const"),
        )
    return KernelDeclaration(
        role="main",
        params=(
            *(Zeros(name, config.mma_state_bytes, MMA_STATE_ALIGN) for name in MMA_STATES),
            TmaTensor("a", ("m", "k_values")),
            TmaTensor(bf16.b_tensor(config), ("n", "k_values", l_or_1)),
            TmaTensor("sfa_atoms", ("m_atoms", "k_atoms")),
            TmaTensor("sfb_atoms", ("n_atoms", "k_atoms", l_or_1)),
            TmaTensor("c", ("m", "n2")),
            TmaTensor("d_row", ("m", "n2")),
            *sfd,
            *([Pointer("amax")] if config.amax else []),
            Pointer("padded_offsets"),
            Pointer("alpha"),
            Pointer("beta"),
            PointerExtents("prob", ("m",)),
            PointerExtents("dprob", ("m",)),
            *([PointerExtents("dbias", ("l", "n2"))] if config.dbias else []),
            Pointer("workspace"),
            Int32("l"),
            Int32("n"),
            Int32("k_values"),
        ),
        block=THREADS_PER_CTA,
        grid={"rule": "active_clusters"},
        cluster_m=config.cluster_m,
        cluster_n=config.cluster_n,
    )


def kernels(config: Config) -> list[KernelDeclaration]:
    """The variant's kernels in launch order: sm100_bf16's helper (here writing B's and
    SFB's descriptors per expert, K in values, two MMA states), then the main kernel."""
    helper = bf16.helper_kernel(config, ("b_ptrs", "sfb_ptrs"), "k_values", MMA_STATES, MMA_STATE_ALIGN)
    return [*([helper] if config.has_helper else []), main_kernel(config)]


def tma_rules(config: Config) -> dict[str, dict]:
    """TMA descriptors, innermost first: A (K, M) and B (K, N, L) in 128-byte K boxes with
    128-byte swizzle (each CTA of a pair loads half of B's N); the scale factors unswizzled,
    a box the atoms of a CTA's rows of A or B; C, D_row and D_col (2N, M) in epilogue tiles
    of 32 columns by 128 rows, swizzled by the bytes of one row."""
    ab = {**bf16.TMA_COMMON, "dtype": config.ab_dtype, "swizzle": "128B"}
    tile_k = TILE_K_BYTES * 8 // ELEMENT_TYPES[config.ab_dtype].bits

    def epilogue(dtype: str) -> dict:
        return bf16.epilogue_tma(dtype, ELEMENT_TYPES[dtype].bits)

    if config.b_n_major:  # N innermost (discrete FP8 B): a 128-byte swizzle row holds tile_k of N
        b_rule = {**ab, "dims": [0, 1, 2], "box": [tile_k, tile_k, 1]}
    else:
        b_rule = {**ab, "dims": [1, 0, 2], "box": [tile_k, config.b_box_n, 1]}
    return {
        "a": {**ab, "dims": [1, 0], "box": [tile_k, config.cta_tile_m]},
        bf16.b_tensor(config): b_rule,
        "sfa_atoms": {**bf16.TMA_COMMON, **sfa_rule(config)},
        "sfb_atoms": {**bf16.TMA_COMMON, **sfb_rule(config)},
        "c": epilogue(config.c_dtype),
        "d_row": epilogue(config.d_dtype),
        **({"d_col": epilogue(config.d_dtype)} if config.generate_sfd else {}),
    }



def sf_k_tile_atoms(config: Config) -> int:
    """Scale-factor atoms along K that one K tile of A and B (128 bytes a row) needs: 1 for
    MXFP8 (128 values: 4 blocks of 32), 4 for NVFP4 (256 values: 16 blocks of 16)."""
    k_tile_values = TILE_K_BYTES * 8 // AB_BITS[config.ab_dtype]
    return k_tile_values // (4 * config.recipe.sf_vec_size)


def _sfb_rows_merged(config: Config) -> bool:
    """True when a box of SFB's atoms and their K neighbours fits one TMA dimension (NVFP4:
    64 x 4 u64): the DSL then merges them, as its host code's descriptors show."""
    k_tile = sf_k_tile_atoms(config)
    return k_tile > 1 and SFB_ITEM[1] * k_tile <= TMA_BOX_ITEMS


def sfa_rule(config: Config) -> dict:
    """SFA's descriptor over the ``sfa_atoms`` view (u16 items, row atoms, K atoms): its box
    the atoms of a CTA's rows and of one K tile, the K atoms next to the item when a K tile
    holds several (NVFP4; 256 x u16 already fill a box's dimension, so they stay apart)."""
    rows, k_tile = config.cta_tile_m // SF_ATOM_ROWS, sf_k_tile_atoms(config)
    if k_tile == 1:
        return {"dtype": SFA_ITEM[0], "swizzle": "none", "dims": [0, 1, 2], "box": [SFA_ITEM[1], rows, 1]}
    return {"dtype": SFA_ITEM[0], "swizzle": "none", "dims": [0, 2, 1], "box": [SFA_ITEM[1], k_tile, rows]}


def sfb_rule(config: Config) -> dict:
    """SFB's descriptor over the ``sfb_atoms`` view: the atoms of the rows of B a CTA loads
    and of one K tile; (u64 items, row atoms, K atoms, L) or, merged, (u64 items of all K
    atoms, row atoms, L)."""
    rows, k_tile = config.b_box_n // SF_ATOM_ROWS, sf_k_tile_atoms(config)
    if _sfb_rows_merged(config):
        return {"dtype": SFB_ITEM[0], "swizzle": "none", "dims": [0, 1, 2], "box": [SFB_ITEM[1] * k_tile, rows, 1]}
    return {"dtype": SFB_ITEM[0], "swizzle": "none", "dims": [0, 1, 2, 3], "box": [SFB_ITEM[1], rows, k_tile, 1]}


_NOT_BUILT = "must be False: cuDNN FE's block-scaled kernels are built here without it (no key field yet)"
_BOOL = "expected a bool (the kernel compiles it in: it selects the variant of that key field)"
# the options cuDNN FE's kernel compiles in: each selects the variants of its key field
COMPILED_OPTIONS = ("discrete_col_sfd", "use_single_group_runtime_offsets")
_EPILOGUE_OPS = (None, "identity", "relu", "srelu")  # validated, applied by no dGLU kernel (NVIDIA's neither)
_FP4_STORAGE = {"uint8": "FP4 operands are torch.float4_e2m1fn_x2 (view the uint8 storage as it)"}


def front(recipe: Recipe) -> dict:
    """What the front door accepts for this family's variants of ``recipe``
    (dglu.contract.front): cuDNN FE's block-scaled wrapper, as built here."""
    operands = [FP4] if recipe is NVFP4 else list(FP8_TYPES)
    scales = f"the {recipe.name.upper()} scale factors of A and B"
    arguments = {
        **NO_E5M3_SCALES,
        "sf_vec_size": accepted(
            recipe.sf_vec_size,
            why=f"{spelled(operands)} operands take one {recipe.sf_dtype.upper()} scale per "
            f"{recipe.sf_vec_size} elements of K ({recipe.name.upper()}), so it must be {recipe.sf_vec_size}",
        ),
        "discrete_col_sfd": accepted(False, True, why=_BOOL) if recipe is MXFP8 else accepted(
            False, why="must be False: NVFP4's bf16/fp16/fp32 D has no SFD_col"),
        "use_single_group_runtime_offsets": accepted(False, True, why=_BOOL),
        "vector_f32": accepted(False, why=_NOT_BUILT, error="NotImplementedError"),
        "round_dgrad_to_input_dtype": accepted(
            False, why="must be False with block-scaled operands (the BF16 kernels' option)"
        ),
        "epilogue_op": accepted(*_EPILOGUE_OPS, why=f"expected one of {list(_EPILOGUE_OPS)}"),
        "sfa_tensor": required(f"{spelled(operands)} operands ({scales})"),
        "sfb_tensor": required(f"{spelled(operands)} operands ({scales})", with_="b_tensor"),
        "sfb_ptrs": required(f"{spelled(operands)} operands ({scales})", with_="b_ptrs"),
    }
    if recipe is MXFP8:
        needs_outputs = "FP8 operands (MXFP8: FP8 D_row and D_col with SFD_row and SFD_col)"
        arguments.update({
            "norm_const_tensor": required("FP8 operands (MXFP8: the scale of D's quantization)"),
            "d_col_tensor": required(needs_outputs),
            "sfd_row_tensor": required(needs_outputs),
            "sfd_col_tensor": required(needs_outputs),
        })
    else:
        arguments["norm_const_tensor"] = accepted(
            None, why="NVFP4's bf16/fp16/fp32 D is not quantized, so it has no norm_const: pass None"
        )
    d_why = (
        "e4m3 D from FP8 operands (D_row, D_col with SFD_row, SFD_col: torch.float8_e4m3fn; e5m2 D does not "
        "build in CuTe DSL 4.8.1)" if recipe is MXFP8
        else f"{spelled(recipe.d_dtypes)} D from FP4 operands (cuDNN FE 1.32.0 refuses FP8 D with them)"
    )
    return {
        "operands": operands,
        "refused_operands": dict(_FP4_STORAGE),
        "arguments": arguments,
        "dtypes": {
            "c_tensor": dtypes((*FLOAT_TYPES, *FP8_TYPES), f"C in {spelled((*FLOAT_TYPES, *FP8_TYPES))}"),
            "b_dtype": dtypes(operands, f"block-scaled operands: {spelled(operands)}"),
            "scale_factors": dtypes(
                (recipe.sf_dtype,),
                f"{spelled((recipe.sf_dtype,))} scale factors, one per {recipe.sf_vec_size} of K "
                f"({recipe.name.upper()})",
            ),
            "d_dtype": dtypes(recipe.d_dtypes, d_why, default=None if recipe is MXFP8 else "bf16"),
        },
        "checks": ["scaled_operands", "b_major_from_strides", "single_group_offsets"],
        "outputs": list(SEED_OUTPUTS),
        "compiled_options": list(COMPILED_OPTIONS),
    }


FRONTS = {recipe.name: front(recipe) for recipe in (MXFP8, NVFP4)}


def entry(config: Config) -> dict:
    """The manifest fields of a variant that need no compile (kernels come from the compile)."""
    return bf16.entry_fields(config, FRONTS[config.recipe.name], scalars(config), arguments(config), limits(config),
                             views(config), tma_rules(config))
