"""The compact text table and the one summary line printed at the end of a run."""

from __future__ import annotations

import re
from typing import Any

from .floors import SOURCE as FLOORS_SOURCE
from .results import lookup, median_ms

# (column header, candidate) for the time columns, in order.
TIME_COLUMNS = (
    ("fused", "fused"),
    ("det", "fused_deterministic"),
    ("gemm", "grouped_gemm"),
    ("+eager", "grouped_eager_epilogue"),
    ("+compiled", "grouped_compiled_epilogue"),
    ("mm", "dense_mm"),
    ("quack", "quack_dgated"),
)
# (column header, ratio) for the ratio columns, in order.
RATIO_COLUMNS = (
    ("fused/gemm", "fused_over_gemm"),
    ("compiled/fused", "compiled_over_fused"),
    ("det/fused", "deterministic_over_fused"),
    ("quack/fused", "quack_over_fused"),
)
# ratio -> (its bound's field in the shape record, whether the ratio must stay at or below it)
RATIO_BOUNDS = {
    "fused_over_gemm": ("fused_over_gemm_target", True),
    "compiled_over_fused": ("speedup_target", False),
}
# (column header, candidate) for the fraction-of-floor columns, in order.
FLOOR_COLUMNS = (("fused of floor", "fused"), ("gemm of floor", "grouped_gemm"))
FLOOR_LEGEND = (
    '"F of Yc" / "F of Yb": the fraction F = floor / median reached of a Y ms floor, '
    "compute-bound (c) or bytes-bound (b); "
    f"{FLOORS_SOURCE}"
)
# (summary name, ratio) for the ranges in the summary line, in order.
SUMMARY_RATIOS = (
    ("fused/gemm", "fused_over_gemm"),
    ("compiled/fused", "compiled_over_fused"),
    ("deterministic/fused", "deterministic_over_fused"),
    ("quack/fused", "quack_over_fused"),
)
SHAPE_WIDTH = 20
VARIANT_WIDTH = 26
# the launch-shape part of a variant name: tile, cluster, scheduler, consumer (dglu.contract.keys)
LAUNCH_PART = re.compile(r"\d+x\d+_\d+x\d+_.*$")
CELL_WIDTH = 16


def _cell(value: str) -> str:
    return value.rjust(CELL_WIDTH)


def _time_cell(timings: dict[str, Any], name: str) -> str:
    ms = median_ms(timings, name)
    if ms is None:
        return _cell("skipped" if "skipped" in timings.get(name, {}) else "error" if name in timings else "-")
    return _cell(f"{ms:.3f} ({timings[name]['tflops']:.0f})")


def _ratio_cell(value: float | None) -> str:
    return _cell("-" if value is None else f"{value:.2f}x")


def _bounded_ratio_cell(shape: dict[str, Any], ratio: str) -> str:
    """The ratio, with the shape's bound on it where it has one: "1.05x (<=1.15)"."""
    value = shape["ratios"][ratio]
    field, at_most = RATIO_BOUNDS.get(ratio, (None, True))
    bound = lookup(shape, "shape", field) if field else None
    if value is None or bound is None:
        return _ratio_cell(value)
    return _cell(f"{value:.2f}x ({'<=' if at_most else '>='}{bound:.2f})")


def _floor_cell(shape: dict[str, Any], candidate: str) -> str:
    """The fraction of its floor ``candidate`` reached, and the floor: "0.78 of 1.218c"."""
    floor = lookup(shape, "floors", candidate)
    if floor is None:
        return _cell("-")
    fraction = "-" if floor["fraction"] is None else f"{floor['fraction']:.2f}"
    return _cell(f"{fraction} of {floor['floor_ms']:.3f}{floor['bound'][0]}")


def _variant_cell(shape: dict[str, Any]) -> str:
    """The fused op's variant as the selection chose it: its tile, cluster, scheduler and
    consumer ("128x128_2x1_static_pp")."""
    name = shape.get("variant")
    if not isinstance(name, str):
        return "error".rjust(VARIANT_WIDTH)
    found = LAUNCH_PART.search(name)
    return (found.group(0) if found else name).rjust(VARIANT_WIDTH)


def _gate_mark(shape: dict[str, Any], key: str) -> str:
    """ok, WRONG, or - (not checked) for the gate kept under ``key``."""
    return {True: "ok", False: "WRONG", None: "-"}[lookup(shape, key, "ok")]


def _agreement_cell(shape: dict[str, Any]) -> str:
    """The fused and the deterministic op's gates, and the fused op's D relative L2."""
    marks = f"{_gate_mark(shape, 'agreement')}/{_gate_mark(shape, 'deterministic_agreement')}"
    d_rel_l2 = lookup(shape, "agreement", "d_rel_l2")
    return _cell(marks if d_rel_l2 is None else f"{marks} {d_rel_l2:.0e}")


def table(record: dict[str, Any]) -> str:
    """Per shape: median ms (TFLOP/s) of each candidate, the ratios (with their bounds),
    the fractions of their floors the fused op and the GEMM reach, the gates (fused /
    deterministic); then the floors' legend and the host figures."""
    header = "shape".ljust(SHAPE_WIDTH) + "".join(
        _cell(f"{title} ms (TF/s)" if title in ("fused", "gemm") else f"{title} ms")
        for title, _ in TIME_COLUMNS
    )
    header += "".join(_cell(title) for title, _ in RATIO_COLUMNS + FLOOR_COLUMNS)
    header += _cell("agreement f/det") + "fused variant".rjust(VARIANT_WIDTH)
    lines = [header]
    for shape in record["shapes"]:
        timings = shape["timings"]
        lines.append(
            shape["shape"]["name"].ljust(SHAPE_WIDTH)
            + "".join(_time_cell(timings, name) for _, name in TIME_COLUMNS)
            + "".join(_bounded_ratio_cell(shape, name) for _, name in RATIO_COLUMNS)
            + "".join(_floor_cell(shape, name) for _, name in FLOOR_COLUMNS)
            + _agreement_cell(shape)
            + _variant_cell(shape)
        )
    lines.append(FLOOR_LEGEND)
    host = record.get("host")
    if host is not None:
        lines += [f"host: {_host_target_text(t)}" for t in host["targets"]]
        lines.append(f"host: {_driver_share_text(host.get('steady_state') or {})}")
        lines.append(f"host: {_jit_text(host.get('jit_compile_reference'))}")
    return "\n".join(lines)


def _host_target_text(target: dict[str, Any]) -> str:
    value = "not measured" if target["value"] is None else f"{target['value']:.3g}"
    if isinstance(target["value"], bool):
        value = "yes" if target["value"] else "NO"
    mark = {True: "met", False: "MISSED", None: "?"}[target["met"]]
    return f"{target['name']} {value} ({target['bound']}, {mark})"


def _driver_share_text(steady: dict[str, Any]) -> str:
    """How much of execute's and the wrapper's host time the driver calls take, beside a
    small torch op's."""
    parts = []
    for name in ("execute", "wrapper"):
        total, driver = lookup(steady, name, "cpu_us"), steady.get(f"{name}_driver_us")
        if total is not None and driver is not None:
            parts.append(f"{name} {total:.1f} us, {driver:.1f} of it in driver calls")
    torch_op = steady.get("torch_op_us")
    if torch_op is not None:
        parts.append(f"a small torch op {torch_op:.1f} us")
    return "; ".join(parts) if parts else "driver share: not measured"


def _jit_text(reference: dict[str, Any] | None) -> str:
    """The CuTe DSL JIT start-up cost the first call is compared with."""
    if not reference or reference.get("median_total_s") is None:
        why = (reference or {}).get("missing", "not given")
        return f"CuTe DSL JIT start-up: not known ({why})"
    return (
        f"CuTe DSL JIT start-up instead (import + compile of {reference['variant']}, CPU "
        f"machine, {reference['date']}): {reference['median_total_s']:.2f} s"
    )


def _figure(value: float | None, text: str) -> str:
    return "n/a" if value is None else text.format(value)


def _host_summary(host: dict[str, Any]) -> str:
    """First call (and the JIT start-up it replaces), per-call cost, graph replay."""
    first_call = _figure(lookup(host, "first_call", "beyond_torch_ms"), "{:.0f} ms")
    jit = lookup(host, "jit_compile_reference", "median_total_s")
    per_call = _figure(lookup(host, "steady_state", "execute", "cpu_us"), "{:.1f} us/call")
    driver_calls = lookup(host, "steady_state", "execute_driver_calls")
    if driver_calls is not None:
        per_call += f" ({sum(driver_calls.values()):g} driver calls)"
    graph = {True: "ok", False: "WRONG", None: "n/a"}[lookup(host, "graph_replay", "ok")]
    jit_text = "" if jit is None else f" (JIT: {jit:.1f} s)"
    return f"first call {first_call}{jit_text}, execute {per_call}, graph {graph}"


def _span(values: list[float | None], unit: str) -> str:
    present = [v for v in values if v is not None]
    if not present:
        return "n/a"
    return f"{min(present):.2f}-{max(present):.2f}{unit}"


def summary_line(record: dict[str, Any]) -> str:
    """One line: the ratios' ranges over shapes, host figures, targets met, where and what."""
    shapes = record["shapes"]
    ratios = [s["ratios"] for s in shapes]
    host = record.get("host")
    tally = record["targets"]
    environment = record["environment"]
    gpu = (environment.get("gpu") or {}).get("name", "no GPU")
    prefix = "BENCH (DRY RUN, fake timings)" if record["dry_run"] else "BENCH"
    parts = [f"{title} {_span([r[name] for r in ratios], 'x')}" for title, name in SUMMARY_RATIOS]
    fractions = [lookup(s, "floors", "fused", "fraction") for s in shapes]
    parts.append(f"fused at {_span(fractions, '')} of its floor")
    if host is not None:
        parts.append(_host_summary(host))
    parts.append(f"targets {tally['met']}/{tally['total']} met")
    parts.append(
        f"results {'WRONG (' + str(len(record['wrong'])) + ')' if record['wrong'] else 'ok'}"
    )
    if record["errors"]:
        parts.append(f"{len(record['errors'])} failed measurements (errors in the JSON)")
    return f"{prefix}: " + "; ".join(parts) + f" ({gpu}, commit {environment['commit']})"
