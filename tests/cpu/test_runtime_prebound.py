"""Pre-bound calls (dglu.bound): a call with the signature of its call site's last call
(addresses, shapes, strides, dtypes, which tensor arguments are None, the stream argument;
for the wrapper also the very settings objects) is launched from that call with no other
check; anything else takes the full path, with its checks and refusals. A wrapper call
whose outputs land at new addresses patches only their parameters of the last plan.

Stand-ins: tests/cpu/stand_ins.py (driver, device), a hand-written manifest, CPU tensors.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

import stand_ins  # noqa: E402
from conftest_runtime import variant_key, write_artifacts  # noqa: E402
from dglu import api, bound, runner  # noqa: E402
from dglu.manifest import read_manifest  # noqa: E402

M, N, K, L = 1024, 96, 256, 4


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """The problems launched (run_variant) and the binds of each call: "full" (every check,
    BoundOp._prepare) or "moved" (the addresses of the last call's tensors, moved_views)."""
    write_artifacts(tmp_path, [variant_key()])
    stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    seen: dict[str, list] = {"launched": [], "bound": [], "derived": []}
    original_run, original_prepare, original_moved = runner.run_variant, bound.BoundOp._prepare, bound.moved_views

    def run_variant(loaded, problem, stream, clear=(), ready=None):
        seen["launched"].append(problem)
        seen.setdefault("ready", []).append(original_run(loaded, problem, stream, clear, ready))
        return seen["ready"][-1]

    monkeypatch.setattr(bound, "run_variant", run_variant)
    original_derive = runner.derive
    monkeypatch.setattr(bound, "derive", lambda *a: seen["derived"].append(a[-1]) or original_derive(*a))
    monkeypatch.setattr(bound.BoundOp, "_prepare", lambda *a: seen["bound"].append("full") or original_prepare(*a))
    monkeypatch.setattr(bound, "moved_views", lambda *a: seen["bound"].append("moved") or original_moved(*a))
    return seen


def test_a_repeated_execute_is_launched_from_the_last_call_without_binding(runs) -> None:
    op, arguments = stand_ins.compiled_class_op(stand_ins.dense_call_tensors(M, N, K, L))
    op.execute(**arguments)
    op.execute(**arguments)
    assert runs["bound"] == ["full"] and len(runs["launched"]) == 2
    assert runs["launched"][0] is runs["launched"][1]


def test_an_in_place_change_of_a_tensor_takes_the_full_path_and_its_checks(runs) -> None:
    op, arguments = stand_ins.compiled_class_op(stand_ins.dense_call_tensors(M, N, K, L))
    op.execute(**arguments)
    prob = arguments["prob_tensor"]
    held = prob.data  # the first memory stays allocated: a new tensor lands elsewhere
    prob.data = torch.ones(M, 1, 1, dtype=torch.float64)  # same object, other dtype, no version bump
    with pytest.raises(ValueError, match="prob_tensor"):
        op.execute(**arguments)
    prob.data = torch.ones(M, 1, 1)  # same object, a new address: only the address is checked
    op.execute(**arguments)
    assert runs["launched"][-1].tensors["prob"].pointer == prob.data_ptr() != held.data_ptr()
    assert runs["bound"] == ["full", "full", "moved"]
    arguments["c_tensor"].as_strided_((M, 2 * N, 1), (1, M, M * 2 * N))  # same address, other strides
    with pytest.raises(ValueError, match="c_tensor"):
        op.execute(**arguments)
    assert len(runs["launched"]) == 2


def test_an_argument_the_op_does_not_take_is_refused_after_a_prebound_call(runs) -> None:
    op, arguments = stand_ins.compiled_class_op(stand_ins.dense_call_tensors(M, N, K, L))
    op.execute(**arguments)
    with pytest.raises(NotImplementedError, match="d_col_tensor: got a Tensor"):  # the family's rule
        op.execute(**arguments, d_col_tensor=torch.zeros(M, 2 * N, 1, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="dbias_tensor"):
        op.execute(**{**arguments, "dbias_tensor": None})
    assert len(runs["launched"]) == 1


def test_a_wrapper_call_with_equal_but_other_settings_takes_the_full_path(runs) -> None:
    t = stand_ins.dense_call_tensors(M, N, K, L)
    api.grouped_gemm_dglu(**t, generate_dbias=True, m_aligned=256)
    api.grouped_gemm_dglu(**t, generate_dbias=True, m_aligned=256)
    assert runs["bound"] == ["full"]
    with pytest.raises(ValueError, match="m_aligned"):
        api.grouped_gemm_dglu(**t, generate_dbias=True, m_aligned=256.0)  # equal, but a float
    with pytest.raises(ValueError, match="generate_dbias"):
        api.grouped_gemm_dglu(**t, generate_dbias=1)  # equal to True, but no bool
    assert len(runs["launched"]) == 2


def test_outputs_at_new_addresses_patch_only_their_parameters_of_the_last_plan(runs) -> None:
    """The plan derived for new output addresses launches what a plan made from scratch
    for them launches: the same parameter bytes and clears."""
    t = stand_ins.dense_call_tensors(M, N, K, L)
    kept = [api.grouped_gemm_dglu(**t, generate_dbias=True) for _ in range(3)]  # three output addresses
    assert runs["bound"] == ["full"]
    problems = runs["launched"]
    assert len({p.tensors["d_row"].pointer for p in problems}) == 3 and kept
    assert runs["derived"] == [("d_row", "dbias")] * 2
    loaded = api._requests.last[1].loaded
    derived = runs["ready"][2].plan
    loaded.last_plans.clear()  # so that the plan below starts from nothing
    fresh = runner.run_variant(loaded, problems[2], stand_ins.STREAM, ("dbias",)).plan
    assert derived.clears == fresh.clears
    assert [launch.arguments.blob for launch in derived.launches] == [
        launch.arguments.blob for launch in fresh.launches
    ]
    assert derived.launches[0].arguments.blob != runs["ready"][0].plan.launches[0].arguments.blob


def test_inputs_at_new_addresses_are_checked_and_launch_what_a_fresh_plan_launches(runs) -> None:
    """The last call's shapes, strides and dtypes at other addresses: a misaligned one is
    refused as a full check refuses it; an aligned one is launched with the last plan's
    parameters but for its address, as a plan made from nothing for it."""
    op, arguments = stand_ins.compiled_class_op(stand_ins.dense_call_tensors(M, N, K, L))
    op.execute(**arguments)
    shifted = torch.zeros(M * K + 1, dtype=torch.bfloat16)[1:].view(M, K, 1)  # 2 bytes off
    with pytest.raises(ValueError, match=r"a_tensor: data pointer 0x[0-9a-f]+ is not 16-byte aligned"):
        op.execute(**{**arguments, "a_tensor": shifted})
    moved = {**arguments, "a_tensor": arguments["a_tensor"].clone(), "prob_tensor": arguments["prob_tensor"].clone()}
    op.execute(**moved)
    assert runs["bound"] == ["full", "moved", "moved"] and runs["derived"] == [("a", "prob")]
    first, problem = runs["launched"][0], runs["launched"][-1]
    assert {name for name in problem.tensors if problem.tensors[name] != first.tensors[name]} == {"a", "prob"}
    loaded = op._bound.loaded
    derived = runs["ready"][-1].plan
    loaded.last_plans.clear()
    fresh = runner.run_variant(loaded, problem, stand_ins.STREAM).plan
    assert [launch.arguments.blob for launch in derived.launches] == [
        launch.arguments.blob for launch in fresh.launches
    ]


def test_a_call_that_misses_the_prebound_path_reads_its_signature_once(runs, monkeypatch) -> None:
    """The signature a prebound miss read is the full path's: execute() and the wrapper
    read it once per call, their inputs at new addresses or not (and still launch the
    moved inputs' addresses)."""
    reads: list[int] = []
    original = bound.signature
    monkeypatch.setattr(bound, "signature", lambda tensors: reads.append(len(tensors)) or original(tensors))
    op, arguments = stand_ins.compiled_class_op(stand_ins.dense_call_tensors(M, N, K, L))
    op.execute(**arguments)
    moved = {**arguments, "a_tensor": arguments["a_tensor"].clone()}
    for call in (arguments, moved, arguments):  # a hit, a miss (moved), a miss (its call kept)
        reads.clear()
        op.execute(**call)
        assert len(reads) == 1
        assert runs["launched"][-1].tensors["a"].pointer == call["a_tensor"].data_ptr()
    t = stand_ins.dense_call_tensors(M, N, K, L)
    api.grouped_gemm_dglu(**t, generate_dbias=True)
    for call in (t, {**t, "a_tensor": t["a_tensor"].clone()}):
        reads.clear()
        api.grouped_gemm_dglu(**call, generate_dbias=True)
        assert len(reads) == 1
        assert runs["launched"][-1].tensors["a"].pointer == call["a_tensor"].data_ptr()
    assert runs["bound"] == ["full", "moved", "full", "moved"]


def test_outputs_at_new_addresses_keep_each_output_s_start_and_every_workspace_clear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variant whose wrapper outputs start at zero (dbias) and at -inf (an amax, as the
    Blackwell NVFP4 kernels' is) and with a workspace zeroed each call (the dynamic
    scheduler's tile counter): a call whose outputs moved enqueues the memsets a fresh plan
    enqueues, at its own outputs' addresses."""
    from conftest_runtime import arguments

    key = variant_key(scheduler="dynamic")
    amax = {"shape": ["l"], "strides": [1], "dtypes": ["fp32"], "align": 4, "io": "accumulate", "start": "-inf"}
    write_artifacts(tmp_path, [key], arguments={**arguments(key), "amax": amax})
    fake = stand_ins.install(monkeypatch, read_manifest(tmp_path).variants, tmp_path)
    t = stand_ins.dense_call_tensors(M, N, K, L)
    kept = [api.grouped_gemm_dglu(**t, generate_dbias=True, use_dynamic_sched=True)]  # workspaces allocated
    filled = set()
    for _ in range(3):  # three more output addresses: each plan derived from the last one
        fake.calls.clear()
        kept.append(api.grouped_gemm_dglu(**t, generate_dbias=True, use_dynamic_sched=True))
        words = {pointer: word for pointer, word, *_ in fake.names("cuMemsetD32Async")}
        assert words.pop(kept[-1]["dbias_tensor"].data_ptr()) == 0  # dbias, the tile counter, amax
        assert sorted(words.values()) == [0, 0xFF800000], words
        filled.add(next(pointer for pointer, word in words.items() if word))
    assert len(filled) == 3  # each call's own amax
