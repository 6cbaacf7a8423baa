"""``memory --plot``: each rank's live bytes over the traced step, the capacity as a line."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from ..io import atomic_output, check_output
from ..plotlib import pyplot
from .profile import RankMemory

_MIB = 1 << 20


def timeline_png(path: str, ranks: Sequence[RankMemory], capacity: int | None, inputs: Sequence[str] = ()) -> None:
    """Write the PNG at ``path`` (checked first, against ``inputs`` too; written whole or not at all)."""
    target = check_output(path, *inputs)
    plt = pyplot()
    figure: Any
    figure, axis = plt.subplots(figsize=(9, 4), dpi=90)
    units = {m.timeline_unit for m in ranks}
    for m in ranks[:16]:
        xs, ys = [x for x, _ in m.timeline], [b / _MIB for _, b in m.timeline]
        axis.plot(xs, ys, label=f"rank {m.rank}", lw=1, drawstyle="steps-post")
    if capacity is not None:
        axis.axhline(capacity / _MIB, color="red", ls="--", label=f"capacity {capacity / _MIB:,.0f} MiB")
    axis.set_xlabel("ms from the traced window's start" if units == {"ms"} else "place in the step (0 to 1)")
    axis.set_ylabel("allocated (MiB)")
    axis.set_ylim(bottom=0)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")
    sources = ", ".join(sorted({m.source for m in ranks}))
    axis.set_title(f"memory over the traced step ({sources}; {len(ranks)} rank(s))", fontsize="medium")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    plt.close(figure)
    with atomic_output(target) as out:
        out.write(buffer.getvalue())
