"""The MMA warpgroups' mainloop of one tile: WGMMA over its k-tiles from the operand ring."""

import cutlass
import cutlass.cute as cute
from cutlass.cute.nvgpu import warpgroup


@cute.jit
def start_tile(tiled_mma, acc):
    """Zero ``acc`` and set the WGMMAs to accumulate into it, fenced for the tile's first WGMMA."""
    acc.fill(0.0)
    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.fence()


@cute.jit
def mma_k_tiles(tiled_mma, acc, tCrA, tCrB, mainloop, read_state, release_state, k_tile_count):
    """acc += the tile's A B^T over ``k_tile_count`` k-tiles, read from the stages of the
    ``mainloop`` pipeline at ``read_state`` and released at ``release_state``; returns
    both states advanced past the tile (the caller rebinds them: a traced loop rebinds
    its carried values, not the caller's names).

    One k-tile of WGMMAs stays in flight: a stage is released only once the WGMMAs
    that read it have completed.
    """
    num_k_blocks = cute.size(tCrA, mode=[2])
    for k_tile in range(cutlass.min(1, k_tile_count)):
        mainloop.consumer_wait(read_state)
        for kb in cutlass.range_constexpr(num_k_blocks):
            coord = (None, None, kb, read_state.index)
            cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
        warpgroup.commit_group()
        read_state.advance()
    for k_tile in range(1, k_tile_count):
        mainloop.consumer_wait(read_state)
        for kb in cutlass.range_constexpr(num_k_blocks):
            coord = (None, None, kb, read_state.index)
            cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
        warpgroup.commit_group()
        warpgroup.wait_group(1)
        mainloop.consumer_release(release_state)
        release_state.advance()
        read_state.advance()
    warpgroup.wait_group(0)
    for k_tile in range(cutlass.min(1, k_tile_count)):
        mainloop.consumer_release(release_state)
        release_state.advance()
    return read_state, release_state

