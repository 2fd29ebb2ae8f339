"""A PNG of the two ratios per shape, with the issue's targets drawn in, and of the fraction
of its floor (bench.floors) the fused op and the grouped GEMM reach on each shape; and
charts of bounded ratios alone (bench.mxfp8's)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

# (ratio, panel title, whether lower is better, the shape record's field holding its bound)
PANELS = (
    (
        "fused_over_gemm",
        "fused / grouped GEMM only (lower is better)",
        True,
        "fused_over_gemm_target",
    ),
    (
        "compiled_over_fused",
        "(grouped GEMM + compiled epilogue) / fused (higher is better)",
        False,
        "speedup_target",
    ),
)
# (candidate, legend label, color) of the floor panel's bars
FLOOR_BARS = (
    ("fused", "dglu fused", "tab:blue"),
    ("grouped_gemm", "grouped GEMM only", "tab:orange"),
)
FLOOR_TITLE = "fraction of its floor reached: floor / median (higher is better)"
MET_COLOR, MISSED_COLOR, NO_TARGET_COLOR, TARGET_COLOR = "tab:green", "tab:red", "tab:gray", "black"


def _color(value: float, bound: float | None, lower_is_better: bool) -> str:
    if bound is None:
        return NO_TARGET_COLOR
    met = value <= bound if lower_is_better else value >= bound
    return MET_COLOR if met else MISSED_COLOR


def _ratio_panel(
    axis: Any, values: list[float | None], bounds: list[float | None], lower_is_better: bool
) -> None:
    """A bar per shape (green where its bound is met, red where missed, gray where it has
    none, "n/a" where not measured), each shape's bound a dashed line."""
    for x, (value, bound) in enumerate(zip(values, bounds)):
        if value is None:
            axis.text(x, 0.02, "n/a", ha="center", transform=axis.get_xaxis_transform())
            continue
        axis.bar(x, value, color=_color(value, bound, lower_is_better))
        axis.annotate(f"{value:.2f}x", (x, value), ha="center", va="bottom", fontsize=8)
        if bound is not None:
            axis.hlines(bound, x - 0.4, x + 0.4, colors=TARGET_COLOR, linestyles="dashed")
    axis.set_ylabel("ratio of median times")


def _floor_panel(axis: Any, shapes: list[dict[str, Any]]) -> None:
    """Per shape, a bar per FLOOR_BARS candidate: the fraction of its floor it reached,
    annotated with the floor (ms, c compute- or b bytes-bound); 1.0 dashed."""
    width = 0.8 / len(FLOOR_BARS)
    for slot, (candidate, label, color) in enumerate(FLOOR_BARS):
        for x, shape in enumerate(shapes):
            floor = (shape.get("floors") or {}).get(candidate)
            at = x - 0.4 + width * (slot + 0.5)
            if floor is None or floor["fraction"] is None:
                axis.text(at, 0.02, "n/a", ha="center", fontsize=7)
                continue
            axis.bar(at, floor["fraction"], width, color=color, label=label if x == 0 else None)
            axis.annotate(
                f"{floor['fraction']:.2f}\n{floor['floor_ms']:.3f}{floor['bound'][0]}",
                (at, floor["fraction"]),
                ha="center",
                va="bottom",
                fontsize=6,
            )
    axis.axhline(1.0, color=TARGET_COLOR, linestyle="dashed")
    axis.set_ylim(0, 1.25)
    axis.set_ylabel("floor / median (ms floor, c compute / b bytes)")
    axis.legend(fontsize=7, loc="upper right")


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def _where(record: dict[str, Any]) -> str:
    """The GPU and the commit of ``record``'s run, as the titles name them."""
    environment = record["environment"]
    gpu = (environment.get("gpu") or {}).get("name", "no GPU")
    return f"{gpu}, commit {environment['commit']}"


def _png(figure: Any, axes: Any, shapes: list[dict[str, Any]], title: str) -> bytes:
    """``figure`` with the shapes' names under each of ``axes`` and ``title`` above, as PNG
    bytes; the figure is closed."""
    names = [s["shape"]["name"] for s in shapes]
    for axis in axes:
        axis.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
    figure.suptitle(title, fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    _pyplot().close(figure)
    return buffer.getvalue()


def ratios_png(record: dict[str, Any]) -> bytes:
    """The chart as PNG bytes: one panel per ratio of PANELS, then the floor panel."""
    shapes = record["shapes"]
    figure, axes = _pyplot().subplots(
        1, len(PANELS) + 1, figsize=(19, 4.8), constrained_layout=True
    )
    for axis, (ratio, title, lower_is_better, bound_field) in zip(axes, PANELS):
        values = [s["ratios"][ratio] for s in shapes]
        _ratio_panel(axis, values, [s["shape"].get(bound_field) for s in shapes], lower_is_better)
        axis.set_title(title, fontsize=10)
    _floor_panel(axes[-1], shapes)
    axes[-1].set_title(FLOOR_TITLE, fontsize=10)
    dry = " (DRY RUN: fake timings)" if record["dry_run"] else ""
    return _png(
        figure,
        axes,
        shapes,
        f"dglu fused dSwiGLU backward vs PyTorch, {_where(record)}{dry}; "
        "dashed: target; floors: H200 baselines, bench/README.md (790 TFLOP/s, 4.3 TB/s)",
    )


def bound_ratios_png(
    record: dict[str, Any], panels: Sequence[tuple[str, str, float]], title: str
) -> bytes:
    """A chart as PNG bytes: one panel per (ratio, panel title, bound) of ``panels``, a bar
    per shape of ``record`` (higher is better, the bound dashed), ``title`` above with the
    run's GPU and commit."""
    shapes = record["shapes"]
    figure, axes = _pyplot().subplots(
        1, len(panels), figsize=(6.5 * len(panels), 4.8), constrained_layout=True, squeeze=False
    )
    for axis, (ratio, panel_title, bound) in zip(axes[0], panels):
        values = [s["ratios"][ratio] for s in shapes]
        _ratio_panel(axis, values, [bound] * len(shapes), lower_is_better=False)
        axis.set_title(f"{panel_title} (higher is better)", fontsize=10)
    return _png(figure, axes[0], shapes, f"{title}, {_where(record)}; dashed: target")
