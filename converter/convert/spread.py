"""A parent op's own time spread over its children, with ``--astra-sim``: the reference's output
keeps every op's exclusive time on the op itself.

The reference writes each CPU op with its exclusive time (its span less its children's) and
chains the CPU ops in the order the observer recorded them: a parent before its children. Its
exclusive time is the time *between* its children (the Python of a module's ``forward`` between
its ops, and the profiler's callbacks there), but the replay runs it as one block before the
first child: where the GPU has nothing queued (the step's start, after the host waited for the
GPU) every kernel the children launch starts that much later. ``DistributedDataParallel.forward``
alone holds 12.6 ms of GPT-2's H100 step that way (``docs/overhead.md``); once the profiler's
time is out of the ops, that block kept a GPU-bound step's replay 5-9% long and made the
calibration take out far more per op than the profiler costs.

Each written CPU op with written CPU children keeps 1 us (``MIN_OP_US``: where it had that much)
and gives the rest to its direct children, evenly, in whole microseconds: the time between
siblings lands at the start of the next sibling's subtree, where it ran. The host time is the
same; a host-bound step replays as before, a GPU-bound one as the host ran ahead of the GPU.
GPU kernels, communication nodes and the rows written without a duration keep theirs. It goes
with the profiler's time taken out (``untrace.py``): ``--tracing-overhead none`` keeps every
traced duration where it was (a traced step is host-bound, and there it changes nothing). Only
where the trace ran ops on a GPU: on a CPU capture the host is the step, and its calibration
sets the CPU ops' time as a whole (``untrace.keep``).
"""

from __future__ import annotations

from ..et import encode
from ..schema.chakra import NodeType
from .graph import TraceGraph
from .writer import TailSpill

_COMP = int(NodeType.COMP_NODE)
#: What a parent keeps of its own time (``untrace.MIN_OP_US``: a node left at zero would stop
#: ``--compact`` merging across it).
MIN_OP_US = 1


def apply(graph: TraceGraph, spill: TailSpill) -> int:
    """Spread each written CPU parent's exclusive time over its written CPU children (the new
    durations go to ``graph.duration_overrides``); the microseconds moved."""
    types, is_gpu, skipped, replaced = graph.types, graph.is_gpu, graph.zero_duration, graph.tail_overrides
    overrides = graph.duration_overrides
    host = [
        row
        for row in graph.rows_by_id()
        if not is_gpu[row] and types[row] == _COMP and row not in skipped and row not in replaced
    ]
    duration = {
        row: overrides.get(row, encode.duration_of(tail)) for row, tail in zip(host, spill.read_each(host), strict=True)
    }
    moved = 0
    for row in host:  # ids ascending: a parent before its children, so what a child gets stays on it
        own = duration[row]
        children = [child for child in graph.children(row) if child in duration]
        if not children or own <= MIN_OP_US:
            continue
        give = own - MIN_OP_US
        share, rest = divmod(give, len(children))
        for k, child in enumerate(children):
            duration[child] += share + (k < rest)
        duration[row] = MIN_OP_US
        moved += give
    if moved:
        for row in host:
            overrides[row] = duration[row]
    return moved
