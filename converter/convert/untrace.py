"""The profiler's time taken out of a host trace's CPU ops (``converter/overhead.py``), with
``--astra-sim``: the reference's output keeps every traced duration.

The written CPU ops, in id order (the order the observer recorded them: an op's id is given at
its entry), are the host timeline: each charges its cost, and pays what it can of what is owed
out of its duration (its exclusive time, as the reference writes it), down to 1 us
(``MIN_OP_US``). GPU kernels,
communication nodes and the ``gloo:`` work a collective node stands for keep theirs.

The figure is the user's, found from the calibration ``chakra-profile`` wrote beside the host
trace (``{name}_rank{N}_overhead.json``), measured in the trace itself by thread (``selfmeasure.py``,
each op charged its thread's figure), or the default model's (``overhead.choose``). Without a
calibration, on a GPU capture, the step is estimated at the figure and at its spread either way,
and the conversion says how sure its step is (``overhead.Removed.step_us``).

With a GPU: the per-op cost at which the graph's step, estimated as ASTRA-sim replays it (every
written node, the GPU's and the host's waits for the GPU of ``waits.py`` included), comes down to
the untraced step. This timeline is not the step's (it holds the ops' exclusive times, not the
time between the step's top-level ops), so the host time to take out is found on the estimate of
the step, not from the traced-minus-untraced difference.

Without a GPU (``cpu_capture``) the host *is* the step, and the calibration says how long the
rank's step took traced and untraced. The CPU ops are given the rank's untraced step outside its
collectives (``keep``): its traced step less its collectives' traced time, scaled by untraced /
traced. That takes the profiler's time out, and puts the time between the ops, which the replay
does not hold (Python between the ops, the batch's preparation), into them in proportion: taking
out only the profiler's share of the ops' own time left the replays 2-11% short
(``docs/overhead.md``). Each rank then replays its untraced step nearly by construction; what the
job's replay adds is the ranks' coupling in their collectives.
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from .. import overhead
from ..et import encode
from ..schema.chakra import COMM_NODE_TYPES, NodeType
from . import selfmeasure
from .graph import TraceGraph
from .writer import TailSpill

#: A host trace holds the observer's record of every op, with its inputs' shapes.
HOST_TRACING = overhead.Tracing(observer=True, record_shapes=True)
_COMP = int(NodeType.COMP_NODE)
_COMM = {int(NodeType.COMM_COLL_NODE), int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)}
#: What an op keeps of its traced duration (where it had that much): no op takes less untraced
#: (``tests/data/traces/gpu_h200/overhead.json``: ``aten::view``, 1.2 us a call untraced), and a
#: node left at zero would stop ``--compact`` merging across it (ASTRA-sim gives it a cycle).
MIN_OP_US = 1


def cpu_capture(graph: TraceGraph) -> bool:
    """A trace of a job that ran on CPUs alone: no GPU op (kernel, memcpy, memset) anywhere."""
    return not any(graph.is_gpu)


def keep(model: overhead.Model, host_us: int, comm_us: int) -> overhead.Model:
    """A calibrated model's target on a CPU capture's timeline: of ``host_us`` (the CPU ops'
    summed traced time), what is beyond the rank's untraced step outside its collectives
    (``comm_us``, their traced time): (traced - comm) x untraced / traced. Nothing where the ops
    hold less than that (time is only taken out)."""
    if model.target_us is None or not model.traced_us:
        return model
    traced = model.traced_us
    untraced = max(0.0, traced - model.target_us)
    kept = max(0.0, traced - comm_us) * untraced / traced
    said = f"the CPU ops keep {kept / 1000:,.1f} ms, the untraced step outside the collectives"
    if not model.target_us:  # the run's untraced steps were no faster: its machine's load changed
        said = "its traced step was no slower than its untraced ones (a noisy run): nothing to take out"
    target = max(0.0, host_us - kept)
    return replace(model, target_us=target, untraced_us=None, source=f"{model.source}: {said}")


def apply(graph: TraceGraph, spill: TailSpill, model: overhead.Model) -> overhead.Removed:
    """Take ``model``'s cost out of ``graph``'s CPU ops (their durations read from ``spill``);
    the new durations go to ``graph.duration_overrides``. A calibration (``model.untraced_us``)
    gets, on a GPU capture, the per-op cost at which the graph's step, estimated as ASTRA-sim
    replays it (``overhead.critical_path``), comes down to the untraced step; on a CPU capture,
    the CPU ops keep the untraced step outside the collectives (``keep``)."""
    types, is_gpu, skipped, replaced = graph.types, graph.is_gpu, graph.zero_duration, graph.tail_overrides
    written = list(graph.rows_by_id())
    host = [
        i
        for i, row in enumerate(written)
        if not is_gpu[row] and types[row] == _COMP and row not in skipped and row not in replaced
    ]
    step = None
    if model.untraced_us is not None and cpu_capture(graph):  # the host is the step
        traced = _durations(graph, spill, [written[i] for i in host])
        comm = sum(encode.duration_of(tail) for row, tail in replaced.items() if types[row] in _COMM)
        model = keep(model, sum(traced), comm)
    elif cpu_capture(graph) or (model.untraced_us is None and not model.spread):  # the CPU ops' durations alone
        traced = _durations(graph, spill, [written[i] for i in host])
    else:  # every written node's: the step is estimated on them all (to land on, or to say how sure)
        spread = graph.duration_overrides  # a parent's own time over its children (spread.py)
        every = [
            0 if row in skipped else spread.get(row, encode.duration_of(replaced.get(row) or tail))
            for row, tail in zip(written, spill.read_each(written), strict=True)
        ]
        traced = [every[i] for i in host]
        step = partial(_step_estimate(graph, written, every), host)
    costs = None
    if model.by_thread and model.target_us is None:  # a measured model: each op its thread's cost
        threads = selfmeasure.threads(graph, [written[i] for i in host])
        costs = array("d", (model.by_thread.get(thread, model.per_op_us) for thread in threads))
    durations, removed = overhead.untrace([(d, overhead.OP) for d in traced], model, MIN_OP_US, step, costs)
    overrides = graph.duration_overrides
    for i, before, after in zip(host, traced, durations, strict=True):
        if after != before:
            overrides[written[i]] = after
    return removed


def _durations(graph: TraceGraph, spill: TailSpill, rows: list[int]) -> list[int]:
    """The rows' durations as they would be written: the spilled ones, or those given before
    (``spread.py``)."""
    given = graph.duration_overrides
    return [given.get(row, encode.duration_of(tail)) for row, tail in zip(rows, spill.read_each(rows), strict=True)]


def _step_estimate(
    graph: TraceGraph, written: list[int], durations: list[int]
) -> Callable[[Sequence[int], Sequence[int]], float]:
    """``overhead.critical_path`` over the written rows (``written``, with their ``durations``),
    in a topological order: ids ascending unless an edge points forward."""
    place = {graph.ids[row]: i for i, row in enumerate(written)}
    deps = [[place[d] for d in graph.deps.ids(row) if d in place] for row in written]
    order = _topological(deps)
    where = {old: new for new, old in enumerate(order)}
    resources = [
        _COMM_RESOURCE if graph.types[row] in COMM_NODE_TYPES else _GPU_RESOURCE if graph.is_gpu[row] else _CPU_RESOURCE
        for row in written
    ]
    estimate = overhead.critical_path(
        [durations[i] for i in order], [[where[d] for d in deps[i]] for i in order], [resources[i] for i in order]
    )

    def step(at: Sequence[int], new: Sequence[int]) -> float:
        return estimate([where[i] for i in at], new)

    return step


_CPU_RESOURCE, _GPU_RESOURCE, _COMM_RESOURCE = 0, 1, 2


def _topological(deps: list[list[int]]) -> list[int]:
    """Positions in an order where each comes after its dependencies (Kahn's, iteratively); the
    positions as they are where every dependency is earlier."""
    if all(d < i for i, before in enumerate(deps) for d in before):
        return list(range(len(deps)))
    waiting = [len(set(before)) for before in deps]
    after: list[list[int]] = [[] for _ in deps]
    for i, before in enumerate(deps):
        for d in set(before):
            after[d].append(i)
    ready = [i for i, count in enumerate(waiting) if not count]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, j)
    order.extend(i for i, count in enumerate(waiting) if count)  # a cycle (broken later): as it is
    return order
