"""A persistent CTA's tiles: the queue that hands them to every role, and their raster order.

The producer warp chooses each tile (``next_tile``: a grid stride on, or the next tile
claimed from a global counter) and pushes it into a small queue in shared memory; every
other role pops the same sequence. dglu's scheduler is its own rather than the DSL's
persistent schedulers because the number of m-tiles is known only on the device
(padded_offsets[-1]). Tiles walk bands of ``raster_band`` m-tiles: within a band the
m-tile varies fastest, so the CTAs running together share B's n-tiles and a band of A
rows in L2.
"""

from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline


@dataclass
class TileQueue:
    """A CTA's tiles, handed from the producer warp to every other role through
    shared memory: bidx first, then every grid-th tile (static) or the next
    tile claimed from a global counter (dynamic)."""

    pipe: pipeline.PipelineAsync
    ids: cute.Tensor  # shared memory, one tile index per queue stage
    counter: cute.Tensor  # global Int32 counter of tiles claimed past the first wave (dynamic)
    first: cutlass.Int32
    stride: cutlass.Int32


def create_tile_queue(barrier_storage, ids_storage, counter_ptr, depth: int, producers: int, readers: int,
                      cluster_m: int) -> TileQueue:
    """The queue of ``depth`` tiles in shared memory (``barrier_storage`` and ``ids_storage``,
    2 * depth mbarriers and depth Int32), pushed by ``producers`` threads and popped by
    ``readers``; tiles are counted in clusters of ``cluster_m`` CTAs."""
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    return TileQueue(
        pipe=pipeline.PipelineAsync.create(
            barrier_storage=barrier_storage.data_ptr(),
            num_stages=depth,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, producers),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, readers),
            defer_sync=True,
        ),
        ids=ids_storage.get_tensor(cute.make_layout(depth)),
        counter=cute.make_tensor(counter_ptr, cute.make_layout(1)),
        first=bidx // cluster_m,
        stride=gdim // cluster_m,
    )


@cute.jit
def next_tile(queue, tile: cutlass.Int32, dynamic: bool):
    """The producer's next tile: a grid stride on (static), or the next
    unclaimed tile of a global counter (dynamic, use_dynamic_sched)."""
    if cutlass.const_expr(dynamic):
        claimed = cutlass.Int32(0)
        if cute.arch.lane_idx() == 0:
            claimed = cute.arch.atomic_add(queue.counter.iterator, cutlass.Int32(1))
        return queue.stride + cute.arch.shuffle_sync(claimed, 0)
    else:
        return tile + queue.stride


@cute.jit
def push_tile(queue, state, tile: cutlass.Int32):
    """Producer warp: hand the consumers their next tile (>= num_tiles ends them)."""
    queue.pipe.producer_acquire(state)
    queue.ids[state.index] = tile
    queue.pipe.producer_commit(state)


@cute.jit
def pop_tile(queue, state):
    """Consumers: the next tile the producer handed over."""
    queue.pipe.consumer_wait(state)
    tile = queue.ids[state.index]
    queue.pipe.consumer_release(state)
    return tile


@cute.jit
def tile_coords(tile: cutlass.Int32, num_m_tiles: cutlass.Int32, num_n_tiles: cutlass.Int32, cluster_m: int,
                raster_band: int):
    """This CTA's (m-tile, n-tile) of a linear (cluster) tile index in the banded
    raster order; the CTAs of a cluster take adjacent m-tiles."""
    num_m_groups = num_m_tiles // cluster_m
    band = tile // (raster_band * num_n_tiles)
    first_m = band * raster_band
    band_rows = cutlass.min(raster_band, num_m_groups - first_m)
    rest = tile - first_m * num_n_tiles
    n_tile = rest // band_rows
    m_group = first_m + rest - n_tile * band_rows
    return m_group * cluster_m + cluster_rank(cluster_m), n_tile


def cluster_rank(cluster_m: int):
    """This CTA's rank in its cluster (0 without clusters)."""
    if cluster_m == 1:
        return 0
    return cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
