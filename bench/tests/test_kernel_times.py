"""bench.kernel_times without a GPU: the per-call table from profiler events, and its
command line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench import kernel_times


def event(key: str, device_us: float) -> SimpleNamespace:
    return SimpleNamespace(key=key, self_device_time_total=device_us)


def test_per_call_us_divides_by_the_calls_merges_long_names_and_drops_host_only_events() -> None:
    long_name = "cutlass::device_kernel<" + "x" * 500
    events = [
        event("dglu_v_dbias_finish_1", 35.0),
        event("dglu_v_main_0", 1880.0),
        event("cudaLaunchKernel", 0.0),  # a host-side event: no device time
        event(long_name + "a", 10.0),
        event(long_name + "b", 30.0),  # the same name once cut to NAME_CHARS
    ]
    table = kernel_times.per_call_us(events, calls=20)
    assert table == {"dglu_v_main_0": 94.0, "dglu_v_dbias_finish_1": 1.75,
                     long_name[: kernel_times.NAME_CHARS]: 2.0}
    assert list(table) == ["dglu_v_main_0", long_name[: kernel_times.NAME_CHARS], "dglu_v_dbias_finish_1"]


def test_the_command_line_takes_known_shapes_and_a_positive_call_count(capsys) -> None:
    args = kernel_times.parse_args(["qwen3-moe-like", "dsv3-like", "--calls", "7"])
    assert args.shapes == ["qwen3-moe-like", "dsv3-like"] and args.calls == 7
    with pytest.raises(SystemExit):
        kernel_times.parse_args(["no-such-shape"])
    with pytest.raises(SystemExit):
        kernel_times.parse_args(["dsv3-like", "--calls", "0"])
    assert "--calls: got 0, need a positive count" in capsys.readouterr().err
