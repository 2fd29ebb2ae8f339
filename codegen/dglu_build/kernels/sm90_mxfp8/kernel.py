"""The sm90 MXFP8 family's kernels of one variant, composed.

Per call, in launch order (interface.kernels):
- ``effective_offsets``: the expert offsets every later kernel reads (padded_offsets, or
  [M] for a single group whose rows come from A's shape);
- ``b_descriptors`` (discrete weights): each expert's TMA descriptor of its FP8 B;
- ``main``: the fused kernel (fused.py): FP8 A and B decoded in shared memory for the
  BF16 WGMMAs, the dGLU epilogue (dprob into the caller's, dbias into an fp32 workspace)
  and the quantizer writing D_row and D_col in FP8 with SFD_row and SFD_col;
- ``dbias_finish`` (dbias): the BF16 family's.

Constraints: the BF16 kernel's (tile 128x128, experts' rows start at multiples of 256, at
most 1024 experts, N a multiple of 32), K a multiple of 16; workspaces O(L).
"""

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from ..blocks.mxfp8 import EffectiveOffsets
from ..declaration import launch_arguments
from . import interface
from .config import CONVERT_THREADS, Config
from .fused import Sm90Mxfp8Fused, Sm90Mxfp8FusedFp8C


class Sm90Mxfp8Kernels:
    """Builds the kernels of one variant; see the module docstring."""

    def __init__(self, config: Config):
        self.config = config
        fused = (config.fused_main, config.ab_dtype, config.geometry, config.d_dtype)
        self.main = Sm90Mxfp8FusedFp8C(*fused, config.fp8_c_boxes) if config.fp8_c else Sm90Mxfp8Fused(*fused)
        self.smem_bytes = 0  # the fused kernel's, set when the host entry is traced

    def kernel_functions(self) -> dict:
        """The DSL kernel of each declared role, bound to its builder."""
        return {
            "effective_offsets": EffectiveOffsets(CONVERT_THREADS).kernel,
            "b_descriptors": self.main.prologue.kernel,
            "main": self.main.kernel,
            "dbias_finish": self.main.finish.kernel,
        }

    @cute.jit
    def host(
        self,
        a: cute.Pointer,
        sfa: cute.Pointer,
        b: cute.Pointer,
        sfb: cute.Pointer,
        b_ptrs: cute.Pointer,
        sfb_ptrs: cute.Pointer,
        c: cute.Pointer,
        d_row: cute.Pointer,
        d_col: cute.Pointer,
        sfd_row: cute.Pointer,
        sfd_col: cute.Pointer,
        norm_const: cute.Pointer,
        padded_offsets: cute.Pointer,
        alpha: cute.Pointer,
        beta: cute.Pointer,
        prob: cute.Pointer,
        dprob: cute.Pointer,
        dbias: cute.Pointer,
        offsets_ws: cute.Pointer,
        dbias_ws: cute.Pointer,
        tile_counter: cute.Pointer,
        b_desc_ws: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
        discrete_col_sfd: cutlass.Int32,
        use_single_group_runtime_offsets: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """Compile-time entry: builds the fused kernel's TMA atoms of A, B and C and launches
        the variant's kernels; the runtime computes grids and encodes descriptors itself from
        the manifest."""
        # no D_row atom: the fused kernel's epilogue quantizes D and writes it itself
        atoms = self.main.operand_atoms(a, b, c, None, m, n, k, l)
        two_n = n * 2
        values = {
            "a": a, "sfa": sfa, "b": b, "sfb": sfb, "b_ptrs": b_ptrs, "sfb_ptrs": sfb_ptrs, "c": c,
            "d_row": d_row, "d_col": d_col, "sfd_row": sfd_row, "sfd_col": sfd_col, "norm_const": norm_const,
            "padded_offsets": padded_offsets, "alpha": alpha, "beta": beta, "prob": prob, "dprob": dprob,
            "dbias": dbias,
            "offsets_ws": offsets_ws, "dbias_ws": dbias_ws, "tile_counter": tile_counter, "b_desc_ws": b_desc_ws,
            "m": m, "n": n, "k": k, "l": l, "n2": two_n, "l_n2": l * two_n,
            "discrete_col_sfd": discrete_col_sfd,
            "use_single_group_runtime_offsets": use_single_group_runtime_offsets,
            # last: the TMA atoms replace the pointers of the tensors the fused kernel loads by TMA
            **atoms,
        }
        # recorded for the manifest: the fused kernel's dynamic shared memory
        self.smem_bytes = self.main.shared_storage().size_in_bytes()
        functions = self.kernel_functions()
        for declared in interface.kernels(self.config):
            options = {"cluster": [1, 1, 1], "smem": self.smem_bytes} if declared.role == "main" else {}
            functions[declared.role](*launch_arguments(declared.params, values)).launch(
                grid=[1, 1, 1], block=[declared.block, 1, 1], **options, stream=stream
            )
