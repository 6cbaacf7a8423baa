"""``compare --plot``: the per-lane and per-class times of both sides as paired horizontal bars
(matplotlib, the ``plot`` extra: ``simulate/plot.py`` imports it)."""

from __future__ import annotations

import io

from ..plotlib import pyplot
from . import Comparison, Row

_SHOWN = 14  # bars per panel


def comparison_png(comparison: Comparison) -> bytes:
    """The PNG: per lane (time busy) and per op class (total time), A and B side by side, the rows
    that differ most first."""
    plt = pyplot()
    panels = [
        (f"per stream: time busy (ms), rank {comparison.rank_a} / {comparison.rank_b}", comparison.lanes[:_SHOWN]),
        ("per op class: total time (ms)", comparison.classes[:_SHOWN]),
    ]
    heights = [max(2.0, 0.35 * len(rows) + 1.2) for _, rows in panels]
    figure, axes = plt.subplots(2, 1, figsize=(10, sum(heights)), gridspec_kw={"height_ratios": heights})
    for axis, (title, rows) in zip(axes, panels, strict=True):
        _bars(axis, rows)
        axis.set_title(title, fontsize=10)
    step = comparison.step
    figure.suptitle(
        f"A: {comparison.a.path} ({comparison.a.kind}) {_ms(step.a)} ms\n"
        f"B: {comparison.b.path} ({comparison.b.kind}) {_ms(step.b)} ms",
        fontsize=9,
    )
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def _bars(axis: object, rows: list[Row]) -> None:
    labels = [row.key if len(row.key) <= 48 else row.key[:45] + "..." for row in rows][::-1]
    a = [(row.a or 0.0) / 1000 for row in rows][::-1]
    b = [(row.b or 0.0) / 1000 for row in rows][::-1]
    places = range(len(rows))
    axis.barh([p + 0.2 for p in places], a, height=0.4, label="A", color="#4c72b0")  # type: ignore[attr-defined]
    axis.barh([p - 0.2 for p in places], b, height=0.4, label="B", color="#dd8452")  # type: ignore[attr-defined]
    axis.set_yticks(list(places))  # type: ignore[attr-defined]
    axis.set_yticklabels(labels, fontsize=7)  # type: ignore[attr-defined]
    axis.legend(fontsize=8)  # type: ignore[attr-defined]
    axis.grid(axis="x", alpha=0.3)  # type: ignore[attr-defined]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:,.3f}"
