"""A PNG of the two ratios per shape, with the issue's targets drawn in."""

from __future__ import annotations

import io
from typing import Any

# (ratio, panel title, whether lower is better)
PANELS = (
    ("fused_over_gemm", "fused / grouped GEMM only (lower is better)", True),
    ("compiled_over_fused", "(grouped GEMM + compiled epilogue) / fused (higher is better)", False),
)
MET_COLOR, MISSED_COLOR, NO_TARGET_COLOR, TARGET_COLOR = "tab:green", "tab:red", "tab:gray", "black"


def _target_bound(shape: dict[str, Any], ratio: str) -> float | None:
    if ratio == "fused_over_gemm":
        return 1.0
    return shape["shape"]["speedup_target"]


def _color(value: float, bound: float | None, lower_is_better: bool) -> str:
    if bound is None:
        return NO_TARGET_COLOR
    met = value <= bound if lower_is_better else value >= bound
    return MET_COLOR if met else MISSED_COLOR


def ratios_png(record: dict[str, Any]) -> bytes:
    """The chart as PNG bytes: one panel per ratio, a bar per shape (green where its
    target is met, red where missed, gray where it has none, "n/a" where not measured),
    each target a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    shapes = record["shapes"]
    names = [s["shape"]["name"] for s in shapes]
    figure, axes = pyplot.subplots(1, len(PANELS), figsize=(13, 4.8), constrained_layout=True)
    for axis, (ratio, title, lower_is_better) in zip(axes, PANELS):
        for x, shape in enumerate(shapes):
            value, bound = shape["ratios"][ratio], _target_bound(shape, ratio)
            if value is None:
                axis.text(x, 0.02, "n/a", ha="center", transform=axis.get_xaxis_transform())
                continue
            axis.bar(x, value, color=_color(value, bound, lower_is_better))
            axis.annotate(f"{value:.2f}x", (x, value), ha="center", va="bottom", fontsize=8)
            if bound is not None:
                axis.hlines(bound, x - 0.4, x + 0.4, colors=TARGET_COLOR, linestyles="dashed")
        axis.set_title(title, fontsize=10)
        axis.set_xticks(range(len(names)), names, rotation=25, ha="right", fontsize=8)
        axis.set_ylabel("ratio of median times")
    environment = record["environment"]
    gpu = (environment.get("gpu") or {}).get("name", "no GPU")
    dry = " (DRY RUN: fake timings)" if record["dry_run"] else ""
    figure.suptitle(
        f"dglu fused dSwiGLU backward vs PyTorch, {gpu}, commit {environment['commit']}{dry}; "
        "dashed: target",
        fontsize=10,
    )
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    pyplot.close(figure)
    return buffer.getvalue()
