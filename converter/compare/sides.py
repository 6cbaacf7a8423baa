"""One side of a comparison: a Kineto trace (a file, or a folder of one per rank) or a simulated
run (the Chrome trace ``simulate --timeline`` writes), read into what ran where and when, per rank.

A trace is read as the Kineto front end reads it (``kineto/graph.py``, with ``convert``'s default
options): the step, its host timeline (every thread merged, as ASTRA-sim runs it; a node lasts to
the next host event's start or its own end) and its GPU ops, each with its stream and its traced
start and end (whatever the graph writes for kernels that overlapped on several streams).
A simulated run is read from its timeline: each node's simulated start and end; where the trace
it came from is on the other side, each node id is looked up in that trace's graph, so a simulated
node has the same name, stream and class as the traced op it replays (a job scaled from fewer
traced ranks: simulated rank r is traced rank r mod K, as ``scale`` writes it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ..errors import TraceFormatError
from ..io.read import check_input, open_trace
from ..kineto import trace_rank
from ..kineto.events import KinetoEvents, read_events
from ..kineto.graph import CARRY_IN_NAME, KinetoGraph, Node, build
from .classes import COMMUNICATION, CPU, GPU_COMPUTE, op_class

#: The key of a ``simulate --timeline`` file's ``otherData`` that says it is one.
SIMULATED = "simulated"
TRACE, SIMULATION = "trace", "simulation"


@dataclass(frozen=True)
class Op:
    """One op as it ran: lane (a stream, ``CPU``, ...), resource, class, name, start and end (us
    from the step's start), and whether it is a collective (for the transfer/waiting split)."""

    lane: str
    resource: str
    klass: str
    name: str
    start: float
    end: float
    collective: bool = False


@dataclass
class RankRun:
    rank: int
    step_us: float
    ops: list[Op] = field(default_factory=list)


@dataclass
class Side:
    path: str
    kind: str  # TRACE or SIMULATION
    ranks: dict[int, RankRun]
    step: int | None = None  # the ProfilerStep of a trace
    graphs: dict[int, KinetoGraph] = field(default_factory=dict, repr=False)  # a trace's, per rank
    events: dict[int, KinetoEvents] = field(default_factory=dict, repr=False)  # ... and its events
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        what = f"ProfilerStep#{self.step}" if self.step is not None else "simulated"
        return f"{self.path} ({self.kind}, {what}, {len(self.ranks)} rank(s))"


def is_timeline(path: str) -> bool:
    """Whether ``path`` is a ``simulate --timeline`` file (its head names ``otherData.simulated``)."""
    with open_trace(path) as handle:
        head = handle.read(4096)
    return f'"otherData": {{"{SIMULATED}"'.encode() in head


def read_side(path: str, step: int | None = None) -> Side:
    """A trace file or folder of traces, or a simulated run's timeline."""
    if os.path.isdir(path):
        files = sorted(
            os.path.join(path, name)
            for name in os.listdir(path)
            if name.endswith((".json", ".json.gz")) and os.path.isfile(os.path.join(path, name))
        )
        if not files:
            raise TraceFormatError(path, "holds no .json or .json.gz trace")
        return _traces(path, files, step)
    check_input(path)
    if is_timeline(path):
        return _timeline(path)
    return _traces(path, [path], step)


def _traces(path: str, files: list[str], step: int | None) -> Side:
    side = Side(path, TRACE, {})
    for index, file in enumerate(files):
        events = read_events(file)
        rank = trace_rank(events)
        rank = index if rank is None else rank
        if rank in side.ranks:
            raise TraceFormatError(file, f"is rank {rank} too (two traces of one rank in {path})")
        graph = build(events, step, rank)
        if side.step is not None and graph.step != side.step:
            side.notes.append(f"{file}: ProfilerStep#{graph.step}, not #{side.step} as the other ranks")
        side.step = side.step if side.step is not None else graph.step
        side.graphs[rank] = graph
        side.events[rank] = events
        side.ranks[rank] = RankRun(rank, graph.measured_us, [_traced(graph, node) for node in graph.nodes])
    return side


def lane_of(graph: KinetoGraph, node: Node) -> tuple[str, str]:
    """(lane, resource) of a node of a trace's graph."""
    if node.cpu:
        return CPU, CPU
    resource = COMMUNICATION if node.comm is not None else GPU_COMPUTE
    stream = graph.streams.get(node.id)
    if stream is not None:
        return f"stream {stream[1]}", resource
    if node.name == CARRY_IN_NAME:
        return "GPU (before the step)", resource
    return "CPU communication", resource  # a gloo collective: no stream


def _traced(graph: KinetoGraph, node: Node) -> Op:
    lane, resource = lane_of(graph, node)
    klass = op_class(node.name, node.cpu, node.comm is not None)
    end = node.end - graph.step_start if node.id in graph.streams else node.start + node.dur  # a GPU op: as traced
    return Op(lane, resource, klass, node.name, node.start, end, node.comm is not None)


def _timeline(path: str) -> Side:
    try:
        with open_trace(path) as handle:
            document = json.loads(handle.read())
        events = document["traceEvents"]
        if not isinstance(events, list):
            raise TypeError("traceEvents is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceFormatError(path, f"not a timeline that simulate writes (its `timeline`): {exc}"[:300]) from None
    side = Side(path, SIMULATION, {})
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        try:
            rank, ts, dur = int(event["pid"]), float(event["ts"]), float(event["dur"])
            node_id = int(event["args"]["node"])
            name, kind = str(event["name"]), str(event["cat"])
        except (KeyError, TypeError, ValueError):
            raise TraceFormatError(path, f"an event is not one of a simulated node: {str(event)[:200]}") from None
        run = side.ranks.setdefault(rank, RankRun(rank, 0.0))
        run.step_us = max(run.step_us, ts + dur)
        run.ops.append(_Pending(node_id, name, kind, ts, ts + dur))  # type: ignore[arg-type]
    if not side.ranks:
        raise TraceFormatError(path, "holds no simulated node")
    side.ranks = dict(sorted(side.ranks.items()))
    return side


@dataclass(frozen=True)
class _Pending:
    """A simulated node before it is named from a trace's graph (``resolve``)."""

    node_id: int
    name: str
    kind: str
    start: float
    end: float


def resolve(side: Side, traced: Side | None) -> None:
    """Give a simulated side's nodes their lane, resource and class: from ``traced``'s graphs where
    the node ids fit them (same names), else from the timeline's kinds and the names alone."""
    fitted = 0
    total = 0
    serial = traced is not None and not _fits(side, traced)  # converted with --serial-streams?
    for rank, run in side.ranks.items():
        graph = _graph_for(traced, rank, serial)
        nodes = {n.id: n for n in graph.nodes} if graph is not None else {}
        ops: list[Op] = []
        for pending in run.ops:
            assert isinstance(pending, _Pending)
            total += 1
            node = nodes.get(pending.node_id)
            if graph is not None and node is not None and node.name == pending.name:
                fitted += 1
                lane, resource = lane_of(graph, node)
                klass = op_class(node.name, node.cpu, node.comm is not None)
                collective = node.comm is not None
            else:
                collective = pending.kind == "communication"
                lane = resource = COMMUNICATION if collective else pending.kind
                klass = op_class(pending.name, None, collective)
            ops.append(Op(lane, resource, klass, pending.name, pending.start, pending.end, collective))
        run.ops = ops
    if traced is not None and fitted < total:
        side.notes.append(
            f"{side.path}: {total - fitted:,} of {total:,} simulated nodes are not the nodes of {traced.path}'s "
            "ProfilerStep (another step, options or trace?): they are classed by their names alone"
        )


def _traced_rank(traced: Side, rank: int) -> int:
    ranks = sorted(traced.graphs)
    return rank if rank in traced.graphs else ranks[rank % len(ranks)]


def _graph_for(traced: Side | None, rank: int, serial: bool = False) -> KinetoGraph | None:
    """The graph of the traced rank that simulated ``rank`` replays; ``serial``: as converted with
    ``--serial-streams`` (built again)."""
    if traced is None or not traced.graphs:
        return None
    at = _traced_rank(traced, rank)
    graph = traced.graphs[at]
    if serial and graph.overlap is not None:
        return build(traced.events[at], traced.step, at, share_overlap=False)
    return graph


def _fits(side: Side, traced: Side) -> bool:
    """Whether the simulated nodes of ``side``'s first rank have the ids of the traced graph's."""
    rank, run = next(iter(side.ranks.items()))
    graph = _graph_for(traced, rank)
    assert graph is not None
    names = {n.id: n.name for n in graph.nodes}
    return all(names.get(p.node_id) == p.name for p in run.ops if isinstance(p, _Pending))
