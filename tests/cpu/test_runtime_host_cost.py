"""What a repeated call costs the host, counted instead of timed: on a cache hit, the
wrapper and execute() validate nothing, encode no new TMA descriptor and make only the
driver calls that enqueue work (the memsets of zeroed workspaces and outputs, and the
launches).

Stand-ins: tests/cpu/stand_ins.py (driver, device, workspaces), a hand-written manifest,
CPU tensors; everything else is the real call path.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts  # noqa: E402
from dglu import api, bound, runner  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402

M, N, K, L = 1024, 96, 256, 4
# A repeated dbias call: the dbias workspace memset and the two launches (main, finisher);
# the wrapper also zeroes its new dbias.
EXECUTE_DRIVER_CALLS = Counter({"cuCtxGetCurrent": 1, "cuCtxPushCurrent": 1, "cuCtxPopCurrent": 1,
                                "cuMemsetD32Async": 1, "cuLaunchKernelEx": 2})
WRAPPER_DRIVER_CALLS = EXECUTE_DRIVER_CALLS + Counter({"cuMemsetD32Async": 1})


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Counter]:
    write_artifacts(tmp_path, [variant_key()])
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    counts = {"driver": fake.counts, "other": Counter()}
    for module, name in [(bound, "describe_tensors"), (runner, "encode_tensor_map")]:
        original = getattr(module, name)

        def counting(*args, _original=original, _name=name):
            counts["other"][_name] += 1
            return _original(*args)

        # the real encode_tensor_map caches descriptors (an LRU): count only its misses
        cached = functools.lru_cache(maxsize=None)(counting) if module is runner else counting
        monkeypatch.setattr(module, name, cached)
    return counts


def inputs() -> dict[str, torch.Tensor]:
    return stand_ins.dense_call_tensors(M, N, K, L)


def calls_of_a_repeat(counted: dict[str, Counter], call) -> tuple[Counter, Counter]:
    call()
    for counter in counted.values():
        counter.clear()
    call()
    return +counted["driver"], +counted["other"]


def test_a_repeated_execute_only_enqueues(counted) -> None:
    t = inputs()
    d_row = torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16)
    dbias = torch.zeros(L, 2 * N, 1, dtype=torch.bfloat16)
    op = api.GroupedGemmDglu(
        sample_a=t["a_tensor"], sample_c=t["c_tensor"], sample_d_row=d_row,
        sample_padded_offsets=t["padded_offsets"], sample_alpha=t["alpha_tensor"],
        sample_beta=t["beta_tensor"], sample_prob=t["prob_tensor"],
        sample_dprob=t["dprob_tensor"], sample_dbias=dbias, sample_b=t["b_tensor"],
    )
    op.compile()
    driver, other = calls_of_a_repeat(
        counted, lambda: op.execute(**t, d_row_tensor=d_row, dbias_tensor=dbias)
    )
    assert other == Counter() and driver == EXECUTE_DRIVER_CALLS, (driver, other)


def test_a_repeated_wrapper_call_only_allocates_and_enqueues(counted) -> None:
    t = inputs()
    driver, other = calls_of_a_repeat(
        counted, lambda: api.grouped_gemm_dglu(**t, generate_dbias=True)
    )
    assert other == Counter() and driver == WRAPPER_DRIVER_CALLS, (driver, other)


def test_a_first_call_validates_and_encodes(counted) -> None:
    api.grouped_gemm_dglu(**inputs(), generate_dbias=True)
    assert counted["other"] == Counter({"describe_tensors": 1, "encode_tensor_map": 2})
