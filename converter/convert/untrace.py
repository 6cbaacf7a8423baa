"""The profiler's time taken out of a host trace's CPU ops (``converter/overhead.py``), with
``--astra-sim``: the reference's output keeps every traced duration.

The written CPU ops, in id order (the order the observer recorded them: an op's id is given at
its entry), are the host timeline: each charges its cost, and pays what it can of what is owed
out of its duration (its exclusive time, as the reference writes it), down to 1 us
(``MIN_OP_US``). GPU kernels,
communication nodes and the ``gloo:`` work a collective node stands for keep theirs.

The figure is the user's or the default model's, and a step-time calibration only for a CPU
capture (``choose``). With a GPU this timeline is not the step's (it holds the ops' exclusive
times, not the time between the step's top-level ops, and no dependency of the host on the GPU),
so the step's traced-minus-untraced difference does not say how much of it to remove
(``docs/overhead.md`` shows how far that lands). Without a GPU the host *is* the step, and the
calibration says how long the rank's step took traced and untraced. The CPU ops are given the
rank's untraced step outside its collectives (``keep``): its traced step less its collectives'
traced time, scaled by untraced / traced. That takes the profiler's time out, and puts the time
between the ops, which the replay does not hold (Python between the ops, the batch's
preparation), into them in proportion: taking out only the profiler's share of the ops' own time
left the replays 2-11% short (``docs/overhead.md``). Each rank then replays its untraced step
nearly by construction; what the job's replay adds is the ranks' coupling in their collectives.
"""

from __future__ import annotations

from dataclasses import replace

from .. import overhead
from ..et import encode
from ..schema.chakra import NodeType
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


def choose(setting: str | float, graph: TraceGraph, trace: str) -> overhead.Model | None:
    """The model ``setting`` picks for the host path: a CPU capture's calibration beside its host
    trace (``trace``) first, as for a Kineto trace; else the user's figure or the default model."""
    return overhead.choose(setting, HOST_TRACING, trace if cpu_capture(graph) else None)


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
    return replace(model, target_us=max(0.0, host_us - kept), source=f"{model.source}: {said}")


def apply(graph: TraceGraph, spill: TailSpill, model: overhead.Model) -> overhead.Removed:
    """Take ``model``'s cost out of ``graph``'s CPU ops (their durations read from ``spill``);
    the new durations go to ``graph.duration_overrides``. A calibrated model (a CPU capture's)
    leaves them the untraced step outside the collectives (``keep``)."""
    types, is_gpu, skipped, replaced = graph.types, graph.is_gpu, graph.zero_duration, graph.tail_overrides
    rows = [
        row
        for row in graph.rows_by_id()
        if not is_gpu[row] and types[row] == _COMP and row not in skipped and row not in replaced
    ]
    traced = [encode.duration_of(tail) for tail in spill.read_each(rows)]
    comm = sum(encode.duration_of(tail) for row, tail in replaced.items() if types[row] in _COMM)
    model = keep(model, sum(traced), comm)
    durations, removed = overhead.untrace([(d, overhead.OP) for d in traced], model, MIN_OP_US)
    overrides = graph.duration_overrides
    for row, before, after in zip(rows, traced, durations, strict=True):
        if after != before:
            overrides[row] = after
    return removed
