"""The sweep's plot: simulated step time and communication share against ranks, a line per network.

matplotlib is an optional extra (``pip install 'chakra-convert-fast[plot]'``), imported only when a
sweep draws its plot, as ``convert-all --ray`` imports Ray (``import matplotlib.pyplot`` takes
about half a second, which every other command would pay); without it a sweep fails at once,
before any simulation, with one line saying how to install it.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

from ..plotlib import INSTALL as INSTALL
from ..plotlib import pyplot as pyplot


def step_axis_label(low: float, high: float) -> str:
    """The step axis's label: its range, and whether it starts at 0 (a narrow range magnifies
    small differences: 2,879 to 2,889 ms looks like a slope)."""
    return f"simulated step (ms)\naxis {low:,.5g} to {high:,.5g} ms" + (", not from 0" if low > 0 else "")


def sweep_png(
    lines: Mapping[str, Sequence[tuple[float, float, float]]],
    title: str,
    x_label: str = "ranks",
    log_x: bool = True,
    tick_labels: Sequence[str] | None = None,
) -> bytes:
    """A PNG of ``lines``: per line name, (x, step in ms, communication share 0..1) points (x at
    1, 2, ... with ``tick_labels`` for values that are names). The step axis states its range,
    and that it does not start at 0 where it does not."""
    plt = pyplot()
    figure: Any
    figure, (step_axis, share_axis) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=90)
    for name, points in lines.items():
        ranks = [p[0] for p in points]
        step_axis.plot(ranks, [p[1] for p in points], marker="o", label=name)
        share_axis.plot(ranks, [100 * p[2] for p in points], marker="o", label=name)
    ticks = sorted({p[0] for points in lines.values() for p in points})
    step_label = step_axis_label(*step_axis.get_ylim())
    for axis, label in ((step_axis, step_label), (share_axis, "communication (% of the step)")):
        if log_x and min(ticks) > 0:
            axis.set_xscale("log", base=2)
        axis.set_xticks(ticks, list(tick_labels) if tick_labels is not None else [f"{t:,g}" for t in ticks])
        axis.minorticks_off()
        axis.set_xlabel(x_label)
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
    share_axis.set_ylim(bottom=0)
    step_axis.legend(fontsize="small")
    figure.suptitle(title, fontsize="medium")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    return buffer.getvalue()
