"""dglu.tma: the global layout handed to cuTensorMapEncodeTiled, and the enum names used."""

from __future__ import annotations

import pytest
from dglu.contract.schema import TmaRule
from dglu.problem import TensorView
from dglu.tma import TMA_OPTIONS, global_layout


def rule(dims, box, dtype="bf16") -> TmaRule:
    return TmaRule(
        dtype=dtype,
        dims=tuple(dims),
        box=tuple(box),
        swizzle="128B",
        l2_promotion="128B",
        oob_fill="none",
        interleave="none",
    )


def view(shape, strides, dtype="bf16") -> TensorView:
    return TensorView(
        device=0, pointer=1 << 20, shape=tuple(shape), strides=tuple(strides), dtype=dtype
    )


def test_a_as_rank_two_k_innermost() -> None:
    m, k = 1380, 200
    dims, strides = global_layout(rule([1, 0], [64, 128]), view((m, k, 1), (k, 1, m * k)))
    assert dims == [k, m]
    assert strides == [k * 2]


def test_b_rank_three_with_expert_stride() -> None:
    n, k, l = 96, 200, 5
    dims, strides = global_layout(rule([1, 0, 2], [64, 128, 1]), view((n, k, l), (k, 1, n * k)))
    assert dims == [k, n, l]
    assert strides == [k * 2, n * k * 2]


def test_fp32_element_size() -> None:
    m, n2 = 256, 192
    dims, strides = global_layout(
        rule([1, 0, 2], [32, 128, 1], "fp32"), view((m, n2, 1), (n2, 1, m * n2), "fp32")
    )
    assert (dims, strides) == ([n2, m, 1], [n2 * 4, m * n2 * 4])


def test_refuses_other_dtype() -> None:
    with pytest.raises(ValueError, match="wants bf16 elements, the tensor holds fp16"):
        global_layout(rule([1, 0], [64, 128]), view((256, 64, 1), (64, 1, 256 * 64), "fp16"))


def test_refuses_dropping_a_dimension_larger_than_one() -> None:
    with pytest.raises(
        ValueError, match="covers dimensions \\[1, 0\\] of a tensor of shape \\(96, 64, 5\\)"
    ):
        global_layout(rule([1, 0], [64, 128]), view((96, 64, 5), (64, 1, 96 * 64)))


def test_refuses_a_strided_innermost_dimension() -> None:
    with pytest.raises(ValueError, match="innermost dimension 1 must have stride 1"):
        global_layout(rule([1, 0], [64, 128]), view((256, 64, 1), (1, 256, 256 * 64)))


@pytest.mark.parametrize("option", sorted(TMA_OPTIONS))
def test_every_manifest_option_names_a_driver_enum_member(option) -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    enum_name, members = TMA_OPTIONS[option]
    enum = getattr(driver, enum_name)
    for value, member in members.items():
        assert member in enum.__members__, f"{option}={value}: {member} not in {enum_name}"


@pytest.mark.parametrize(
    ("dtype", "box_cols", "member", "size"),
    [
        ("bf16", 64, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2),
        ("fp16", 64, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2),
        ("fp32", 32, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4),
    ],
)
def test_c_and_d_descriptors_carry_their_dtype(monkeypatch, dtype, box_cols, member, size) -> None:
    """C and D as the kernels' rank-2 rules describe them, encoded in C's or D's own dtype."""
    driver = pytest.importorskip("cuda.bindings.driver")
    from dglu import driver as dglu_driver
    from dglu.tma import encode_tensor_map

    calls = []

    def encode(name, *args):
        calls.append((name, args))
        return driver.CUtensorMap()

    monkeypatch.setattr(dglu_driver, "checked", encode)
    monkeypatch.setattr(dglu_driver, "initialize", lambda: None)
    encode_tensor_map.cache_clear()
    m, n2 = 1380, 320
    encoded = encode_tensor_map(
        rule([1, 0], [box_cols, 128], dtype), view((m, n2, 1), (n2, 1, m * n2), dtype)
    )
    assert len(encoded) == 128
    ((name, args),) = calls
    data_type, rank, pointer, dims, strides, box = args[:6]
    assert name == "cuTensorMapEncodeTiled"
    assert data_type == getattr(driver.CUtensorMapDataType, member)
    assert (rank, pointer) == (2, 1 << 20)
    assert [int(d) for d in dims] == [n2, m] and [int(s) for s in strides] == [n2 * size]
    assert [int(b) for b in box] == [box_cols, 128]
