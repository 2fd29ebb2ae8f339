"""Every argument violation the public API refuses, one at a time, through the wrapper and
the class API's execute(): the error type, a message that names the argument, what it got
and what it needs, and nothing written or launched.

Each case changes one argument of an otherwise valid call (stand-ins as in
test_runtime_api_flow: an H200, a hand-written manifest, CPU tensors with the device
check off, run_variant recording instead of launching), so the violation is the call's
only problem. Device violations need CUDA tensors: tests/gpu/test_violations_gpu.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch", reason="torch is needed to build tensors for these tests")

from dglu import api, bound  # noqa: E402
from test_runtime_api_flow import K, L, M, N, runs  # noqa: E402, F401 (the fixture)

BF16 = torch.bfloat16


def dense_b(n: int = N, k: int = K, l: int = L) -> torch.Tensor:
    return torch.zeros(l, n, k, dtype=BF16).permute(1, 2, 0)


def misaligned(shape: tuple[int, ...], dtype=BF16) -> torch.Tensor:
    """A contiguous tensor of ``shape`` one element past a 16-byte boundary."""
    count = 1
    for size in shape:
        count *= size
    return torch.zeros(count + 16, dtype=dtype)[1 : 1 + count].view(shape)


def strided(shape: tuple[int, ...], dtype=torch.float32) -> torch.Tensor:
    """A view of ``shape`` whose first dimension steps over every other element."""
    return torch.zeros((shape[0] * 2, *shape[1:]), dtype=dtype)[::2]


def valid_call() -> dict[str, object]:
    """A wrapper call that runs (dense, dbias: the installed static 1x1 variant)."""
    return dict(
        a_tensor=torch.randn(M, K, 1).to(BF16),
        c_tensor=torch.randn(M, 2 * N, 1).to(BF16),
        padded_offsets=torch.tensor([256, 256, 768, 1024], dtype=torch.int32),
        alpha_tensor=torch.rand(L),
        beta_tensor=torch.rand(L),
        prob_tensor=torch.rand(M, 1, 1),
        dprob_tensor=torch.rand(M, 1, 1),
        b_tensor=dense_b(),
        generate_dbias=True,
    )


@dataclass(frozen=True)
class Violation:
    """One bad argument: the changes it makes to valid_call(), and what must be said."""

    changes: Callable[[], dict[str, object]]
    error: type[Exception]
    argument: str  # the message starts with it
    got: str  # what the call passed, as the message shows it
    needs: str  # what the argument needs, as the message says it


def change(**values: object) -> Callable[[], dict[str, object]]:
    return lambda: {name: value() if callable(value) else value for name, value in values.items()}


WRAPPER_VIOLATIONS = {
    "a not a tensor": Violation(
        change(a_tensor=lambda: [[0.0]]), TypeError, "a_tensor", "got list", "torch.Tensor"
    ),
    "a of rank 4": Violation(
        change(a_tensor=lambda: torch.zeros(M, K, 1, 1, dtype=BF16)),
        ValueError, "a_tensor", "rank 4", "(M, K, 1)",
    ),
    "a float64": Violation(
        change(a_tensor=lambda: torch.zeros(M, K, 1, dtype=torch.float64)),
        ValueError, "a_tensor", "torch.float64", "expected one of torch.bfloat16",
    ),
    "a M-major": Violation(
        change(a_tensor=lambda: torch.zeros(K, M, 1, dtype=BF16).permute(1, 0, 2)),
        ValueError, "a_tensor", f"strides (1, {M}, 1)", f"({K}, 1, {M * K})",
    ),
    "a misaligned": Violation(
        change(a_tensor=lambda: misaligned((M, K, 1))), ValueError, "a_tensor", "0x",
        "16-byte aligned",
    ),
    "K not 16 bytes": Violation(
        change(a_tensor=lambda: torch.zeros(M, 100, 1, dtype=BF16), b_tensor=lambda: dense_b(k=100)),
        ValueError, "a_tensor", "K = 100", "multiple of 8",
    ),
    "b of another dtype": Violation(
        change(b_tensor=lambda: dense_b().to(torch.float16)),
        ValueError, "b_tensor", "torch.float16", "expected one of torch.bfloat16",
    ),
    "b contiguous (N, K, L)": Violation(
        change(b_tensor=lambda: torch.zeros(N, K, L, dtype=BF16)),
        ValueError, "b_tensor", f"strides ({K * L}, {L}, 1)", f"({K}, 1, {N * K})",
    ),
    "b of rank 2": Violation(
        change(b_tensor=lambda: torch.zeros(N, K, dtype=BF16)),
        ValueError, "b_tensor", "rank 2", "(N, K, L)",
    ),
    "N not a multiple of 32": Violation(
        change(b_tensor=lambda: dense_b(n=80), c_tensor=lambda: torch.zeros(M, 160, 1, dtype=BF16)),
        ValueError, "b_tensor", "N = 80", "multiple of 32",
    ),
    "more than 1024 experts": Violation(
        change(b_tensor=lambda: dense_b(n=32, k=8, l=1025)),
        ValueError, "b_tensor", "L = 1025", "at most 1024",
    ),
    "c too wide": Violation(
        change(c_tensor=lambda: torch.zeros(M, 2 * N + 32, 1, dtype=BF16)),
        ValueError, "c_tensor", f"({M}, {2 * N + 32}, 1)", f"(M, 2N, 1) = ({M}, {2 * N}, 1)",
    ),
    "c int32": Violation(
        change(c_tensor=lambda: torch.zeros(M, 2 * N, 1, dtype=torch.int32)),
        ValueError, "c_tensor", "torch.int32", "torch.bfloat16",
    ),
    "c M-major": Violation(
        change(c_tensor=lambda: torch.zeros(2 * N, M, 1, dtype=BF16).permute(1, 0, 2)),
        ValueError, "c_tensor", f"strides (1, {M}", f"({2 * N}, 1",
    ),
    "c misaligned": Violation(
        change(c_tensor=lambda: misaligned((M, 2 * N, 1))), ValueError, "c_tensor", "0x",
        "16-byte aligned",
    ),
    "offsets int64": Violation(
        change(padded_offsets=lambda: torch.zeros(L, dtype=torch.int64)),
        ValueError, "padded_offsets", "torch.int64", "torch.int32",
    ),
    "offsets one too many": Violation(
        change(padded_offsets=lambda: torch.zeros(L + 1, dtype=torch.int32)),
        ValueError, "padded_offsets", f"({L + 1},)", f"(L,) = ({L},)",
    ),
    "offsets of rank 2": Violation(
        change(padded_offsets=lambda: torch.zeros(L, 1, dtype=torch.int32)),
        ValueError, "padded_offsets", "rank 2", "(L,)",
    ),
    "offsets strided": Violation(
        change(padded_offsets=lambda: strided((L,), torch.int32)),
        ValueError, "padded_offsets", "strides (2,)", "(1,)",
    ),
    "alpha float64": Violation(
        change(alpha_tensor=lambda: torch.ones(L, dtype=torch.float64)),
        ValueError, "alpha_tensor", "torch.float64", "torch.float32",
    ),
    "alpha one short": Violation(
        change(alpha_tensor=lambda: torch.ones(L - 1)),
        ValueError, "alpha_tensor", f"({L - 1},)", f"({L},)",
    ),
    "beta bf16": Violation(
        change(beta_tensor=lambda: torch.ones(L, dtype=BF16)),
        ValueError, "beta_tensor", "torch.bfloat16", "torch.float32",
    ),
    "beta one too many": Violation(
        change(beta_tensor=lambda: torch.ones(L + 1)),
        ValueError, "beta_tensor", f"({L + 1},)", f"({L},)",
    ),
    "prob of rank 1": Violation(
        change(prob_tensor=lambda: torch.ones(M)), ValueError, "prob_tensor", "rank 1",
        "(M, 1, 1)",
    ),
    "prob one row too many": Violation(
        change(prob_tensor=lambda: torch.ones(M + 1, 1, 1)),
        ValueError, "prob_tensor", f"({M + 1}, 1, 1)", f"({M}, 1, 1)",
    ),
    "dprob fp16": Violation(
        change(dprob_tensor=lambda: torch.zeros(M, 1, 1, dtype=torch.float16)),
        ValueError, "dprob_tensor", "torch.float16", "torch.float32",
    ),
    "dprob strided": Violation(
        change(dprob_tensor=lambda: strided((M, 1, 1))),
        ValueError, "dprob_tensor", "strides (2, 1, 1)", "(1, 1, 1)",
    ),
    "dense and discrete weights": Violation(
        change(b_ptrs=lambda: torch.zeros(L, dtype=torch.int64), n=N, b_dtype=BF16),
        ValueError, "b_tensor and b_ptrs, n, b_dtype", "b_ptrs, n, b_dtype", "pass one mode",
    ),
    "no weights": Violation(
        change(b_tensor=None), ValueError, "b_tensor", "got None", "required"
    ),
    "b_ptrs without n": Violation(
        change(b_tensor=None, b_ptrs=lambda: torch.zeros(L, dtype=torch.int64), b_dtype=BF16),
        ValueError, "n", "got None", "required with b_ptrs",
    ),
    "n a float": Violation(
        change(b_tensor=None, b_ptrs=lambda: torch.zeros(L, dtype=torch.int64), n=96.0,
               b_dtype=BF16),
        ValueError, "n", "96.0", "a positive int",
    ),
    "b_dtype fp16": Violation(
        change(b_tensor=None, b_ptrs=lambda: torch.zeros(L, dtype=torch.int64), n=N,
               b_dtype=torch.float16),
        ValueError, "b_dtype", "fp16", "same dtype",
    ),
    "b_ptrs int32": Violation(
        change(b_tensor=None, b_ptrs=lambda: torch.zeros(L, dtype=torch.int32), n=N,
               b_dtype=BF16),
        ValueError, "b_ptrs", "torch.int32", "torch.int64",
    ),
    "b_ptrs strided": Violation(
        change(b_tensor=None, b_ptrs=lambda: strided((L,), torch.int64), n=N, b_dtype=BF16),
        ValueError, "b_ptrs", "strides (2,)", "(1,)",
    ),
    "b_major unknown": Violation(
        change(b_major="m"), ValueError, "b_major", "'m'", "['k', 'n']"
    ),
    "b_major n for dense B": Violation(
        change(b_major="n"), ValueError, "b_major", "'n'", "b_major='k'"
    ),
    "act_func unknown": Violation(
        change(act_func="relu"), ValueError, "act_func", "'relu'", "'dswiglu'"
    ),
    "acc_dtype fp16": Violation(
        change(acc_dtype=torch.float16), ValueError, "acc_dtype", "torch.float16",
        "torch.float32",
    ),
    "d_dtype int8": Violation(
        change(d_dtype=torch.int8), ValueError, "d_dtype", "torch.int8", "torch.bfloat16"
    ),
    "generate_dbias a string": Violation(
        change(generate_dbias="yes"), ValueError, "generate_dbias", "'yes'", "a bool"
    ),
    "use_dynamic_sched an int": Violation(
        change(use_dynamic_sched=1), ValueError, "use_dynamic_sched", "got 1", "a bool"
    ),
    "m_aligned 128": Violation(
        change(m_aligned=128), ValueError, "m_aligned", "got 128", "must be 256"
    ),
    "cd_major m": Violation(change(cd_major="m"), ValueError, "cd_major", "'m'", "'n'"),
    "sf_vec_size 32": Violation(
        change(sf_vec_size=32), ValueError, "sf_vec_size", "got 32", "must be 16"
    ),
    "epilogue_op relu": Violation(
        change(epilogue_op="relu"), ValueError, "epilogue_op", "'relu'", "must be None"
    ),
    "vector_f32": Violation(
        change(vector_f32=True), NotImplementedError, "vector_f32", "got True", "must be False"
    ),
    "sfa_tensor given": Violation(
        change(sfa_tensor=lambda: torch.zeros(1)), NotImplementedError, "sfa_tensor",
        "block-scaled", "pass None",
    ),
    "current_stream a string": Violation(
        change(current_stream="s0"), TypeError, "current_stream", "got str",
        "a torch.cuda.Stream",
    ),
}

EXECUTE_VIOLATIONS = {
    "d_row fp16 (compiled bf16)": Violation(
        change(d_row_tensor=lambda: torch.zeros(M, 2 * N, 1, dtype=torch.float16)),
        ValueError, "d_row_tensor", "torch.float16", "expected one of torch.bfloat16",
    ),
    "d_row one row short": Violation(
        change(d_row_tensor=lambda: torch.zeros(M - 1, 2 * N, 1, dtype=BF16)),
        ValueError, "d_row_tensor", f"({M - 1}, {2 * N}, 1)", f"({M}, {2 * N}, 1)",
    ),
    "dbias missing": Violation(
        change(dbias_tensor=None), ValueError, "dbias_tensor", "required", "sample_dbias"
    ),
    "dbias fp32": Violation(
        change(dbias_tensor=lambda: torch.zeros(L, 2 * N, 1)),
        ValueError, "dbias_tensor", "torch.float32", "torch.bfloat16",
    ),
    "dbias of one expert less": Violation(
        change(dbias_tensor=lambda: torch.zeros(L - 1, 2 * N, 1, dtype=BF16)),
        ValueError, "dbias_tensor", f"({L - 1}, {2 * N}, 1)", f"({L}, {2 * N}, 1)",
    ),
    "b_ptrs for dense weights": Violation(
        change(b_tensor=None, b_ptrs=lambda: torch.zeros(L, dtype=torch.int64)),
        ValueError, "b_ptrs", "built for dense weights", "pass b_tensor",
    ),
    "d_col_tensor given": Violation(
        change(d_col_tensor=lambda: torch.zeros(1)), NotImplementedError, "d_col_tensor",
        "block-scaled", "pass None",
    ),
}


def check_refused(violation: Violation, call: Callable[..., object], arguments: dict) -> None:
    """``call(**arguments)`` raises as ``violation`` says, and changes no tensor."""
    before = {
        name: value.clone() for name, value in arguments.items() if isinstance(value, torch.Tensor)
    }
    with pytest.raises(violation.error) as raised:
        call(**arguments)
    message = str(raised.value)
    assert message.startswith(f"{violation.argument}:"), message
    assert violation.got in message, message
    assert violation.needs in message, message
    for name, copy in before.items():
        assert torch.equal(arguments[name], copy), f"{name} was written"


def test_the_valid_call_runs(runs) -> None:
    """The baseline: unchanged, the wrapper call and the execute call each run once."""
    api.grouped_gemm_dglu(**valid_call())
    op, arguments = compiled_op()
    op.execute(**arguments)
    assert len(runs) == 2


@pytest.mark.parametrize("case", sorted(WRAPPER_VIOLATIONS))
def test_wrapper_refuses(runs, monkeypatch, case: str) -> None:
    monkeypatch.setattr(bound, "resolve_stream", _stream_stand_in)
    violation = WRAPPER_VIOLATIONS[case]
    check_refused(violation, api.grouped_gemm_dglu, {**valid_call(), **violation.changes()})
    assert runs == []


def _stream_stand_in(stream: object, device: object) -> int:
    """The real resolve_stream for what it refuses without a GPU; 7 for None."""
    from dglu.streams import resolve_stream

    return 7 if stream is None else resolve_stream(stream, 0)


def compiled_op() -> tuple[api.GroupedGemmDglu, dict[str, object]]:
    """A compiled class op with dbias (built from valid_call's tensors) and its execute()
    arguments."""
    call = valid_call()
    d_row = torch.full((M, 2 * N, 1), 3.0, dtype=BF16)
    dbias = torch.full((L, 2 * N, 1), 5.0, dtype=BF16)
    op = api.GroupedGemmDglu(
        sample_a=call["a_tensor"],
        sample_c=call["c_tensor"],
        sample_d_row=d_row,
        sample_padded_offsets=call["padded_offsets"],
        sample_alpha=call["alpha_tensor"],
        sample_beta=call["beta_tensor"],
        sample_prob=call["prob_tensor"],
        sample_dprob=call["dprob_tensor"],
        sample_dbias=dbias,
        sample_b=call["b_tensor"],
    )
    op.compile()
    del call["generate_dbias"]
    return op, {**call, "d_row_tensor": d_row, "dbias_tensor": dbias}


@pytest.mark.parametrize("case", sorted(EXECUTE_VIOLATIONS))
def test_execute_refuses(runs, case: str) -> None:
    op, arguments = compiled_op()
    violation = EXECUTE_VIOLATIONS[case]
    check_refused(violation, op.execute, {**arguments, **violation.changes()})
    assert runs == []


def test_there_are_at_least_forty_distinct_violations() -> None:
    cases = [*WRAPPER_VIOLATIONS.values(), *EXECUTE_VIOLATIONS.values()]
    assert len({(c.argument, c.got, c.needs) for c in cases}) >= 40
