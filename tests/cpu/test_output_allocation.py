"""The wrapper's outputs: contiguous tensors where the layout allows, the scale factors'
permuted layout otherwise (dglu.prepared.allocate_outputs)."""

from __future__ import annotations

import pytest
import torch

from dglu import prepared
from dglu.problem import TensorView

M, N2, L = 512, 192, 3


def rule(role: str, shape: tuple, strides: tuple, dtype) -> prepared.OutputRule:
    name = str(dtype).removeprefix("torch.")
    view = TensorView(None, 0, shape, strides, name)
    return prepared.OutputRule(role, shape, strides, dtype, False, view)


def test_d_row_is_plain_contiguous_even_with_the_seed_stride_of_its_unit_dimension() -> None:
    made = prepared.allocate_outputs((rule("d_row", (M, N2, 1), (N2, 1, M * N2), torch.bfloat16),), None)
    d_row = made["d_row"]
    assert d_row.shape == (M, N2, 1) and d_row.is_contiguous() and d_row.stride() == (N2, 1, 1)
    assert d_row.view(torch.uint8).shape == (M, N2, 2)  # what callers do with a plain tensor


def test_scale_factors_get_the_permuted_strides() -> None:
    rr, rk = 4, 2  # ceil(M / 128), ceil(Kc / 128)
    shape, strides = (32, 4, rr, 4, rk, 1), (16, 4, rk * 512, 1, 512, rr * rk * 512)
    made = prepared.allocate_outputs((rule("sfd_row", shape, strides, torch.float8_e8m0fnu),), None)
    sf = made["sfd_row"]
    assert sf.shape == shape and sf.stride() == strides and sf.dtype == torch.float8_e8m0fnu
    assert sf.untyped_storage().nbytes() == rr * rk * 512


@pytest.mark.parametrize("shape", [(M, N2, 1), (4, 1, 1), (1,), (2, 0, 3), (3, 0), (L, 1, N2)])
def test_a_contiguous_layout_is_allocated_with_torch_empty_s_strides(shape: tuple) -> None:
    """allocation_strides gives what torch.empty gives (empty and unit dimensions too)."""
    seed_strides = tuple(range(7, 7 + len(shape)))  # any stride of a unit dimension
    contiguous = torch.empty(shape).stride()
    strides = tuple(s if n != 1 else seed for s, n, seed in zip(contiguous, shape, seed_strides))
    assert prepared.allocation_strides(shape, strides) == contiguous
