"""The simulated run as a Chrome/Perfetto trace (``chrome://tracing``, https://ui.perfetto.dev):
a process per rank, and in it a track per kind of node (compute, communication, memory, ...),
each node an ``X`` event from its simulated start to its end (ticks are ns; the format's ``ts``
and ``dur`` are microseconds). Nodes of one kind that overlap in time go on further tracks of
that kind (``compute 2``, ...), so no track holds two events at once. Written as the nodes
complete: nothing but the tracks' ends is held.
"""

from __future__ import annotations

import json
from typing import IO

from .logs import Span


class TimelineWriter:
    def __init__(self, out: IO[str], ranks: int, title: str) -> None:
        self._out = out
        self._kinds: list[list[str]] = [[] for _ in range(ranks)]  # per rank, per track: its kind
        self._ends: list[list[int]] = [[] for _ in range(ranks)]  # ... and the end of its last event
        self.events = 0  # nodes written
        self._written = 0
        other = json.dumps({"simulated": title})
        out.write('{"displayTimeUnit": "ns", "otherData": ' + other + ',\n"traceEvents": [\n')

    def span(self, span: Span) -> None:
        # Spans come in the order they end, so a track's last end is the latest of all of its events.
        kind, kinds, ends = span.kind, self._kinds[span.rank], self._ends[span.rank]
        for index, (lane_kind, end) in enumerate(zip(kinds, ends, strict=True)):
            if lane_kind == kind and end <= span.start:
                ends[index] = span.end
                tid = index + 1
                break
        else:
            kinds.append(kind)
            ends.append(span.end)
            tid = len(kinds)
        event = {
            "name": span.name,
            "cat": kind,
            "ph": "X",
            "ts": span.start / 1000,
            "dur": (span.end - span.start) / 1000,
            "pid": span.rank,
            "tid": tid,
            "args": {"node": span.node_id, "type": span.node_type},
        }
        self._write(event)
        self.events += 1

    def _write(self, event: dict[str, object]) -> None:
        self._out.write(("" if self._written == 0 else ",\n") + json.dumps(event))
        self._written += 1

    def close(self) -> None:
        """The names of the processes (ranks) and tracks, and the end of the document."""
        meta: list[dict[str, object]] = []
        for rank, kinds in enumerate(self._kinds):
            meta.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
            meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "args": {"sort_index": rank}})
            seen: dict[str, int] = {}
            for index, kind in enumerate(kinds):
                seen[kind] = seen.get(kind, 0) + 1
                label = f"{kind}" if seen[kind] == 1 else f"{kind} {seen[kind]}"
                meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": index + 1, "args": {"name": label}})
        for item in meta:
            self._write(item)
        self._out.write("\n]}\n")
