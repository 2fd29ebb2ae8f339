"""dglu.cache: the bounded cache behind the per-call fast path, and the keys of tensors."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

from dglu.cache import BoundedCache, tensors_key  # noqa: E402


def test_the_oldest_entry_goes_first() -> None:
    cache: BoundedCache[int] = BoundedCache(2)
    made = []
    for key in ["a", "b", "a", "c", "a"]:
        cache.get_or_make(key, lambda key=key: made.append(key) or len(made))
    assert made == ["a", "b", "c", "a"]  # "a" was the oldest when "c" came in
    assert len(cache) == 2 and cache.get("b") is None and cache.get("c") == 3


def test_a_failed_make_stores_nothing() -> None:
    cache: BoundedCache[int] = BoundedCache(4)

    def fail() -> int:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        cache.get_or_make("k", fail)
    assert cache.get("k") is None and len(cache) == 0


def test_a_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity: expected a positive int, got 0"):
        BoundedCache(0)


def test_threads_share_one_cache() -> None:
    cache: BoundedCache[tuple] = BoundedCache(8)
    seen: list[tuple] = []
    start = threading.Barrier(8)

    def work(index: int) -> None:
        start.wait()
        for round_ in range(500):
            key = (round_ + index) % 12
            seen.append((key, cache.get_or_make(key, lambda key=key: ("value", key))))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 8 * 500 and all(value == ("value", key) for key, value in seen)
    assert len(cache) <= 8


def test_tensor_keys_follow_address_shape_strides_and_dtype() -> None:
    base = torch.zeros(4, 8)
    key = tensors_key((base, None))
    assert key == tensors_key((base.view(4, 8), None))  # another object, the same view
    assert key[1] is None
    for other in (base[1:], base.t(), base.view(8, 4), base.view(torch.int32)):
        assert tensors_key((other, None)) != key
    assert tensors_key((base, [1.0])) is None
