"""Streams that ran at once, written for a simulator that runs one at a time.

ASTRA-sim runs at most one GPU compute node and one GPU communication node at a time per NPU
(``HardwareResource::is_available``; a receive is exempt). Kernels that overlapped on different
streams would run one after another there, each for its traced duration, and the replay would be
longer than the traced step by the time they overlapped. So, per resource, the kernels that
overlapped on two or more streams (*runs* of kernels whose traced intervals overlap, transitively)
are written so that each still **ends when it ended**:

- the kernels of a run are taken in the order they ended; each lasts from the later of its own
  start and the end of the kernel that ended before it, to its own end (``end - max(start,
  previous end)``), and
- where it started before that kernel ended, it depends on it (a dependency on the other stream).

The resource then runs the run's kernels back to back in the order they ended, each finishing at
its traced end time: everything that waited for one of them (the next kernel of its stream, a
kernel of another stream, a synchronising call, a collective) is released when it was in the
trace, so the traced critical path is kept. What is lost is only how the overlapped kernels
shared the GPU (a kernel that started first and ended last is written as the time it ran after
the others ended), which a replay does not need and a roofline recomputes anyway.

Nodes keep their ids unless such a dependency names a later node (a kernel launched after the
one that depends on it); then the graph is renumbered in a stable topological order (each node
keeps its place unless it must move after what it now depends on), so that dependencies still
name earlier nodes. Durations are whole microseconds, between rounded timestamps.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class _Node(Protocol):
    id: int
    dur: int
    deps: list[int]


@dataclass
class Span:
    """A GPU node as traced: its node, start and end (microseconds from the step's start), stream."""

    node: _Node
    start: float
    end: float
    stream: Any


@dataclass
class OverlapSummary:
    """What ``serialise`` did, per resource ("compute", "communication")."""

    runs: dict[str, int]
    kernels: dict[str, int]
    traced_us: dict[str, float]  # the overlapped kernels' traced durations, summed
    written_us: dict[str, int]  # ... as written
    renumbered: bool = False

    @property
    def any(self) -> bool:
        return any(self.runs.values())

    def describe(self) -> str:
        parts = [
            f"{self.kernels[r]:,} {r} kernels overlapped on several streams ({self.runs[r]:,} runs, "
            f"{self.traced_us[r] / 1000:,.3f} ms of kernel time): written to end when they ended, one after "
            f"another ({self.written_us[r] / 1000:,.3f} ms)"
            for r in self.runs
            if self.runs[r]
        ]
        return "; ".join(parts)


def serialise(resources: dict[str, list[Span]], rt: Any) -> tuple[OverlapSummary, list[tuple[_Node, int]]]:
    """Rewrite, per resource, the kernels that overlapped on different streams (module docstring):
    durations in place; returns what was done and the dependencies added ``(node, on node id)``.
    ``rt``: a time (us from the step's start) -> rounded microseconds."""
    summary = OverlapSummary({}, {}, {}, {})
    added: list[tuple[_Node, int]] = []
    for resource, spans in resources.items():
        runs = kernels = written = 0
        traced = 0.0
        for run in _runs(sorted(spans, key=lambda s: (s.start, s.end))):
            runs += 1
            kernels += len(run)
            traced += sum(s.end - s.start for s in run)
            run.sort(key=lambda s: (s.end, s.start, s.node.id))
            for before, span in itertools.pairwise(run):
                begin = max(span.start, before.end)
                span.node.dur = max(0, rt(span.end) - rt(begin))
                if span.start < before.end and before.stream != span.stream and before.node.id not in span.node.deps:
                    span.node.deps.append(before.node.id)
                    added.append((span.node, before.node.id))
            run[0].node.dur = max(0, rt(run[0].end) - rt(run[0].start))
            written += sum(s.node.dur for s in run)
        summary.runs[resource] = runs
        summary.kernels[resource] = kernels
        summary.traced_us[resource] = traced
        summary.written_us[resource] = written
    return summary, added


def _runs(spans: list[Span]) -> list[list[Span]]:
    """Runs of spans (sorted by start) that overlap transitively, on two or more streams."""
    found: list[list[Span]] = []
    run: list[Span] = []
    run_end = float("-inf")
    for span in spans:
        if run and span.start < run_end:
            run.append(span)
            run_end = max(run_end, span.end)
            continue
        if len({s.stream for s in run}) > 1:
            found.append(run)
        run, run_end = [span], span.end
    if len({s.stream for s in run}) > 1:
        found.append(run)
    return found


def stable_order(nodes: Sequence[_Node]) -> list[int] | None:
    """Positions of ``nodes`` (ids 1..N in list order) in a topological order that keeps each node
    where it is unless a dependency names a later node; None where the dependencies have a cycle."""
    count = len(nodes)
    waiting = [0] * count
    users: list[list[int]] = [[] for _ in range(count)]
    for position, node in enumerate(nodes):
        for dep in node.deps:
            waiting[position] += 1
            users[dep - 1].append(position)
    ready = [p for p in range(count) if not waiting[p]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        position = heapq.heappop(ready)
        order.append(position)
        for user in users[position]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, user)
    return order if len(order) == count else None
