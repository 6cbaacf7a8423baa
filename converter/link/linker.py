"""Host + device linking: the decisions ``chakra_trace_link`` makes, in near-linear time.

Every rule below is the reference's (mlc-chakra 1.0.0 ``TraceLinker``), including its tie-breaks,
so the merged trace is the same document. What changes is how each answer is found:

* exclusive durations: the reference rescans every later op inside each op's span; here a
  "skip over what the previous child already covers" pointer visits only direct children;
* inter-thread dependencies: a bisect per thread instead of a scan of all other threads' ops;
* a kernel's launching CPU op: a bisect into per-(External id) and per-thread position lists
  instead of a backward scan over all earlier CPU ops.

Sync dependencies (HTA critical-path analysis) are not computed: with HTA 0.5.0 under pandas 3
the reference computes none either.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..schema.host import OBSERVER_NODE_PREFIX
from ..schema.kineto import PROFILER_STEP
from .hostindex import HostIndex
from .kineto import KinetoEvent, KinetoTrace

INTER_THREAD_GAP = 1000  # microseconds; a larger gap on a thread starts a new group
PROCESS_ANNOTATION = "[pytorch|profiler|execution_trace|process]"
THREAD_ANNOTATION = "[pytorch|profiler|execution_trace|thread]"
#: The record the observer writes itself when it is registered (the job's process groups): no op
#: ran, so no Kineto trace holds a twin; not counted as a host op (a user's ``record_function("## x ##")``
#: is one, and is counted).
OBSERVER_RECORDS = frozenset({"## process_group:init ##"})


@dataclass(slots=True)
class LinkedOp:
    """What the merged trace adds to one host node, and the device ops it launched."""

    inclusive_dur: Any
    exclusive_dur: Any
    ts: Any
    inter_thread_dep: int | None  # original host id of the dependency
    gpu_ops: list[KinetoEvent]


@dataclass
class LinkStats:
    """Counts for the report and for deciding whether the pair belongs together."""

    host_ops: int = 0  # host ops under the root with a record-function id
    linked: int = 0
    name_mismatches: int = 0
    gpu_ops: int = 0
    gpu_without_launcher: int = 0  # no runtime launch or no CPU op around it
    gpu_unattached: int = 0  # launcher found, but no host op took it
    gpu_linked: int = 0
    by_order: bool = False  # no record-function ids: linked by each thread's op order (byorder.py)
    mismatch_examples: list[str] = field(default_factory=list)

    @property
    def unlinked_host_ops(self) -> int:
        return self.host_ops - self.linked


@dataclass
class LinkPlan:
    linked: dict[int, LinkedOp]
    stats: LinkStats
    exact_events: bool = False  # every Kineto event was decoded by msgspec (no NaN nor infinity)


def link(index: HostIndex, trace: KinetoTrace) -> LinkPlan:
    """Decide, for every host node, its timing, inter-thread dependency and device ops."""
    by_tid = _cpu_ops_by_thread(trace.cpu_ops)
    for ops in by_tid.values():
        _exclusive_durations(ops)
    _inter_thread_deps(by_tid)
    stats = LinkStats(gpu_ops=len(trace.gpu_ops))
    gpu_by_ext = _group_gpu_ops(trace, stats) if trace.gpu_ops else {}
    linked = _link_host_ops(index, trace, gpu_by_ext, stats)
    stats.gpu_linked = sum(len(op.gpu_ops) for op in linked.values())
    attached = {id(g) for op in linked.values() for g in op.gpu_ops}
    stats.gpu_unattached = sum(1 for ops in gpu_by_ext.values() for g in ops if id(g) not in attached)
    return LinkPlan(linked, stats, trace.exact)


def _cpu_ops_by_thread(cpu_ops: list[KinetoEvent]) -> dict[Any, list[KinetoEvent]]:
    by_tid: dict[Any, list[KinetoEvent]] = {}
    for op in cpu_ops:
        by_tid.setdefault(op.tid, []).append(op)
    return by_tid


# -- exclusive durations ------------------------------------------------------------------------
def _exclusive_durations(thread_ops: list[KinetoEvent]) -> None:
    """Inclusive duration minus the union of later-sorted ops that end inside it (the reference's rule).

    Ops are ordered by (ts, dur); op j counts for op i when j comes later and ends no later. A j that
    counts covers every op up to ``skip[j]`` (they start and end inside it), so the scan jumps there;
    the merged regions, and so the float arithmetic, are the reference's exactly.
    """
    ops = sorted(thread_ops, key=lambda op: (op.ts, op.dur))
    starts = [op.ts for op in ops]
    ends = [op.ts + op.dur for op in ops]
    if any(op.dur < 0 for op in ops):
        _exclusive_durations_by_scan(ops, starts, ends)
        return
    skip = _skip_pointers(starts, ends)
    n = len(ops)
    for i, op in enumerate(ops):
        end_i = ends[i]
        regions: list[tuple[Any, Any]] = []
        j = i + 1
        while j < n and starts[j] <= end_i:
            if ends[j] <= end_i:
                _add_region(regions, starts[j], ends[j])
                j = skip[j]
            else:
                j += 1
        op.excl = _subtract(op.dur, regions)


def _skip_pointers(starts: list[Any], ends: list[Any]) -> list[int]:
    """For each j, the first later op that ends after j ends or starts after j ends."""
    n = len(starts)
    next_longer = [n] * n
    stack: list[int] = []
    for k in range(n - 1, -1, -1):
        while stack and ends[stack[-1]] <= ends[k]:
            stack.pop()
        next_longer[k] = stack[-1] if stack else n
        stack.append(k)
    return [min(next_longer[j], bisect_right(starts, ends[j])) for j in range(n)]


def _add_region(regions: list[tuple[Any, Any]], start: Any, end: Any) -> None:
    if regions and start <= regions[-1][1]:
        first, last = regions[-1]
        regions[-1] = (first, max(last, end))
    else:
        regions.append((start, end))


def _subtract(duration: Any, regions: list[tuple[Any, Any]]) -> Any:
    for start, end in regions:
        duration -= end - start
    return duration


def _exclusive_durations_by_scan(ops: list[KinetoEvent], starts: list[Any], ends: list[Any]) -> None:
    """The reference's own quadratic scan, for the odd thread with negative durations."""
    for i, op in enumerate(ops):
        regions: list[tuple[Any, Any]] = []
        for j in range(i + 1, len(ops)):
            if starts[j] >= starts[i] and ends[j] <= ends[i]:
                regions.append((starts[j], ends[j]))
            if ends[i] < starts[j]:
                break
        regions.sort(key=lambda r: r[0])
        merged: list[tuple[Any, Any]] = []
        for start, end in regions:
            _add_region(merged, start, end)
        op.excl = _subtract(op.dur, merged)


# -- inter-thread dependencies -------------------------------------------------------------------
def _inter_thread_deps(by_tid: dict[Any, list[KinetoEvent]]) -> None:
    """Each group of ops after a gap depends on the latest op started before it on another thread."""
    starts = {tid: [op.ts for op in ops] for tid, ops in by_tid.items()}
    for tid, ops in by_tid.items():
        dep = None
        for i, op in enumerate(ops):
            if i == 0 or op.ts - ops[i - 1].ts - ops[i - 1].dur > INTER_THREAD_GAP:
                dep = _latest_other_thread_op(by_tid, starts, tid, op.ts)
            if dep is not None:
                op.inter_op = dep
                if dep.rf_id:
                    op.inter_dep = dep.rf_id


def _latest_other_thread_op(
    by_tid: dict[Any, list[KinetoEvent]], starts: dict[Any, list[Any]], exclude: Any, ts: Any
) -> KinetoEvent | None:
    """The op with the latest start in (0, ts) on other threads; ties go to the first seen."""
    best_ts: Any = 0
    best: KinetoEvent | None = None
    for tid, thread_starts in starts.items():
        if tid == exclude:
            continue
        k = bisect_left(thread_starts, ts) - 1
        if k < 0 or not thread_starts[k] > best_ts:
            continue
        best_ts = thread_starts[k]
        best = by_tid[tid][bisect_left(thread_starts, best_ts)]
    return best


# -- device ops and their launchers --------------------------------------------------------------
def _cpu_timeline(trace: KinetoTrace) -> list[KinetoEvent]:
    """The reference's sorted CPU op list: its ops plus process and thread markers (tid 0)."""
    ops: list[KinetoEvent] = [KinetoEvent.annotation(PROCESS_ANNOTATION, trace.process_start), *trace.cpu_ops]
    first_of_tid: dict[Any, KinetoEvent] = {}
    for op in trace.cpu_ops:
        first_of_tid.setdefault(op.tid, op)
    for tid in trace.thread_order():
        start = trace.threads[tid][0]
        marker = KinetoEvent.annotation(THREAD_ANNOTATION, start)
        position = _marker_position(ops, first_of_tid, tid, start)
        if position is None:
            ops.append(marker)
        else:
            ops.insert(position, marker)
    ops.sort(key=lambda op: op.ts)
    return ops


def _marker_position(ops: list[KinetoEvent], first_of_tid: dict[Any, KinetoEvent], tid: Any, start: Any) -> int | None:
    if tid != 0:  # markers have tid 0, so the first op of the thread is the first match
        first = first_of_tid.get(tid)
        return None if first is None else ops.index(first)
    return next((i for i, op in enumerate(ops) if op.tid == tid and op.ts >= start), None)


class _LauncherIndex:
    """Finds the CPU op that launched a kernel: the reference's backward scan, by bisection."""

    def __init__(self, timeline: list[KinetoEvent]) -> None:
        self.timeline = timeline
        self.starts = [op.ts for op in timeline]
        self.by_ext: dict[int, list[int]] = {}
        self.by_tid: dict[Any, list[int]] = {}
        for position, op in enumerate(timeline):
            self.by_ext.setdefault(op.ext, []).append(position)
            self.by_tid.setdefault(op.tid, []).append(position)

    def find(self, gpu: KinetoEvent, runtime_ts: Any) -> KinetoEvent | None:
        """Latest op before ``runtime_ts`` on the kernel's thread with its External id, else on its thread."""
        limit = bisect_left(self.starts, runtime_ts)
        skip_coalesced = "nccl" in gpu.name.lower()
        for position in self._before(self.by_ext.get(gpu.ext, ()), limit):
            op = self.timeline[position]
            if op.tid == gpu.tid and not (skip_coalesced and op.name == "nccl:coalesced"):
                return op
        for position in self._before(self.by_tid.get(gpu.tid, ()), limit):
            op = self.timeline[position]
            if not (skip_coalesced and op.name == "nccl:coalesced"):
                return op
        return None

    @staticmethod
    def _before(positions: Any, limit: int) -> Iterator[int]:
        """Positions below ``limit``, latest first (no copy: launchers are usually close by)."""
        for i in range(bisect_left(positions, limit) - 1, -1, -1):
            yield positions[i]


def _group_gpu_ops(trace: KinetoTrace, stats: LinkStats) -> dict[int, list[KinetoEvent]]:
    """Device ops keyed by the External id of the CPU op that launched them."""
    index = _LauncherIndex(_cpu_timeline(trace))
    by_ext: dict[int, list[KinetoEvent]] = {}
    for gpu in trace.gpu_ops:
        runtime = trace.launch_by_corr.get(gpu.corr)
        if runtime is None:
            stats.gpu_without_launcher += 1
            continue
        gpu.tid = runtime.tid
        parent = index.find(gpu, runtime.ts)
        if parent is None:
            stats.gpu_without_launcher += 1
            continue
        by_ext.setdefault(parent.ext, []).append(gpu)
    return by_ext


# -- host ops ------------------------------------------------------------------------------------
def _link_host_ops(
    index: HostIndex, trace: KinetoTrace, gpu_by_ext: dict[int, list[KinetoEvent]], stats: LinkStats
) -> dict[int, LinkedOp]:
    """Match host ops (under the root, by id) to device CPU ops through the record-function id."""
    by_rf = {op.rf_id: op for op in trace.cpu_ops if op.rf_id is not None}
    reachable = index.reachable_ids()
    linked: dict[int, LinkedOp] = {}
    for position in index.sorted_positions():
        host_id = index.ids[position]
        rf_id = index.rf_ids[position]
        if host_id not in reachable or rf_id is None:
            continue
        name = index.names[position]
        counted = not (name.startswith(OBSERVER_NODE_PREFIX) or name in OBSERVER_RECORDS or PROFILER_STEP in name)
        stats.host_ops += counted
        op = by_rf.get(rf_id)
        if op is None:
            continue
        stats.linked += counted
        _count_name(stats, name, op)
        op.host_id = host_id
        linked[host_id] = LinkedOp(op.dur, op.excl, op.ts, _inter_thread_host(op, by_rf), gpu_by_ext.get(op.ext, []))
    return linked


def _inter_thread_host(op: KinetoEvent, by_rf: dict[Any, KinetoEvent]) -> int | None:
    if not op.inter_dep:
        return None
    dep = by_rf.get(op.inter_dep)
    return None if dep is None else dep.host_id


def _count_name(stats: LinkStats, host_name: str, op: KinetoEvent) -> None:
    if host_name != op.name:
        stats.name_mismatches += 1
        if len(stats.mismatch_examples) < 3:
            stats.mismatch_examples.append(f"'{host_name}' vs '{op.name}'")
