"""A CPU job's collectives without the waiting its capture recorded in them (``convert-all`` with
``astra_sim``; ``docs/overhead.md``).

A gloo collective runs on the rank's own thread, so its traced duration is the time the rank spent
in it: the transfer, and before it the wait for the last rank of the group to arrive. Which rank
arrives last in the traced step is capture noise (a rank descheduled on a shared machine, the
profiler's own work on the other rank), and ASTRA-sim's ``replay-only`` replays it twice: it waits
for the last rank of the group by itself, then replays the node's traced duration, the recorded
wait included, as transfer. The rank that arrived last waited least: its duration is the transfer.
``even_waits`` gives the n-th collective of each group, on every rank of it, the least traced
duration any of its ranks took.

Only a job of CPU ranks (every compute node a CPU op): a GPU kernel's time (NCCL's) is CUPTI's,
and what it waited for is other streams' work as much as other ranks'. A group whose ranks hold
different collectives (count, type or size at a position) is left as traced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..et.decode import CPU_OP_TRUE, EtTrace, read_et
from ..et.records import rewrite_nodes
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import NodeType
from . import imbalance

_COLL = int(NodeType.COMM_COLL_NODE)
_COMP = int(NodeType.COMP_NODE)


@dataclass(frozen=True)
class Waits:
    """What ``even_waits`` took out: the collectives evened, and per rank (``ranks``, in
    ``paths``' order) the microseconds of traced waiting taken out of its collectives."""

    collectives: int
    removed_us: tuple[int, ...]
    ranks: tuple[int, ...]

    def line(self) -> str:
        """The one line ``convert-all`` says."""
        most = max(range(len(self.removed_us)), key=lambda i: (self.removed_us[i], -i))
        return (
            f"collective waits: {self.collectives:,} collectives take the least traced duration of their ranks "
            f"({sum(self.removed_us) / 1000:,.1f} ms of waiting for peers taken out, "
            f"{self.removed_us[most] / 1000:,.1f} ms of it rank {self.ranks[most]}'s): recorded while traced, "
            "ASTRA-sim's replay waits by itself; --tracing-overhead none keeps them"
        )


def cpu_job(trace: EtTrace) -> bool:
    """Every compute node of the rank a CPU op: no GPU kernel."""
    return all(trace.cpu_ops[r] == CPU_OP_TRUE for r in range(len(trace)) if trace.types[r] == _COMP)


def _collectives(trace: EtTrace) -> dict[str, list[tuple[int, tuple[object, object], int]]]:
    """Per group, (row, (comm_type, comm_size), duration) of each collective node, in node order."""
    out: dict[str, list[tuple[int, tuple[object, object], int]]] = {}
    for row in sorted(trace.comm, key=lambda r: trace.ids[r]):
        if trace.types[row] != _COLL:
            continue
        attrs = trace.comm[row]
        group = str(attrs.get("pg_name", "") or "")
        group = "0" if group in ALL_RANKS_GROUPS else group
        out.setdefault(group, []).append((row, (attrs.get("comm_type"), attrs.get("comm_size")), trace.durations[row]))
    return out


def even_waits(paths: Sequence[str], ranks: Sequence[int] | None = None) -> Waits | None:
    """Rewrite the ``.et`` files ``paths`` (one per rank, ``ranks``: which, default 0..; in place)
    so that each group's n-th collective takes, on every rank of it, the least traced duration of
    its ranks; None where it
    does not apply (one rank, or a rank with a GPU kernel). Raises ``TraceFormatError`` for a file
    that does not decode, ``OutputError`` where one cannot be rewritten."""
    if len(paths) < 2:
        return None
    per_rank = []
    for path in paths:  # one rank's trace in memory at a time
        trace = read_et(path)
        if not cpu_job(trace):
            return None
        per_rank.append(_collectives(trace))
    changes: list[dict[int, int]] = [{} for _ in paths]
    removed = [0] * len(paths)
    evened = 0
    for group in sorted({group for found in per_rank for group in found}):
        members = [i for i, found in enumerate(per_rank) if group in found]
        if len(members) < 2 or len({len(per_rank[i][group]) for i in members}) != 1:
            continue
        for position in range(len(per_rank[members[0]][group])):
            nodes = [per_rank[i][group][position] for i in members]
            if len({kind for _, kind, _ in nodes}) != 1:
                continue  # not one collective: left as traced
            least = min(duration for _, _, duration in nodes)
            evened += 1
            for i, (row, _, duration) in zip(members, nodes, strict=True):
                if duration != least:
                    changes[i][row] = least
                    removed[i] += duration - least
    for path, changed in zip(paths, changes, strict=True):
        if changed:
            rewrite_nodes(path, changed, imbalance.with_duration, ".waits")
    named = tuple(ranks) if ranks is not None else tuple(range(len(paths)))
    return Waits(evened, tuple(removed), named) if evened else None
