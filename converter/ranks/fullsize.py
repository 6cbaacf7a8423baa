"""A job traced on fewer ranks than it ran on (rank 0 alone, say): the size to simulate it at."""

from __future__ import annotations

import os

from ..errors import ConverterError
from .jobsize import et_world_size
from .scale import find_ranks


def recorded_size(prefix: str) -> tuple[int | None, str | None]:
    """The job's recorded size (``world_size`` of its rank 0) where its rank files are fewer and
    divide it (each a data-parallel copy of a captured rank), with a note saying so; (None, None)
    otherwise. Anything unreadable is left to the simulation's checks."""
    try:
        inputs = find_ranks(prefix)
        world = et_world_size(inputs[0])
    except ConverterError:
        return None, None
    if world is None or world <= len(inputs) or world % len(inputs):
        return None, None
    return world, (
        f"{prefix}: {len(inputs)} rank file(s) of a job of {world} ranks (world_size in "
        f"{os.path.basename(inputs[0])}): simulated at its size, each rank a copy of a captured one, "
        f"as `ranks` {world} does"
    )
