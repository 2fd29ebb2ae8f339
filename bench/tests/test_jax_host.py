"""bench.jax_host without a GPU: the chain timing both kernel figures share, the summary
line, argument errors, the no-GPU exit, and (where jax is installed) the JAX chain on the
CPU with a stand-in entry."""

from __future__ import annotations

import sys
import types

import pytest

from bench import jax_host


class FakeClock:
    """perf_counter advancing by ``step`` seconds per run."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now

    def run(self) -> str:
        self.now += self.step
        return "out"


def test_chain_time_is_wall_time_per_call_after_one_warm_up(monkeypatch):
    clock = FakeClock(step=0.004)
    monkeypatch.setattr(jax_host.time, "perf_counter", clock)
    waited = []
    ms = jax_host.chain_ms_per_call(clock.run, waited.append, calls=20)
    assert ms == pytest.approx(4.0 / 20)
    assert waited == ["out"] * (jax_host.CHAIN_TRIALS + 1)


def test_chain_time_needs_positive_calls():
    with pytest.raises(ValueError, match="calls: need the chain's positive call count, got 0"):
        jax_host.chain_ms_per_call(lambda: None, lambda _: None, calls=0)


def test_summary_line_keeps_its_format():
    record = {"host_us_per_call": 12.34, "host_us_without_call": 5.67,
              "jax_kernel_ms": 0.12345, "torch_kernel": {"ms_per_call": 0.1256, "method": "x"}}
    assert jax_host.summary_line(record) == (
        "JAX: host us/call 12.3 (jit without the call 5.7), kernel ms jax 0.1235 torch 0.1256")


def test_non_positive_counts_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        jax_host.main(["--repeats", "0"])
    assert exit_.value.code == 2
    assert "--calls, --repeats: need positive counts, got 2000, 0" in capsys.readouterr().err


def test_without_a_gpu_it_exits_2(monkeypatch, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    if "jax" in sys.modules:
        pytest.skip("jax is already imported: configure_xla refuses to run")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    assert jax_host.main([]) == 2
    assert "torch sees no CUDA device" in capsys.readouterr().err
    import os

    assert os.environ["XLA_FLAGS"] == f"--xla_dump_to=/tmp/x {jax_host.COMMAND_BUFFER_FLAG}"
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_jax_chain_runs_every_call_on_the_cpu(monkeypatch):
    jnp = pytest.importorskip("jax.numpy")
    calls = []

    def entry(prob_tensor, dprob_tensor, **arguments):
        calls.append(sorted(arguments))
        return types.SimpleNamespace(dprob_tensor=dprob_tensor + prob_tensor)

    monkeypatch.setitem(sys.modules, "dglu.jax", types.SimpleNamespace(grouped_gemm_dglu_jax=entry))
    sets = [{"prob_tensor": jnp.ones((4, 1, 1), jnp.float32)} for _ in range(2)]
    ms = jax_host.jax_kernel_ms(sets, repeats=3)
    assert ms > 0
    assert len(calls) == 3 * 2  # traced once: every call of the chain is in the jit
    assert calls[0] == sorted(jax_host.ENTRY_OPTIONS)
