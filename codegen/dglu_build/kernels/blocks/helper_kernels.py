"""Small kernels around a fused kernel: the per-expert descriptor prologue, the dbias finish
and the finishers of deterministic mode."""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

from .expert_search import WARP_SIZE
from .tma_helpers import expert_descriptor, matrix_layout


class DescriptorPrologue:
    """Discrete weights: a kernel that writes one TMA descriptor per expert into a
    workspace, from a host-encoded template for one expert's (N, K) matrix."""

    def __init__(self, ab_dtype: type, b_n_major: bool, threads: int):
        self.ab_dtype = ab_dtype
        self.b_n_major = b_n_major
        self.threads = threads

    def expert_b_layout(self, n, k):
        """Layout of one expert's (N, K) weight matrix."""
        return matrix_layout(n, k, self.b_n_major)

    @cute.kernel
    def kernel(
        self,
        tma_atom_b: cute.CopyAtom,
        b_ptrs_ptr: cute.Pointer,
        b_desc_ws_ptr: cute.Pointer,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """Each descriptor is the template with expert g's address from b_ptrs (a
        device array, so this stays correct under graph capture). A block covers
        ``threads`` experts; each warp writes 32 of them in turn, since the
        descriptor update is issued by one elected lane.
        """
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        first = bidx * self.threads + (tidx // 32) * 32
        b_ptrs = cute.make_tensor(b_ptrs_ptr, cute.make_layout(l))
        for j in cutlass.range(32):
            expert = first + j
            if expert < l:
                slot = expert_descriptor(b_desc_ws_ptr, expert)
                b_g = cute.make_tensor(
                    cute.make_ptr(self.ab_dtype, b_ptrs[expert], cute.AddressSpace.gmem, assumed_align=16),
                    self.expert_b_layout(n, k),
                )
                cpasync.copy_tensormap(tma_atom_b, slot)
                cute.arch.sync_warp()
                cpasync.update_tma_descriptor(tma_atom_b, b_g, slot)
                cute.arch.sync_warp()
        cpasync.fence_tma_desc_release()


class DbiasFinish:
    """A kernel that adds an fp32 dbias workspace into the caller's dbias, one thread per
    element, and zeroes the workspace elements it read: the workspace (``zero:
    by_consumer``) is zero again for the next call, with no memset of its own."""

    def __init__(self, threads: int):
        self.threads = threads

    @cute.kernel
    def kernel(self, ws_ptr: cute.Pointer, dbias_ptr: cute.Pointer, count: cutlass.Int32):
        """dbias[i] = dbias_dtype(float(dbias[i]) + workspace[i]), then workspace[i] = 0,
        for i < count (every element the fused kernel adds into)."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * self.threads + tidx
        if i < count:
            ws = cute.make_tensor(ws_ptr, cute.make_layout(count))
            dbias = cute.make_tensor(dbias_ptr, cute.make_layout(count))
            dbias[i] = (dbias[i].to(cutlass.Float32) + ws[i]).to(dbias.element_type)
            ws[i] = cutlass.Float32(0.0)


@cute.jit
def covered_rows(offsets: cute.Tensor, l: cutlass.Int32, m: cutlass.Int32, walk_rows: int):
    """Rows the fused kernel's tiles cover: below padded_offsets[-1] and A's m, in whole
    walk units (``walk_rows``: tile_m times the cluster's m-tiles), as the kernel counts them."""
    return cutlass.min(offsets[l - 1], m) // walk_rows * walk_rows


@cute.jit
def add_row_partials(
    parts_ptr: cute.Pointer, dprob_ptr: cute.Pointer, row: cutlass.Int32, m: cutlass.Int32, n_tiles: cutlass.Int32
):
    """dprob[row] += parts[0, row] + parts[1, row] + ... (left to right): the row's per-n-tile
    partial sums (fp32, [n_tiles, m])."""
    parts = cute.make_tensor(parts_ptr, cute.make_layout((n_tiles, m), stride=(m, 1)))
    dprob = cute.make_tensor(dprob_ptr, cute.make_layout(m))
    total = cutlass.Float32(0.0)
    for n_tile in cutlass.range(n_tiles):
        total = total + parts[(n_tile, row)]
    dprob[row] = dprob[row] + total


class DprobFinish:
    """Deterministic mode without dbias: a kernel that adds each row's per-n-tile partial
    sums (fp32, [n_tiles, m], written by the fused kernel with plain stores) into dprob, in
    n-tile order, one thread per row."""

    def __init__(self, threads: int, walk_rows: int):
        self.threads = threads
        self.walk_rows = walk_rows

    @cute.kernel
    def kernel(
        self,
        parts_ptr: cute.Pointer,
        dprob_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        m: cutlass.Int32,
        n_tiles: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """add_row_partials for each covered row."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * self.threads + tidx
        offsets = cute.make_tensor(offsets_ptr, cute.make_layout(l))
        if i < covered_rows(offsets, l, m, self.walk_rows):
            add_row_partials(parts_ptr, dprob_ptr, i, m, n_tiles)


class PartsFinish:
    """Deterministic mode with dbias: one kernel that adds the per-slab column sums (fp32,
    [m_slabs, 2n]: slab s holds rows [s * slab_rows, (s + 1) * slab_rows), written by the
    fused kernel with plain stores) of each expert's slabs into the caller's dbias, and
    each row's per-n-tile partial sums into dprob (add_row_partials; the rows taken
    grid-stride, ``threads`` at a time by each block, after its dbias elements).

    A block owns ``WARP_SIZE`` consecutive dbias elements, one a lane (its grid counts
    elements x warps threads), and splits each element's slabs among its warps: warp w adds
    slabs first + w, first + w + warps, ... in increasing order (a warp reads 32 consecutive
    floats of a slab), then warp 0 adds the warps' sums in warp order. Both orders depend on
    the problem alone, so repeated calls agree bit for bit."""

    def __init__(self, threads: int, slab_rows: int, walk_rows: int):
        if threads % WARP_SIZE:
            raise ValueError(f"threads: got {threads}, need a multiple of {WARP_SIZE}")
        self.threads = threads
        self.warps = threads // WARP_SIZE
        self.slab_rows = slab_rows
        self.walk_rows = walk_rows

    @cute.kernel
    def kernel(
        self,
        dbias_parts_ptr: cute.Pointer,
        dbias_ptr: cute.Pointer,
        dprob_parts_ptr: cute.Pointer,
        dprob_ptr: cute.Pointer,
        offsets_ptr: cute.Pointer,
        m: cutlass.Int32,
        n2: cutlass.Int32,
        n_tiles: cutlass.Int32,
        l: cutlass.Int32,
    ):
        """dbias[g, j] = dbias_dtype(float(dbias[g, j]) + the sum of parts[s, j] over the
        covered slabs s of expert g, in the order above). A slab belongs to the expert of its
        first row (the fused kernel's rule): s in [ceil(start / slab_rows), ceil(end / slab_rows)).
        Then add_row_partials for each covered row."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        blocks, _, _ = cute.arch.grid_dim()
        lane = tidx % WARP_SIZE
        warp = tidx // WARP_SIZE
        i = bidx * WARP_SIZE + lane
        offsets = cute.make_tensor(offsets_ptr, cute.make_layout(l))
        covered = covered_rows(offsets, l, m, self.walk_rows)
        warp_sums = cute.make_tensor(
            cute.arch.alloc_smem(cutlass.Float32, self.threads, 16),
            cute.make_layout((WARP_SIZE, self.warps), stride=(1, WARP_SIZE)),
        )
        total = cutlass.Float32(0.0)
        if i < l * n2:
            expert = i // n2
            column = i - expert * n2
            start = cutlass.Int32(0)
            if expert > 0:
                start = offsets[expert - 1]
            end = cutlass.min(offsets[expert], covered)
            slabs = (m + self.slab_rows - 1) // self.slab_rows
            parts = cute.make_tensor(dbias_parts_ptr, cute.make_layout((slabs, n2), stride=(n2, 1)))
            first = (start + self.slab_rows - 1) // self.slab_rows
            last = (end + self.slab_rows - 1) // self.slab_rows
            for slab in cutlass.range(first + warp, last, self.warps):
                total = total + parts[(slab, column)]
        warp_sums[(lane, warp)] = total
        cute.arch.barrier()  # every thread reaches it: the bounds only guard the loads
        if warp == 0 and i < l * n2:
            total = warp_sums[(lane, 0)]
            for w in cutlass.range_constexpr(1, self.warps):
                total = total + warp_sums[(lane, w)]
            dbias = cute.make_tensor(dbias_ptr, cute.make_layout(l * n2))
            dbias[i] = (dbias[i].to(cutlass.Float32) + total).to(dbias.element_type)
        for row in cutlass.range(bidx * self.threads + tidx, covered, blocks * self.threads):
            add_row_partials(dprob_parts_ptr, dprob_ptr, row, m, n_tiles)
