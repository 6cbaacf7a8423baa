"""How long ASTRA-sim will take over a full job that no reduced job stands for: an estimate from
its nodes and its collectives' messages times its ranks, for the warning that says it runs full.

ASTRA-sim's analytical backend is an event simulator: each rank's nodes are events, and each chunk
of a ring collective over g ranks is up to 2(g-1) messages a rank, of a ring all-to-all g(g-1)/2
(``Ring.cc``); a job of N ranks is N x (nodes + splits x (collectives x 2(g-1) + all-to-alls x
g(g-1)/2)) events. ``SECONDS_PER_EVENT`` is the wall time one took here: 2.1 us (TP 2 x FSDP at
1,024 ranks, 140 s) and 3.3 us (the all-to-all job at 256 ranks, 224 s) on this shared 2-core
machine at a load of about 10 (bench/results/reduced_layouts.md, reduced_all_to_all.md); 0.6 us
on a quiet one (the DDP job of 8,192 ranks, 683 s: docs/reduced.md).
"""

from __future__ import annotations

from ..et.decode import read_et
from ..schema.chakra import CollectiveCommType, NodeType
from .job import Job

SECONDS_PER_EVENT = 2e-6


def full_job_seconds(job: Job, ranks: int, group: int, splits: int) -> tuple[float, int, int]:
    """(seconds, nodes, collectives) of ``job`` (K captured ranks) run as ``ranks`` ranks, its
    collectives over groups of about ``group`` ranks: the busiest captured rank's counts."""
    nodes = events = collectives = 0
    steps, exchange = 2 * max(1, group - 1), group * max(1, group - 1) // 2
    for rank in range(job.ranks):
        trace = read_et(job.rank_file(rank))
        kinds = [
            attrs.get("comm_type")
            for row, attrs in trace.comm.items()
            if trace.types[row] == NodeType.COMM_COLL_NODE
            and attrs.get("comm_type") != int(CollectiveCommType.BROADCAST)
        ]
        a2a = kinds.count(int(CollectiveCommType.ALL_TO_ALL))
        nodes, collectives = max(nodes, len(trace)), max(collectives, len(kinds))
        events = max(events, len(trace) + splits * ((len(kinds) - a2a) * steps + a2a * exchange))
    return ranks * events * SECONDS_PER_EVENT, nodes, collectives


def duration(seconds: float) -> str:
    """``seconds`` for people: "40 s", "12 min", "3.5 h", "2.1 days"."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
