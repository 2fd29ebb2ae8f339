"""The expert that owns a row of a grouped problem, by a warp-parallel search of padded_offsets."""

import cutlass
import cutlass.cute as cute

WARP_SIZE = 32


@cute.jit
def expert_of_row(offsets: cute.Tensor, l: cutlass.Int32, row: cutlass.Int32):
    """Index g of the expert owning ``row``: the first g with offsets[g] > row (at most
    l - 1, so malformed offsets cannot index past the per-expert arrays).

    A whole warp searches: each round its lanes read 32 evenly spaced offsets at
    once and a ballot narrows [lo, hi) 32-fold, so the search costs one global load
    round trip per round (1 for up to 32 experts, 2 for up to 1024).
    """
    lane = cute.arch.lane_idx()
    lo = cutlass.Int32(0)
    hi = l
    while lo < hi:
        step = (hi - lo + WARP_SIZE - 1) // WARP_SIZE
        probe = lo + lane * step
        below = cutlass.Boolean(False)
        if probe < hi:
            below = offsets[probe] <= row
        # offsets are sorted: the probes at or below the row come first
        count = cute.arch.popc(cute.arch.vote_ballot_sync(below))
        if count == 0:
            hi = lo
        else:
            hi = cutlass.min(lo + count * step, hi)
            lo = lo + (count - 1) * step + 1
    return cutlass.min(lo, l - 1)
