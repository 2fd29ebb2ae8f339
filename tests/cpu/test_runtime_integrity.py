"""dglu.integrity: a cubin is checked against its manifest entry before it is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest_runtime import DEFAULT_KEYS, write_artifacts
from dglu.errors import IntegrityError
from dglu.integrity import read_verified_cubin
from dglu.manifest import read_manifest


@pytest.fixture(params=[False, True], ids=["read in full", "read lazily"])
def variant(tmp_path: Path, request: pytest.FixtureRequest):
    """A variant as read_manifest gives it, in full or lazily (the runtime's way: its
    cubin is checked before anything but its identity fields is read)."""
    write_artifacts(tmp_path, DEFAULT_KEYS[:1])
    return read_manifest(tmp_path, lazy=request.param).variants[0]


def test_returns_the_bytes_of_an_intact_cubin(variant) -> None:
    assert read_verified_cubin(variant) == variant.cubin_path.read_bytes()


def test_refuses_a_tampered_cubin(variant) -> None:
    data = bytearray(variant.cubin_path.read_bytes())
    data[100] ^= 0x01
    variant.cubin_path.write_bytes(bytes(data))
    with pytest.raises(IntegrityError) as error:
        read_verified_cubin(variant)
    message = str(error.value)
    assert str(variant.cubin_path) in message
    assert variant.sha256 in message and "modified" in message


def test_refuses_a_truncated_cubin(variant) -> None:
    data = variant.cubin_path.read_bytes()
    variant.cubin_path.write_bytes(data[:-10])
    with pytest.raises(IntegrityError) as error:
        read_verified_cubin(variant)
    message = str(error.value)
    assert str(variant.cubin_path) in message
    assert f"{len(data) - 10} bytes" in message and f"records {len(data)}" in message
    assert "truncated" in message


def test_refuses_a_missing_cubin(variant) -> None:
    variant.cubin_path.unlink()
    with pytest.raises(IntegrityError, match=f"cannot read the cubin of variant {variant.name}"):
        read_verified_cubin(variant)
