"""How long ASTRA-sim will take over a full job that no reduced job stands for: an estimate from
its nodes and its collectives' messages times its ranks, for the warning that says it runs full.

ASTRA-sim's analytical backend is an event simulator: each rank's nodes are events, and each chunk
of a ring collective over g ranks is 2(g-1) messages a rank (``Ring.cc``); a job of N ranks is
N x (nodes + collectives x splits x 2 g) events. ``SECONDS_PER_EVENT`` is the wall time one took
here (bench/results/reduced_layouts.md's full runs: 0.3-0.8 us on this shared 2-core machine).
"""

from __future__ import annotations

from ..et.decode import read_et
from ..schema.chakra import CollectiveCommType, NodeType
from .job import Job

SECONDS_PER_EVENT = 5e-7


def full_job_seconds(job: Job, ranks: int, group: int, splits: int) -> tuple[float, int, int]:
    """(seconds, nodes, collectives) of ``job`` (K captured ranks) run as ``ranks`` ranks, its
    collectives over groups of about ``group`` ranks: the busiest captured rank's counts."""
    nodes = collectives = 0
    for rank in range(job.ranks):
        trace = read_et(job.rank_file(rank))
        nodes = max(nodes, len(trace))
        collectives = max(
            collectives,
            sum(
                1
                for row, attrs in trace.comm.items()
                if trace.types[row] == NodeType.COMM_COLL_NODE
                and attrs.get("comm_type") != int(CollectiveCommType.BROADCAST)
            ),
        )
    events = ranks * (nodes + collectives * splits * 2 * max(1, group - 1))
    return events * SECONDS_PER_EVENT, nodes, collectives


def duration(seconds: float) -> str:
    """``seconds`` for people: "40 s", "12 min", "3.5 h", "2.1 days"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
