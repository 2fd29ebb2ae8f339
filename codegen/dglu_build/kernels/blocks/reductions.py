"""Row and column sums of an epilogue, added into global fp32 buffers."""

import cutlass
import cutlass.cute as cute

WARP_SIZE = 32
# the butterfly steps of a warp's reduce-scatter: 16, 8, 4, 2, 1
BUTTERFLY_WIDTHS = tuple(WARP_SIZE >> step for step in range(1, WARP_SIZE.bit_length()))


def atomic_add_f32(target, value) -> None:
    """global[target] += value (fp32, relaxed, GPU scope, no return value)."""
    cute.arch.red(target, value, op="add", dtype="f32", sem="relaxed", scope="gpu")


@cute.jit
def add_row_sums(
    row_sums: cute.Tensor, out: cute.Tensor, row0: cutlass.Int32, lane: cutlass.Int32,
    atomically: cutlass.Constexpr[bool] = True,
):
    """Add a warp's row sums (a power of two of them, at most 32), spread over its lanes,
    into out[row0 + i] by fp32 atomics; with ``atomically`` False, store them there (for
    an element no one else writes).

    Lanes that differ in the bits at or above the row count hold partial sums of the same
    rows: a butterfly all-reduce adds those first. Then a butterfly reduce-scatter: at each
    step a lane keeps the half of its rows selected by one bit of its lane index and adds
    in its partner's partial sums of that half, so lane j ends with the full sum of row
    j % rows; the first ``rows`` lanes write them.
    """
    rows = cute.size(row_sums)
    for width in BUTTERFLY_WIDTHS:
        if cutlass.const_expr(width >= rows):
            for i in cutlass.range_constexpr(rows):
                row_sums[i] = row_sums[i] + cute.arch.shuffle_sync_bfly(row_sums[i], width)
    reduce_scatter(row_sums, lane, tuple(width for width in BUTTERFLY_WIDTHS if width < rows))
    if lane < rows:
        if cutlass.const_expr(atomically):
            atomic_add_f32(out.iterator + row0 + lane, row_sums[0])
        else:
            out[row0 + lane] = row_sums[0]


@cute.jit
def reduce_scatter(values: cute.Tensor, lane: cutlass.Int32, widths: cutlass.Constexpr[tuple]):
    """Butterfly reduce-scatter of the lanes' ``values`` (a register tensor of 2 ** len(widths)
    * n) over the lane bits ``widths``: at each step a lane keeps the half of its values
    selected by that bit of its lane index (the upper half when set) and adds in its
    partner's partial sums of that half. values[0:n] end as the sums, over the lanes that
    differ only in those bits, of the n values at index sum((lane & w != 0) * size / 2 **
    (step + 1)) over the steps."""
    size = cute.size(values)
    for width in widths:
        half = size // 2
        upper = (lane & width) != 0
        for i in cutlass.range_constexpr(half):
            send = cutlass.select_(upper, values[i], values[i + half])
            keep = cutlass.select_(upper, values[i + half], values[i])
            values[i] = keep + cute.arch.shuffle_sync_bfly(send, width)
        size = half


def add_column_pair(row: cute.Tensor, column, first_sum, second_sum, distance: int) -> None:
    """Add a lane's sums of two columns (``column`` and ``column + distance``) into ``row``."""
    target = row.iterator + column
    atomic_add_f32(target, first_sum)
    atomic_add_f32(target + distance, second_sum)


def store_column_pair(row: cute.Tensor, column, first_sum, second_sum, distance: int) -> None:
    """Store a lane's sums of two columns (``column`` and ``column + distance``) into ``row``."""
    row[column] = first_sum
    row[column + distance] = second_sum
