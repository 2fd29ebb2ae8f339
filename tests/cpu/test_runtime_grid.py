"""dglu.grid: launch grids by rule name."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest_runtime import variant_key, write_artifacts
from dglu.contract.expressions import parse_expr
from dglu.grid import is_empty, launch_grid
from dglu.manifest import read_manifest

H200_SMS = 132


def kernels_of(tmp_path: Path, **key):
    write_artifacts(tmp_path, [variant_key(**key)])
    return read_manifest(tmp_path).variants[0].kernels


def scalars(m: int, n: int, l: int = 4) -> dict[str, int]:
    return {"m": m, "n": n, "k": 64, "l": l, "n2": 2 * n, "l_n2": 2 * n * l}


@pytest.mark.parametrize(
    ("m", "n", "tile_n", "expected"),
    [
        (1000, 96, 128, (8, 1, 1)),  # ceil(1000/128) = 8 M-tiles, one N-tile
        (1000, 160, 128, (16, 1, 1)),  # two N-tiles (160 = 128 + 32)
        (1000, 160, 256, (8, 1, 1)),
        (32768, 2048, 128, (H200_SMS, 1, 1)),  # 4096 tiles, capped at one CTA per SM
        (0, 96, 128, (0, 1, 1)),
    ],
)
def test_persistent_tiles(tmp_path: Path, m, n, tile_n, expected) -> None:
    main = kernels_of(tmp_path, tile_n=tile_n)[0]
    assert launch_grid(main, scalars(m, n), H200_SMS) == expected
    assert is_empty(expected) == (m == 0)


@pytest.mark.parametrize(
    ("m", "expected"), [(1000, (8, 1, 1)), (32768, (132, 1, 1)), (129, (2, 1, 1))]
)
def test_persistent_tiles_with_clusters_of_two(tmp_path: Path, m, expected) -> None:
    main = kernels_of(tmp_path, cluster_m=2)[0]
    assert main.cluster == (2, 1, 1)
    assert launch_grid(main, scalars(m, 128), H200_SMS) == expected


def test_cluster_larger_than_the_device(tmp_path: Path) -> None:
    main = kernels_of(tmp_path, cluster_m=2)[0]
    with pytest.raises(ValueError, match="cluster of 2 CTAs does not fit on a device with 1 SMs"):
        launch_grid(main, scalars(256, 128), 1)


@pytest.mark.parametrize(("n", "l"), [(96, 5), (32, 1), (2048, 1024)])
def test_elementwise(tmp_path: Path, n, l) -> None:
    finish = kernels_of(tmp_path, dbias=True)[1]
    assert launch_grid(finish, scalars(512, n, l), H200_SMS) == (math.ceil(2 * n * l / 256), 1, 1)


def test_elementwise_counts_an_expression(tmp_path: Path) -> None:
    finish = kernels_of(tmp_path, dbias=True)[1]
    counted = finish.grid._replace(count=parse_expr("16*l"))
    assert launch_grid(finish._replace(grid=counted), scalars(512, 96, 40), H200_SMS) == (3, 1, 1)
