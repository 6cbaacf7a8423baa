"""The profiler's time taken out of a Kineto graph's host timeline (``converter/overhead.py``).

The host timeline tiles the step: each recorded op's node (``cpu_op``, ``user_annotation``,
``ProfilerStep#N``) and runtime call's node charges its cost, and every recorded node and
``[host gap]`` from there on pays it; a ``(wait)`` node (the host waiting for the GPU, which
forgives what is still owed), the GPU nodes and the communication nodes keep their traced
durations. A host node the correction leaves at zero is taken out of the graph (its dependents
depend on what it depended on, and the ids close up): ASTRA-sim would still give it a cycle, and
``--compact`` could merge no run across it.
"""

from __future__ import annotations

from .. import overhead
from .events import KinetoEvents
from .graph import GAP_NAME, KinetoGraph, Node

WAIT_SUFFIX = " (wait)"


def tracing(events: KinetoEvents) -> overhead.Tracing:
    """The tracing a Kineto trace records: ``record_shapes`` (its top-level flag); a Kineto trace
    does not say whether an ExecutionTraceObserver ran beside it."""
    return overhead.Tracing(observer=False, record_shapes=events.record_shapes)


def apply(graph: KinetoGraph, model: overhead.Model) -> overhead.Removed:
    recorded = graph.recorded
    nodes: list[Node] = []
    timeline: list[tuple[int, int]] = []
    for node in graph.nodes:
        if not node.cpu:
            continue
        runtime = recorded.get(node.id)
        if runtime is not None:
            kind = overhead.CALL if runtime else overhead.OP
        elif node.name == GAP_NAME:
            kind = overhead.GAP
        elif node.name.endswith(WAIT_SUFFIX):
            kind = overhead.WAIT
        else:
            continue
        nodes.append(node)
        timeline.append((node.dur, kind))
    durations, removed = overhead.untrace(timeline, model)
    emptied: set[int] = set()
    for node, duration in zip(nodes, durations, strict=True):
        if node.dur and not duration:
            emptied.add(node.id)
        node.dur = duration
    if emptied:
        graph.nodes, new_id = _without(graph.nodes, emptied)
        graph.recorded = {}  # ids changed; the correction is done
        graph.streams = {new_id[old]: stream for old, stream in graph.streams.items() if old in new_id}
    return removed


def _without(nodes: list[Node], emptied: set[int]) -> tuple[list[Node], dict[int, int]]:
    """``nodes`` less ``emptied``: each dependency on a removed node replaced by that node's own
    (already resolved: dependencies name earlier nodes), ids renumbered from 1 in order; and the
    new id of each node kept."""
    inherited: dict[int, list[int]] = {}
    new_id: dict[int, int] = {}
    kept: list[Node] = []
    for node in nodes:
        deps: list[int] = []
        for dep in node.deps:
            for target in inherited[dep] if dep in inherited else (new_id[dep],):
                if target not in deps:
                    deps.append(target)
        if node.id in emptied:
            inherited[node.id] = deps
            continue
        new_id[node.id] = node.id = len(kept) + 1
        node.deps = deps
        kept.append(node)
    return kept, new_id
