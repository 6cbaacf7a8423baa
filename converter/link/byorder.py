"""Linking without record-function ids: each thread's host ops against its Kineto CPU ops, in order.

Kineto traces from PyTorch 2.0/2.1 give their ``cpu_op`` events an ``External id`` and an
``Ev Idx`` but no ``Record function id``, so the reference's rule (host ``rf_id`` == Kineto
``Record function id``) links nothing, and ``chakra_trace_link`` writes the host trace back with no
device op. Both traces record the same operators of the same threads in the order they started, so
here, explicitly and only when no CPU op of the Kineto trace has a ``Record function id``:

1. **threads**: each host thread (the ``tid`` attribute, the observer's thread number) is paired
   with the Kineto thread (an OS thread id) whose op names its first ops match best;
2. **ops**: per pair of threads, host ops in ``rf_id`` order (the order they started) are matched
   to Kineto ops in start order (``ts``, then ``External id``) by name: the alignment starts where
   the first host ops appear in a row and match best (the Kineto trace may hold several steps,
   the host trace one of them), and each host op takes the next Kineto op of its name; a jump
   over Kineto ops is taken only when the next host op matches after it too, so a host op without
   a twin does not shift the rest; host ops left over are then matched to Kineto ops no host op
   took (on any thread) by name, the first that started after the op matched before it (the
   observer files gloo's worker ops under the thread that created them, Kineto under the
   worker's own);
3. **kernels**: a kernel whose ``External id`` is a linked CPU op's (newer traces; in PyTorch
   2.0/2.1 ones a kernel's ``External id`` is its correlation id, which names no CPU op) goes to
   that op, as in the reference. Otherwise its runtime call (``cudaLaunchKernel``... with the
   kernel's correlation id) is on a CPU thread inside the ops that launched it, and the kernel
   goes to the innermost linked op that encloses the call (for an NCCL kernel, the ``nccl:*``
   record function).

Durations, timestamps, exclusive durations and inter-thread dependencies are computed by the
reference's rules (``linker``); only the pairing of host op and Kineto op differs. The markers
(``[pytorch|profiler|execution_...]``, ``ProfilerStep#N``) have no twin and are not matched.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from ..schema.host import OBSERVER_NODE_PREFIX
from ..schema.kineto import PROFILER_STEP
from .hostindex import HostIndex
from .kineto import KinetoEvent, KinetoTrace
from .linker import (
    OBSERVER_RECORDS,
    LinkedOp,
    LinkPlan,
    LinkStats,
    _cpu_ops_by_thread,
    _exclusive_durations,
    _inter_thread_deps,
)

_ANCHOR = 4  # host ops that must match in a row where the alignment starts
_WINDOW = 256  # Kineto ops a host op may skip to find its twin
_SCORED = 256  # host ops aligned to score a pairing of threads or a start
_CANDIDATES = 1000  # starts tried per pairing (a Kineto trace of many steps: one per step)


def needs_order_linking(trace: KinetoTrace) -> bool:
    """True when no CPU op of the Kineto trace carries a ``Record function id``."""
    return bool(trace.cpu_ops) and all(op.rf_id is None for op in trace.cpu_ops)


def link_by_order(index: HostIndex, trace: KinetoTrace) -> LinkPlan:
    """The link plan of a pair whose Kineto trace has no record-function ids (see the module)."""
    by_tid = _cpu_ops_by_thread(trace.cpu_ops)
    for ops in by_tid.values():
        _exclusive_durations(ops)
    _inter_thread_deps(by_tid)
    stats = LinkStats(gpu_ops=len(trace.gpu_ops), by_order=True)
    host_threads = _host_threads(index, stats)
    kineto_threads = {tid: _Thread(sorted(ops, key=lambda op: (op.ts, op.ext))) for tid, ops in by_tid.items()}
    matched: list[tuple[int, KinetoEvent]] = []
    for host_tid, kineto_tid, start in _pair_threads(host_threads, kineto_threads):
        matched += _align(host_threads[host_tid], kineto_threads[kineto_tid], start)
    matched += _match_leftovers(host_threads, matched, trace.cpu_ops)
    for host_id, op in matched:
        op.host_id = host_id
    records = {i for i, name in zip(index.ids, index.names, strict=True) if name in OBSERVER_RECORDS}
    stats.linked = sum(host_id not in records for host_id, _ in matched)
    kernels = _kernels_by_host_op(trace, by_tid, stats)
    linked: dict[int, LinkedOp] = {}
    for host_id, op in matched:
        dep = op.inter_op.host_id if op.inter_op is not None else None
        if dep is not None and dep > host_id:
            dep = None  # as the reference, which sees only the host ops of smaller ids when it looks
        linked[host_id] = LinkedOp(op.dur, op.excl, op.ts, dep, kernels.get(host_id, []))
    stats.gpu_linked = sum(len(op.gpu_ops) for op in linked.values())
    return LinkPlan(linked, stats, trace.exact)


def _host_threads(index: HostIndex, stats: LinkStats) -> dict[Any, list[tuple[int, str]]]:
    """Per host thread, (id, name) of its ops under the root in ``rf_id`` order (markers left out)."""
    reachable = index.reachable_ids()
    rows: dict[Any, list[tuple[Any, int, str]]] = {}
    for position, host_id in enumerate(index.ids):
        rf_id, name = index.rf_ids[position], index.names[position]
        if host_id not in reachable or rf_id is None or name.startswith(OBSERVER_NODE_PREFIX) or PROFILER_STEP in name:
            continue
        stats.host_ops += name not in OBSERVER_RECORDS  # linked if matched, not counted: no op ran
        rows.setdefault(index.tids[position], []).append((rf_id, host_id, name))
    return {tid: [(host_id, name) for _, host_id, name in sorted(ops)] for tid, ops in rows.items()}


class _Thread:
    """A Kineto thread's ops in start order, and where each name occurs."""

    def __init__(self, events: list[KinetoEvent]) -> None:
        self.events = events
        self.names = [event.name for event in events]
        self.positions: dict[str, list[int]] = {}
        for position, name in enumerate(self.names):
            self.positions.setdefault(name, []).append(position)


def _pair_threads(host: dict[Any, list[tuple[int, str]]], kineto: dict[Any, _Thread]) -> list[tuple[Any, Any, int]]:
    """(host thread, Kineto thread, start) pairs, best-matching first, each thread used once."""
    scores = []
    for host_tid, ops in host.items():
        for kineto_tid, thread in kineto.items():
            start, score = _best_start(ops, thread)
            if score:
                scores.append((-score, str(host_tid), str(kineto_tid), host_tid, kineto_tid, start))
    scores.sort(key=lambda row: row[:3])
    pairs: list[tuple[Any, Any, int]] = []
    used_host: set[Any] = set()
    used_kineto: set[Any] = set()
    for _, _, _, host_tid, kineto_tid, start in scores:
        if host_tid not in used_host and kineto_tid not in used_kineto:
            used_host.add(host_tid)
            used_kineto.add(kineto_tid)
            pairs.append((host_tid, kineto_tid, start))
    return pairs


def _best_start(host: list[tuple[int, str]], thread: _Thread) -> tuple[int, int]:
    """Where the alignment starts, and how many of the first host ops it matches: of the places
    where the first host ops' names appear in a row (a Kineto trace of many steps has one per
    step), the one that matches most (the earliest of equals); 0 if there is none."""
    head = [name for _, name in host[:_ANCHOR]]
    candidates = [
        start for start in thread.positions.get(head[0], ()) if thread.names[start : start + len(head)] == head
    ]
    best, best_score = 0, -1
    for start in candidates[:_CANDIDATES] or [0]:
        score = len(_align(host[:_SCORED], thread, start))
        if score > best_score:
            best, best_score = start, score
    return best, max(best_score, 0)


def _align(host: list[tuple[int, str]], thread: _Thread, cursor: int) -> list[tuple[int, KinetoEvent]]:
    """Host ops matched to Kineto ops of the same name from ``cursor`` on, both in start order."""
    names = thread.names
    pairs: list[tuple[int, KinetoEvent]] = []
    for i, (host_id, name) in enumerate(host):
        found = thread.positions.get(name)
        if not found:
            continue
        k = bisect_left(found, cursor)
        if k == len(found) or found[k] - cursor > _WINDOW:
            continue
        at = found[k]
        if at != cursor and i + 1 < len(host) and at + 1 < len(names) and names[at + 1] != host[i + 1][1]:
            continue  # a jump the next host op does not confirm: this one has no twin
        pairs.append((host_id, thread.events[at]))
        cursor = at + 1
    return pairs


def _match_leftovers(
    host: dict[Any, list[tuple[int, str]]], matched: list[tuple[int, KinetoEvent]], cpu_ops: list[KinetoEvent]
) -> list[tuple[int, KinetoEvent]]:
    """Host ops the thread alignment left unmatched, matched to Kineto ops no host op took, by name
    and time: the first such op of the name that started after the Kineto op of the host op
    matched before it. This finds ops the observer files under the thread that created them but
    Kineto under the thread that ran them (gloo's ``gloo:*`` work runs on worker threads, later)."""
    taken = {id(op) for _, op in matched}
    pool: dict[str, list[KinetoEvent]] = {}
    for op in cpu_ops:  # sorted by start time
        if id(op) not in taken:
            pool.setdefault(op.name, []).append(op)
    if not pool:
        return []
    start_of = {host_id: op.ts for host_id, op in matched}
    found: list[tuple[int, KinetoEvent]] = []
    for ops in host.values():
        before: Any = None
        for host_id, name in ops:
            if host_id in start_of:
                before = start_of[host_id]
                continue
            candidates = pool.get(name, [])
            k = 0 if before is None else bisect_left(candidates, before, key=_start)
            if k < len(candidates):
                found.append((host_id, candidates.pop(k)))
    return found


def _start(op: KinetoEvent) -> Any:
    return op.ts


def _kernels_by_host_op(
    trace: KinetoTrace, by_tid: dict[Any, list[KinetoEvent]], stats: LinkStats
) -> dict[int, list[KinetoEvent]]:
    """Host id -> the device ops launched inside it (innermost linked op around the runtime call)."""
    launchers = _enclosing_ops(trace, by_tid)
    by_ext: dict[int, KinetoEvent] = {}
    for op in trace.cpu_ops:
        by_ext.setdefault(op.ext, op)
    kernels: dict[int, list[KinetoEvent]] = {}
    for gpu in trace.gpu_ops:
        runtime = trace.launch_by_corr.get(gpu.corr)
        if runtime is None:
            stats.gpu_without_launcher += 1
            continue
        gpu.tid = runtime.tid
        named = by_ext.get(gpu.ext) if gpu.ext != gpu.corr else None
        if named is not None and named.host_id is not None and named.tid == runtime.tid and named.ts <= runtime.ts:
            kernels.setdefault(named.host_id, []).append(gpu)  # the kernel names its CPU op
            continue
        found, host_id = launchers.get(id(runtime), (False, None))
        if host_id is not None:
            kernels.setdefault(host_id, []).append(gpu)
        elif found:
            stats.gpu_unattached += 1
        else:
            stats.gpu_without_launcher += 1
    return kernels


def _enclosing_ops(trace: KinetoTrace, by_tid: dict[Any, list[KinetoEvent]]) -> dict[int, tuple[bool, int | None]]:
    """id(runtime call) -> (some CPU op encloses it, host id of the innermost linked one): a sweep
    per thread with the stack of open ops (ops on one thread nest)."""
    launches: dict[Any, list[KinetoEvent]] = {}
    for runtime in trace.launch_by_corr.values():
        launches.setdefault(runtime.tid, []).append(runtime)
    found: dict[int, tuple[bool, int | None]] = {}
    for tid, calls in launches.items():
        ops = sorted(by_tid.get(tid, ()), key=lambda op: (op.ts, -op.dur))
        stack: list[KinetoEvent] = []
        i = 0
        for call in sorted(calls, key=lambda event: event.ts):
            while i < len(ops) and ops[i].ts <= call.ts:
                while stack and stack[-1].ts + stack[-1].dur < ops[i].ts:
                    stack.pop()
                stack.append(ops[i])
                i += 1
            open_ops = [op for op in stack if op.ts + op.dur >= call.ts + call.dur]
            linked = next((op.host_id for op in reversed(open_ops) if op.host_id is not None), None)
            found[id(call)] = (bool(open_ops), linked)
    return found
