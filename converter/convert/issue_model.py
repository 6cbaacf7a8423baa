"""The reference's toy issue model behind ``--simulate``, driven by events instead of a 1-us clock.

The reference ticks a global clock one microsecond at a time: each tick it issues the next ready
CPU op if the CPU is idle and, for each idle GPU stream, the first ready kernel of that stream;
it then advances the clock, retires ops that have run their duration (at least one tick), and
releases the children of the ops *issued* in that tick (not completed: its model, kept as is).
A tick that issues nothing changes nothing until the next op retires, so we jump straight there.
Issue order, ready-queue order and the set iteration that orders releases are reproduced, so
every op is issued at the same time as in the reference.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class IssueModelInput:
    """Nodes in the reference's node-map order, with dependencies as positions in that order."""

    ids: Sequence[int]
    deps: Sequence[Sequence[int]]
    is_gpu: Sequence[bool]
    durations: Sequence[int]
    streams: Sequence[Any]


@dataclass
class IssueModelResult:
    end_time_us: int = 0
    issued: list[tuple[int, int]] = field(default_factory=list)  # (node id, issue time), in issue order


def run_issue_model(graph: IssueModelInput) -> IssueModelResult:
    """Run the reference's model; returns the end time and every (node id, issue time)."""
    state = _State(graph)
    result = IssueModelResult()
    now = 0
    while state.busy():
        issued = state.issue(now, result)
        if not issued:  # nothing changes before the next op retires: jump there
            now = max(now, state.next_finish() - 1)
        now += 1
        state.retire(now)
        state.release(issued)
    result.end_time_us = now
    return result


class _State:
    """Ready queues and running ops; mirrors the reference's lists, dict and set."""

    def __init__(self, graph: IssueModelInput) -> None:
        self.graph = graph
        size = len(graph.ids)
        self.position = {node_id: pos for pos, node_id in enumerate(graph.ids)}
        self.children: list[list[int]] = [[] for _ in range(size)]
        self.waiting = [len(deps) for deps in graph.deps]
        for node, deps in enumerate(graph.deps):
            for dep in deps:
                self.children[dep].append(node)
        by_id = sorted(range(size), key=graph.ids.__getitem__)
        self.ready_cpu = deque(n for n in by_id if not self.waiting[n] and not graph.is_gpu[n])
        self.gpu_queues: dict[Any, deque[tuple[int, int]]] = {}
        self.sequence = 0  # position in the reference's single ready-GPU list
        for node in by_id:
            if not self.waiting[node] and graph.is_gpu[node]:
                self._ready_gpu(node)
        self.cpu: tuple[int, int] | None = None  # (node, finish time)
        self.running_gpu: dict[Any, tuple[int, int]] = {}  # stream -> (node, finish time)

    def _ready_gpu(self, node: int) -> None:
        self.gpu_queues.setdefault(self.graph.streams[node], deque()).append((self.sequence, node))
        self.sequence += 1

    def busy(self) -> bool:
        return bool(self.ready_cpu or self.cpu or self.running_gpu or any(self.gpu_queues.values()))

    def _finish(self, node: int, now: int) -> int:
        return now + max(self.graph.durations[node], 1)  # retired on the first tick >= duration

    def issue(self, now: int, result: IssueModelResult) -> set[int]:
        """Issue the next CPU op and the head of every idle stream; returns the issued ids."""
        issued: set[int] = set()  # a set, as in the reference: its order orders the releases
        ids = self.graph.ids
        if self.ready_cpu and self.cpu is None:
            node = self.ready_cpu.popleft()
            self.cpu = (node, self._finish(node, now))
            issued.add(ids[node])
            result.issued.append((ids[node], now))
        heads = sorted(q[0] for s, q in self.gpu_queues.items() if q and s not in self.running_gpu)
        for _, node in heads:
            stream = self.graph.streams[node]
            self.gpu_queues[stream].popleft()
            self.running_gpu[stream] = (node, self._finish(node, now))
            issued.add(ids[node])
            result.issued.append((ids[node], now))
        return issued

    def next_finish(self) -> int:
        finishes = [finish for _, finish in self.running_gpu.values()]
        if self.cpu is not None:
            finishes.append(self.cpu[1])
        return min(finishes)

    def retire(self, now: int) -> None:
        if self.cpu is not None and now >= self.cpu[1]:
            self.cpu = None
        for stream in [s for s, (_, finish) in self.running_gpu.items() if now >= finish]:
            del self.running_gpu[stream]

    def release(self, issued: set[int]) -> None:
        """Children whose last dependency was issued this tick become ready."""
        for node_id in list(issued):
            for child in self.children[self.position[node_id]]:
                self.waiting[child] -= 1
                if not self.waiting[child]:
                    if self.graph.is_gpu[child]:
                        self._ready_gpu(child)
                    else:
                        self.ready_cpu.append(child)
