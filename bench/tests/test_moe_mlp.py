"""bench.moe_mlp's act_out comparison on the CPU: the two calls it times give the same A
(the op's float reference stands in for the kernel), and the printed summary."""

from __future__ import annotations

import sys

import pytest
import torch

import dglu.torch
from bench import moe_mlp
from bench.shapes import Shape

dglu.torch.use_reference_on_cpu()

SMALL = Shape("small", n=64, k=64, expert_rows=(64, 0, 128))


def test_kernel_and_recompute_calls_give_the_same_activation():
    torch.manual_seed(0)
    leaves, dy = moe_mlp.problem(SMALL, device="cpu")
    calls = moe_mlp.dw2_activation_calls(leaves, dy)
    kernel, recompute = calls["kernel"](), calls["recompute"]()
    assert kernel.shape == recompute.shape == (SMALL.m, SMALL.n)
    assert kernel.dtype == recompute.dtype == torch.bfloat16
    assert recompute.float().abs().max() > 0
    torch.testing.assert_close(kernel, recompute, rtol=1e-2, atol=1e-2)


def test_act_out_line_reports_both_times_and_the_ratio():
    cost = {"served": True, "kernel_ms": 0.5, "recompute_ms": 0.75, "recompute_over_kernel": 1.5}
    line = moe_mlp.act_out_line("dsv3-like", cost)
    assert line.split() == ["dsv3-like", "act_out:", "kernel", "0.500", "ms,", "recompute",
                            "0.750", "ms,", "recompute/kernel", "1.50x"]


def test_act_out_line_says_when_no_variant_serves():
    assert "no act_out variant installed" in moe_mlp.act_out_line("x", {"served": False})


def test_help_parses(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["moe_mlp", "--help"])
    with pytest.raises(SystemExit) as exit_:
        moe_mlp.main()
    assert exit_.value.code == 0
    assert "--shapes" in capsys.readouterr().out
