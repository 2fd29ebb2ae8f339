"""TMA and tensor-map helpers: swizzled box layouts, per-expert descriptors."""

import cutlass
import cutlass.cute as cute
import cutlass.tensor_utils as tensor_utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync

from ..declaration import TENSORMAP_BYTES

# L2 cache policy of a TMA copy whose data is used once (C read, D written): evict it
# first, so that streaming C and D does not push out the A and B tiles that later tiles
# read again (the createpolicy encoding of L2::evict_first; CUTLASS's CacheHintSm90)
L2_EVICT_FIRST = 0x12F0000000000000
# descriptors live in a global workspace, one per expert, updated on the device
DESCRIPTORS = tensor_utils.TensorMapManager(tensor_utils.TensorMapUpdateMode.GMEM, TENSORMAP_BYTES)


def box_smem_layout(rows: int, box_cols: int, dtype: type, boxes: int):
    """``boxes`` TMA boxes of ``rows`` x ``box_cols`` in shared memory, as (rows, box
    columns, boxes), 128B-swizzled."""
    return sm90_utils.make_smem_layout_a(tensor_utils.LayoutEnum.ROW_MAJOR, (rows, 0, box_cols), dtype, boxes)


def tma_atom(op, tensor: cute.Tensor, staged_layout, tile, num_multicast: int = 1):
    """A TMA atom and its tensor for ``tile``s of ``tensor`` into one stage of ``staged_layout``."""
    return cpasync.make_tiled_tma_atom(
        op, tensor, cute.slice_(staged_layout, (None, None, 0)), tile, num_multicast=num_multicast
    )


def matrix_layout(rows, cols, rows_contiguous: bool):
    """A (rows, cols) matrix, its columns (K-major) or its rows (N-major) contiguous."""
    stride = (1, rows) if rows_contiguous else (cols, 1)
    return cute.make_layout((rows, cols), stride=stride)


def expert_descriptor(desc_ws_ptr: cute.Pointer, expert, address_space=cute.AddressSpace.gmem):
    """Expert ``expert``'s descriptor in a descriptor workspace, as a descriptor pointer
    (TMA copies take the generic address space)."""
    slot = cute.make_ptr(
        cutlass.Int64,
        desc_ws_ptr.toint() + cutlass.Int64(expert) * TENSORMAP_BYTES,
        cute.AddressSpace.gmem,
        assumed_align=TENSORMAP_BYTES,
    )
    return DESCRIPTORS.get_tensormap_ptr(slot, address_space)
