"""Small kernels around a fused kernel: the per-expert descriptor prologue and the dbias finish."""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

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
    """A kernel that adds an fp32 dbias workspace into the caller's dbias, one thread per element."""

    def __init__(self, threads: int):
        self.threads = threads

    @cute.kernel
    def kernel(self, ws_ptr: cute.Pointer, dbias_ptr: cute.Pointer, count: cutlass.Int32):
        """dbias[i] = dbias_dtype(float(dbias[i]) + workspace[i]) for i < count."""
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * self.threads + tidx
        if i < count:
            ws = cute.make_tensor(ws_ptr, cute.make_layout(count))
            dbias = cute.make_tensor(dbias_ptr, cute.make_layout(count))
            dbias[i] = (dbias[i].to(cutlass.Float32) + ws[i]).to(dbias.element_type)
