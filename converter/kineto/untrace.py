"""The profiler's time taken out of a Kineto graph's host timeline (``converter/overhead.py``).

The host timeline tiles the step: each recorded op's node (``cpu_op``, ``user_annotation``,
``ProfilerStep#N``) and runtime call's node charges its cost, and every recorded node and
``[host gap]`` from there on pays it; a ``(wait)`` node (the host waiting for the GPU, which
forgives what is still owed), the GPU nodes and the communication nodes keep their traced
durations. A host node the correction leaves at zero stays in the graph (every rank keeps the
same nodes and ids, which ``compare`` and ``--ranks-as`` match); ``--compact`` merges no run
across it (ASTRA-sim gives it a cycle).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

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
    step: Callable[[Sequence[int]], float] | None = None
    if model.target_us is not None or model.spread:  # a calibration: off the step's critical path; else how sure
        where = _positions(graph)
        step = partial(step_estimate(graph), [where[node.id] for node in nodes])
    durations, removed = overhead.untrace(timeline, model, step=step)
    for node, duration in zip(nodes, durations, strict=True):
        node.dur = duration
    return removed


#: ``overhead.critical_path``'s resources
_CPU, _GPU, _COMM = 0, 1, 2


def _positions(graph: KinetoGraph) -> dict[int, int]:
    return {node.id: i for i, node in enumerate(graph.nodes)}


def step_estimate(graph: KinetoGraph) -> Callable[[Sequence[int], Sequence[int]], float]:
    """The graph's step as ASTRA-sim replays it (``overhead.critical_path``), for new durations
    of some of its nodes (by position)."""
    position = _positions(graph)
    nodes = graph.nodes
    return overhead.critical_path(
        [node.dur for node in nodes],
        [[position[d] for d in node.deps] for node in nodes],
        [_COMM if node.comm is not None else _CPU if node.cpu else _GPU for node in nodes],
    )
