"""A device profile's points, measured from Kineto traces (``devices/profile.py`` holds the
profiles): each launching op's kernels' time, keyed by its shape.

A Kineto trace captured with ``record_shapes`` holds, for each kernel, the CPU op that launched it
(the innermost op open around its runtime call that recorded ``Input Dims``, as the roofline
reads it: ``kineto/roofline.py``) and CUPTI's kernel time. ``launched_ops`` gives, per such op of
one ProfilerStep, its profile key (``profile.op_key``) and the time of its kernels (summed: an op
that launches three kernels is one point); a memcpy or memset is a ``memcpy`` point by its bytes.
``points_json`` groups them (the median time of each distinct class, dtype and shape) into a
profile's ``ops``. ``host_counts`` counts the step's host events (ops, runtime calls) for the
host model.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..devices.profile import OpKey, memcpy_key
from .events import HOST, RUNTIME, STEP, Event, KinetoEvents
from .graph import gpu_by_launch, pick_step
from .roofline import launching_op
from .whatif import key_of


@dataclass(frozen=True)
class Launched:
    """One launching op of the step: its key (or why it has none), its kernels and their time."""

    name: str
    key: OpKey | str
    kernels: int
    us: float


@dataclass(frozen=True)
class HostCounts:
    ops: int  # host events other than runtime calls (ops, annotations)
    launches: int  # runtime calls
    step_us: float
    gpu_us: float  # the step's kernels, summed


def step_events(events: KinetoEvents, step: int | None = None) -> tuple[Event, list[Event], dict[int, list[Event]]]:
    by_launch, _ = gpu_by_launch(events)
    chosen, _ = pick_step(events, step, by_launch)
    host = [
        e
        for e in events.host
        if chosen.ts <= e.ts < chosen.end and e.pid == chosen.pid and (e.kind != STEP or e is chosen)
    ]
    return chosen, host, by_launch


def launched_ops(events: KinetoEvents, step: int | None = None) -> list[Launched]:
    """Each launching op of the step (kernels without one are left out: nothing to key them by)."""
    _, host, by_launch = step_events(events, step)
    stacks: dict[Any, list[Event]] = {}
    ops: dict[int, tuple[Event, list[float]]] = {}
    out: list[Launched] = []
    for event in host:
        stack = stacks.setdefault(event.tid, [])
        while stack and stack[-1].end <= event.ts:
            stack.pop()
        if event.kind == RUNTIME:
            for gpu in by_launch.get(event.index, ()):
                if gpu.name.lower().startswith(("memcpy", "memset")):
                    moved = gpu.args.bytes
                    if type(moved) is int and moved >= 0:
                        out.append(Launched(gpu.name, memcpy_key(moved), 1, float(gpu.dur)))
                    continue
                if _is_communication(gpu.name):
                    continue
                op = launching_op(stack[::-1])
                if op is not None:
                    ops.setdefault(op.index, (op, []))[1].append(float(gpu.dur))
        if event.kind in (HOST, STEP):
            stack.append(event)
    for op, durations in ops.values():
        out.append(Launched(op.name, key_of(op), len(durations), sum(durations)))
    return out


#: A kernel counts as queued behind the previous one on its stream when its launch call returned
#: at least this long (us) before that one ended: the GPU, not the host, decided when it started.
QUEUED_SLACK_US = 5.0


def queued_gaps(events: KinetoEvents, step: int | None = None) -> list[float]:
    """The GPU's own time between kernels queued back to back (us): on each stream, from the end of a
    GPU op to the start of the next, where the next was launched (its runtime call returned) well
    before the first ended. CUPTI's kernel times leave this time out; where the GPU bounds a step it
    adds up (about 1.3 us a kernel on the H100 and H200). Overlaps (negative) are left out."""
    chosen, host, by_launch = step_events(events, step)
    launched = {id(g): e.end for e in host if e.kind == RUNTIME for g in by_launch.get(e.index, ())}
    streams: dict[Any, list[Event]] = defaultdict(list)
    for gpu in events.gpu:
        if chosen.ts <= gpu.ts < chosen.end and id(gpu) in launched and not _is_communication(gpu.name):
            streams[(gpu.pid, gpu.stream)].append(gpu)
    gaps = []
    for ops in streams.values():
        ops.sort(key=lambda e: e.ts)
        for first, then in itertools.pairwise(ops):
            gap = then.ts - first.end
            if launched[id(then)] <= first.end - QUEUED_SLACK_US and gap >= 0:
                gaps.append(gap)
    return gaps


def _is_communication(name: str) -> bool:
    return name.startswith(("ncclKernel", "ncclDevKernel", "rcclKernel"))


def host_counts(events: KinetoEvents, step: int | None = None) -> HostCounts:
    chosen, host, by_launch = step_events(events, step)
    ops = sum(1 for e in host if e.kind == HOST)
    launches = sum(1 for e in host if e.kind == RUNTIME)
    gpu = sum(g.dur for e in host if e.kind == RUNTIME for g in by_launch.get(e.index, ()))
    return HostCounts(ops, launches, float(chosen.dur), float(gpu))


def points_json(launched: list[Launched]) -> dict[str, list[dict[str, Any]]]:
    """The ops' points grouped by class, dtype and shape: the median time and how many."""
    groups: dict[tuple[str, str, str, tuple[int, ...]], list[float]] = defaultdict(list)
    for op in launched:
        if isinstance(op.key, OpKey) and op.us > 0:
            groups[(op.key.op_class, op.key.op, op.key.dtype, op.key.shape)].append(op.us)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (cls, name, dtype, shape), times in sorted(groups.items()):
        point = {"op": name, "dtype": dtype, "shape": list(shape), "us": round(statistics.median(times), 3)}
        out[cls].append(point | {"count": len(times)})
    return dict(out)
