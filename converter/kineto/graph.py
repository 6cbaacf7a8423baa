"""One ProfilerStep of a Kineto trace -> a replayable dependency graph (Lumos's four kinds).

The nodes, in id order:

- **the host timeline**: every host event of the step's process that starts inside the step's
  span (``ProfilerStep#N`` first, then ``cpu_op``, ``user_annotation`` and runtime calls of every
  thread, in start order) is a CPU compute node. A node lasts from its start to the next event's
  start or to its own end, whichever comes first; the time from there to the next event's start
  (host idle, launch gaps, the tail of a parent op) is a ``[host gap]`` node. So the nodes of the
  host timeline tile the step's span exactly: durations are taken between rounded timestamps, so
  rounding to ASTRA-sim's microseconds never drifts. Threads are merged into this one timeline
  (ASTRA-sim runs one CPU op at a time per rank), so each thread's order is kept, and so is the
  order across threads that the trace shows.
- **CPU -> GPU**: each kernel, memcpy and memset launched (``correlation``, else the ``ac2g`` flow)
  by a runtime call of the step is a GPU node right after that call, depending on it.
- **GPU -> CPU**: a synchronising call (``SYNC_CALLS``) is followed by a ``(wait)`` node that
  depends on the GPU work it waited for (per stream, the last op launched before it that ended
  during the call) and lasts from that work's end to the call's end.
- **GPU -> GPU**: each GPU op depends on the previous op of its stream; and where it started later
  than both its launch and that op allow, on the op of another stream that ended last just before
  it (the ``cudaEventRecord`` -> ``cudaStreamWaitEvent`` edge, read from the timing, since Kineto
  records neither the event nor the stream waited on).

NCCL/RCCL kernels become communication nodes (``comm.py``), and so do communication kernels that
are not NCCL's (DeepEP, NVSHMEM, custom all-to-all and all-reduce, by name; MoE dispatch/combine on
a communication stream) and the ``gloo:`` annotation of a collective on CPU ranks (a node beside its
slot of the host timeline, from where it started). Kernels that overlapped on several streams are
then written to end when they ended, one after another (``overlap.py``: ASTRA-sim runs one GPU
compute and one communication node at a time). ``drop`` removes one kind of dependency (or the gap
nodes) for the ablation.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..arguments import MAX_RANKS
from ..errors import TraceContentError, TraceFormatError
from ..schema.chakra import NodeType
from ..schema.kineto import event_name, step_number
from . import comm, overlap
from .events import HOST, RUNTIME, STEP, Event, KinetoEvents, short_value
from .roofline import Costs, KinetoRoofline
from .sortedkeys import SortedKeys
from .whatif import WhatIf, WhatIfSummary

#: Runtime calls that return only when GPU work is done.
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaMemset",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
        "cuMemcpyHtoD_v2",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemset",
    }
)
#: Runtime calls that launch kernels (a step whose kernel launches lack their kernel is incomplete;
#: memcpy and memset calls are left out: small ones often record no GPU op).
_LAUNCH = re.compile(r"^(cu|cuda|hip)(Ext)?(Module)?(LaunchKernel|LaunchCooperativeKernel)")
#: Dependency kinds ``drop`` may name, and the gap nodes.
DEPENDENCY_KINDS = ("cpu", "launch", "sync", "stream", "gaps")
_CROSS_STREAM_WINDOW = 10.0  # us: an op on another stream that ended this close before a late start
_SLACK = 1.0  # us: start later than this after what it waits for = it waited for something else
_MAX_BYTES = (1 << 63) - 1  # a communication node's comm_size (int64)
GAP_NAME = "[host gap]"
CARRY_IN_NAME = "[GPU work launched before the step]"


class Node:
    __slots__ = ("comm", "cpu", "deps", "dur", "end", "id", "name", "roofline", "start", "tag", "type")

    def __init__(self, node_id: int, name: str, dur: int, deps: list[int], cpu: bool = True) -> None:
        self.id = node_id
        self.name = name
        self.type = int(NodeType.COMP_NODE)
        self.dur = dur
        self.deps = deps
        self.cpu = cpu
        self.comm: comm.CommInfo | None = None
        self.tag: int | None = None
        self.end = 0.0  # a GPU op's traced end (microseconds)
        self.start = 0  # where it starts, rounded microseconds from the step's start (as written)
        self.roofline: tuple[int, int] | None = None  # (num_ops, tensor_size) with --roofline


@dataclass
class KinetoGraph:
    nodes: list[Node]
    step: int
    step_start: float
    #: the step's span: ProfilerStep#N's start to the later of its end and the end of the GPU work
    #: it launched (microseconds)
    measured_us: float
    cpu_span_us: float
    gpu_ops: int = 0
    comm_nodes: int = 0
    warnings: list[str] = field(default_factory=list)
    incomplete: int = 0
    roofline: KinetoRoofline | None = None
    overlap: overlap.OverlapSummary | None = None  # kernels that overlapped on several streams
    streams: dict[int, Any] = field(default_factory=dict)  # GPU node id -> its (pid, stream)
    #: host-timeline node id -> True for a runtime call, False for a recorded op (``overhead.py``)
    recorded: dict[int, bool] = field(default_factory=dict)
    whatif: WhatIfSummary | None = None  # with a device profile (whatif.py)
    #: what the replay is judged against (``baseline.py``: a JSON note), set once the profiler's
    #: time is handled
    baseline: str | None = None


def pick_step(trace: KinetoEvents, step: int | None, gpu_by_launch: dict[int, list[Event]]) -> tuple[Event, int]:
    """The ProfilerStep to convert and how many of its launches lack their GPU work. A step that
    lasts no time holds no event: refused when named, skipped by the default choice."""
    steps = [(n, e) for e in trace.steps if (n := step_number(e.name)) is not None]
    if not steps:
        raise TraceContentError(
            trace.path,
            "no ProfilerStep#N event: profile with torch.profiler's schedule "
            "(prof.step() each iteration) to mark the steps",
        )
    if step is not None:
        chosen = [e for n, e in steps if n == step]
        if not chosen:
            have = ", ".join(str(n) for n, _ in steps[:20])
            raise TraceContentError(trace.path, f"no ProfilerStep#{step} in the trace (it has {have})")
        if chosen[-1].dur <= 0:
            raise TraceContentError(trace.path, f"{_empty(chosen[-1])}: choose another step")
        return chosen[-1], _Launches(trace, gpu_by_launch).count(chosen[-1])[1]
    lasting = [(n, e) for n, e in steps if e.dur > 0]
    if not lasting:
        raise TraceContentError(trace.path, f"{_empty(steps[-1][1])}, as does every step of the trace")
    # the last step whose kernels are all in the trace; one that launched none is skipped where
    # others did (the short step torch.profiler's stop() leaves)
    launches = _Launches(trace, gpu_by_launch)
    counted = [(e, *launches.count(e)) for _, e in reversed(lasting)]
    any_launches = any(launched for _, launched, _ in counted)
    for event, launched, missing in counted:
        if not missing and (launched or not any_launches):
            return event, 0
    return lasting[-1][1], counted[0][2]


def _empty(step: Event) -> str:
    return f"{event_name(step.index, step.name)} lasts {step.dur:g} us: it holds no event to convert"


class _Launches:
    """The kernel launches of each process, in time order, and how many lack their GPU work so far:
    a step's are counted by two binary searches (each step scanning every host event made choosing
    the default step quadratic in the steps)."""

    def __init__(self, trace: KinetoEvents, gpu_by_launch: dict[int, list[Event]]) -> None:
        self.by_pid: dict[Any, tuple[list[float], list[int]]] = {}
        for e in trace.host:  # in time order
            if e.kind == RUNTIME and _LAUNCH.match(e.name):
                times, missing = self.by_pid.setdefault(e.pid, ([], [0]))
                times.append(e.ts)
                missing.append(missing[-1] + (e.index not in gpu_by_launch))

    def count(self, step: Event) -> tuple[int, int]:
        """Kernel launches of the step, and how many of them have no kernel in the trace."""
        times, missing = self.by_pid.get(step.pid, ([], [0]))
        first, last = bisect_left(times, step.ts), bisect_left(times, step.end)
        return last - first, missing[last] - missing[first]


def launch_key(event: Event) -> Any:
    """What links a launch to its GPU work: its correlation id, else its ``ac2g`` flow's start."""
    return event.corr if event.corr is not None else ("flow", (event.tid, event.ts))


def gpu_by_launch(trace: KinetoEvents) -> tuple[dict[int, list[Event]], int]:
    """Each runtime call's GPU ops, by the call's ``index`` (linked by ``correlation``, else by the
    ``ac2g`` flow), and how many correlation ids several calls share. A GPU op belongs to one call:
    where calls share an id (ids restarted, traces joined), to the latest of them that started
    before it, so repeated ids never multiply the GPU work."""
    found: dict[Any, list[Event]] = {}
    for gpu in trace.gpu:
        corr = gpu.corr
        if corr is None:
            flow = trace.flow_ends.get((gpu.tid, gpu.ts))
            corr = ("flow", trace.flow_starts.get(flow)) if flow is not None else None
        if corr is not None:
            found.setdefault(corr, []).append(gpu)
    calls: dict[Any, list[Event]] = {}
    for event in trace.host:  # in time order
        if event.kind == RUNTIME and (key := launch_key(event)) in found:
            calls.setdefault(key, []).append(event)
    by_launch: dict[int, list[Event]] = {}
    repeated = 0
    for key, launches in calls.items():
        if len(launches) == 1:
            by_launch[launches[0].index] = found[key]
            continue
        starts = [e.ts for e in launches]
        for gpu in found[key]:
            at = max(0, bisect_right(starts, gpu.ts) - 1)
            by_launch.setdefault(launches[at].index, []).append(gpu)
        if isinstance(key, tuple):  # a flow's start shared by a call and the one inside it: both linked
            for event in launches:
                by_launch.setdefault(event.index, [])
        else:
            repeated += 1
    return by_launch, repeated


class _Builder:
    def __init__(
        self,
        trace: KinetoEvents,
        step: Event,
        rank: int | None,
        drop: frozenset[str],
        costs: Costs | None = None,
        comm_streams: frozenset[Any] = frozenset(),
        whatif: WhatIf | None = None,
    ) -> None:
        self.costs = costs
        self.whatif = whatif
        self.comm_streams = comm_streams  # (pid, stream) of the communication streams
        self.spans: list[overlap.Span] = []  # the step's GPU ops as traced
        self.trace = trace
        self.step = step
        self.rank = rank
        self.drop = drop
        self.nodes: list[Node] = []
        self.prev: Node | None = None  # the host timeline's last node
        self.cursor = 0  # where the host timeline ends, rounded microseconds from the step's start
        #: stream -> ([ends], [nodes]) of its GPU ops so far, in launch order
        self.streams: dict[Any, tuple[list[float], list[Node]]] = {}
        #: every GPU op so far as (end, -stream's place in ``streams``, place in its stream), and each
        #: stream's last as (end, stream's place): the cross-stream and synchronisation searches are
        #: binary searches, not a walk over every stream per op (quadratic with a stream per kernel)
        self.ends = SortedKeys()
        self.last_ends = SortedKeys()
        self.keys: list[Any] = []  # the streams in order
        self.places: dict[Any, int] = {}  # stream -> its place in ``keys``
        self.problems: Counter[tuple[str, str]] = Counter()
        self.default_group = 0  # collectives with no process-group args (put in group 0, every rank)
        self.odd_groups: Counter[str] = Counter()  # process-group names that are no group id (the same)
        world = (trace.distributed_info or {}).get("world_size")
        self.world = world if type(world) is int and 0 < world <= MAX_RANKS else None
        self.sends: Counter[int] = Counter()
        self.recvs: Counter[int] = Counter()
        self.gpu_end = step.end
        self.gpu_ops = 0
        self.comm_nodes = 0
        self.recorded: dict[int, bool] = {}

    def rt(self, t: float) -> int:
        return round(t - self.step.ts)

    def add(self, name: str, dur: int, deps: list[Node], cpu: bool = True) -> Node:
        node = Node(len(self.nodes) + 1, name, max(0, dur), [d.id for d in deps], cpu)
        self.nodes.append(node)
        return node

    def host_node(self, name: str, end: int, start: int | None = None) -> Node:
        """A node of the host timeline, after the previous one, ending at ``end``."""
        deps = [self.prev] if self.prev is not None and "cpu" not in self.drop else []
        begin = self.cursor if start is None else max(self.cursor, start)
        node = self.add(name, end - begin, deps)
        node.start = begin
        self.prev = node
        self.cursor = max(self.cursor, end)
        return node

    def gap_to(self, point: int) -> None:
        if point > self.cursor:
            if "gaps" in self.drop:
                self.cursor = point
            else:
                self.host_node(GAP_NAME, point)

    def build(self, by_launch: dict[int, list[Event]]) -> None:
        step = self.step
        pids = {step.pid} if any(e.pid == step.pid and e.kind != STEP for e in self.trace.host) else None
        events = [
            e
            for e in self.trace.host
            if step.ts <= e.ts < step.end and (pids is None or e.pid in pids) and (e.kind != STEP or e is step)
        ]
        self.carry_in(by_launch)
        stacks: dict[Any, list[Event]] = {}
        for i, event in enumerate(events):
            stack = stacks.setdefault(event.tid, [])
            while stack and stack[-1].end <= event.ts:
                stack.pop()
            self.gap_to(self.rt(event.ts))
            end = self.rt(event.end)
            if i + 1 < len(events):
                end = min(end, self.rt(events[i + 1].ts))
            launched = by_launch.get(event.index, ()) if event.kind == RUNTIME else ()
            sync = event.kind == RUNTIME and event.name in SYNC_CALLS
            waited = self.waited(event) if sync else []
            blocking = sync and (waited or launched)
            node = self.host_node(event.name, self.cursor if blocking else end)
            self.recorded[node.id] = event.kind == RUNTIME
            if self.whatif is not None:
                self.whatif.host(node, event.kind)
            if event.kind == HOST and event.name.startswith(comm.GLOO_PREFIX):
                self.host_collective(event, node, stack[::-1])
            waited += [self.gpu_node(gpu, node, event, stack[::-1]) for gpu in launched]
            if blocking:
                latest = max((n.end for n in waited if n.end <= event.end + _SLACK), default=event.ts)
                if "sync" in self.drop:  # the call keeps its traced time, waiting included
                    self.host_node(event.name + " (wait)", end)
                else:
                    wait = self.host_node(event.name + " (wait)", end, self.rt(latest))
                    wait.deps.extend(n.id for n in waited)
            if event.kind in (HOST, STEP):
                stack.append(event)
        self.gap_to(self.rt(step.end))

    def carry_in(self, by_launch: dict[int, list[Event]]) -> None:
        """GPU work launched before the step and still running or queued at its start: one GPU node
        (streams' backlogs would serialise on ASTRA-sim's one GPU), ending where the latest ends,
        that the step's first op on each such stream waits for."""
        step = self.step
        ends: dict[Any, float] = {}
        for event in self.trace.host:
            if event.ts >= step.ts:
                break
            if event.kind == RUNTIME and event.pid == step.pid:
                for gpu in by_launch.get(event.index, ()):
                    if gpu.end > step.ts:
                        key = (gpu.pid, gpu.stream)
                        ends[key] = max(ends.get(key, gpu.end), gpu.end)
        if not ends or "stream" in self.drop:
            return
        node = self.add(CARRY_IN_NAME, self.rt(max(ends.values())), [], cpu=False)
        if self.costs is not None:
            self.costs.backlog(node)
        for key, end in ends.items():
            self._push(key, end, node)

    def waited(self, call: Event) -> list[Node]:
        """Per stream, the last GPU op launched before ``call`` if it ended while the call ran."""
        ended = self.last_ends.between((call.ts, math.inf), (call.end + _SLACK, math.inf))
        return [self.streams[self.keys[place]][1][-1] for place in sorted(place for _, place in ended)]

    def _push(self, key: Any, end: float, node: Node) -> None:
        """Append a GPU op ending at ``end`` to stream ``key``."""
        ends, nodes = self.streams.setdefault(key, ([], []))
        place = self.places.setdefault(key, len(self.keys))
        if place == len(self.keys):
            self.keys.append(key)
        if ends:
            self.last_ends.remove((ends[-1], place))
        ends.append(end)
        nodes.append(node)
        self.ends.add((end, -place, len(ends) - 1))
        self.last_ends.add((end, place))

    def gpu_node(self, gpu: Event, launch: Node, call: Event, around: list[Event]) -> Node:
        key = (gpu.pid, gpu.stream)
        ends, nodes = self.streams.setdefault(key, ([], []))
        deps: list[Node] = []
        if "launch" not in self.drop:
            deps.append(launch)
        ready = call.end
        if nodes:
            ready = max(ready, ends[-1])
            if "stream" not in self.drop:
                deps.append(nodes[-1])
        if gpu.ts - ready > _SLACK and "stream" not in self.drop:
            other = self._cross_stream(key, ready, gpu.ts)
            if other is not None:
                deps.append(other)
        start = gpu.ts
        if "GraphLaunch" in call.name and ready < start:
            start = ready  # the graph's unrecorded kernels ran before its first recorded op (CUPTI)
        node = self.add(gpu.name, self.rt(gpu.end) - self.rt(start), deps, cpu=False)
        node.start = self.rt(start)
        self.gpu_ops += 1
        if comm.is_nccl_kernel(gpu.name):
            self._communication(node, gpu, around)
        elif (custom := comm.custom_comm_type(gpu.name, key in self.comm_streams)) is not None:
            self._typed(node, comm.classify_custom(custom, around))
        self.spans.append(overlap.Span(node, start - self.step.ts, gpu.end - self.step.ts, key))
        if self.costs is not None and node.comm is None:
            self.costs.kernel(node, gpu, around)
        if self.whatif is not None and node.comm is None:
            self.whatif.kernel(node, gpu, around)
        self._push(key, gpu.end, node)
        self.gpu_end = max(self.gpu_end, gpu.end)
        node.end = gpu.end
        return node

    def _cross_stream(self, own: Any, ready: float, start: float) -> Node | None:
        """The op of another stream that ended last by ``start`` (within the window), if it ended
        after ``ready``; the earlier stream's where two ended at once."""
        own_place = self.places.get(own)
        for end, place, position in self.ends.at_most((start + 0.5, math.inf, math.inf)):
            if end <= ready - 0.5 or start - end > _CROSS_STREAM_WINDOW:
                return None
            if -place != own_place:
                found: Node = self.streams[self.keys[-place]][1][position]
                return found
        return None

    def host_collective(self, event: Event, slot: Node, around: list[Event]) -> None:
        """A gloo collective (``gloo:all_reduce`` on the worker thread that did it): a communication
        node beside its slot of the host timeline (which keeps tiling the step), from where the slot
        starts (it depends on what the slot depends on), lasting its traced duration; typed by its
        name, sized by its first input (``Input Dims`` x ``Input type``). Not after the slot: where
        the host recorded nothing while the collective ran (its wait for it), the slot lasts the
        whole collective, and a node after it ran the collective twice in a row, past the step's
        end (a traced replay 19% longer than its traced step)."""
        info = comm.classify(event.name, event.args, [event, *around], self.rank, self.world)
        if info.problem is not None:
            self.problems[("gloo collective(s)", info.problem)] += 1
            return
        self._check_size(event, info)
        node = self.add(event.name, self.rt(event.end) - self.rt(event.ts), [], cpu=False)
        node.deps = list(slot.deps)
        node.start = slot.start
        self._typed(node, info)

    def _communication(self, node: Node, gpu: Event, around: list[Event]) -> None:
        info = comm.classify(gpu.name, gpu.args, around, self.rank, self.world)
        if info.problem is not None:
            self.problems[("NCCL kernel(s)", info.problem)] += 1
            return
        self._check_size(gpu, info)
        self._typed(node, info)

    def _check_size(self, event: Event, info: comm.CommInfo) -> None:
        """A message the .et's int64 ``comm_size`` cannot hold is no trace's (its elements or the
        launching op's ``Input Dims``)."""
        if info.size > _MAX_BYTES:
            raise TraceFormatError(
                self.trace.path,
                f"{event_name(event.index, event.name)}: a message of {short_value(info.size)} bytes "
                f"(its 'In msg nelems', or its launching op's 'Input Dims') is beyond {_MAX_BYTES:,}",
            )

    def _typed(self, node: Node, info: comm.CommInfo) -> None:
        if info.defaulted_group and info.kind == "coll":
            self.default_group += 1
        if info.odd_group is not None and info.kind == "coll":
            self.odd_groups[info.odd_group] += 1
        node.comm = info
        self.comm_nodes += 1
        if info.kind == "coll":
            node.type = int(NodeType.COMM_COLL_NODE)
        elif info.kind == "send":
            node.type = int(NodeType.COMM_SEND_NODE)
            assert info.peer is not None
            node.tag = self.sends[info.peer]
            self.sends[info.peer] += 1
        else:
            node.type = int(NodeType.COMM_RECV_NODE)
            assert info.peer is not None
            node.tag = self.recvs[info.peer]
            self.recvs[info.peer] += 1


def build(
    trace: KinetoEvents,
    step: int | None = None,
    rank: int | None = None,
    drop: frozenset[str] = frozenset(),
    *,
    roofline: bool = False,
    accelerator: bool = False,
    share_overlap: bool = True,
    whatif: WhatIf | None = None,
) -> KinetoGraph:
    """The graph of one step of ``trace`` (the last complete one by default); with ``roofline``,
    the GPU compute nodes' ``num_ops``/``tensor_size`` from their launching ops (``roofline.py``;
    ``accelerator``: those left without are CPU ops); ``share_overlap`` (default): kernels that
    overlapped on several streams written to end when they ended, one after another
    (``overlap.py``), else as traced (ASTRA-sim then runs them one after another); with
    ``whatif``, every kernel and host node re-timed from a device profile (``whatif.py``)."""
    unknown = drop - set(DEPENDENCY_KINDS)
    if unknown:
        raise ValueError(f"unknown dependency kinds {sorted(unknown)}; known: {', '.join(DEPENDENCY_KINDS)}")
    by_launch, repeated = gpu_by_launch(trace)
    chosen, missing = pick_step(trace, step, by_launch)
    costs = Costs(accelerator) if roofline else None
    builder = _Builder(trace, chosen, rank, drop, costs, _comm_streams(trace), whatif)
    builder.build(by_launch)
    # the rewrite adds GPU -> GPU dependencies: not in the ablation that leaves those out
    overlapped = _serialise(builder) if share_overlap and "stream" not in drop else None
    number = step_number(chosen.name)
    assert number is not None
    graph = KinetoGraph(
        builder.nodes,
        number,
        chosen.ts,
        max(chosen.dur, builder.gpu_end - chosen.ts),
        chosen.dur,
        builder.gpu_ops,
        builder.comm_nodes,
        incomplete=missing,
        overlap=overlapped,
        streams={span.node.id: span.stream for span in builder.spans},
        recorded=builder.recorded,
    )
    if missing:
        graph.warnings.append(
            f"ProfilerStep#{number}: {missing} launch(es) have no GPU op in the trace "
            "(the profiler stopped before their work was recorded); that work is left out"
        )
    if repeated:
        graph.warnings.append(
            f"{repeated:,} correlation id(s) are shared by several launches (ids restarted, or traces joined): "
            "each GPU op is given to the latest of them that started before it"
        )
    for (what, problem), count in builder.problems.items():
        graph.warnings.append(f"{count} {what} kept as compute nodes: {problem}")
    if costs is not None:
        graph.roofline = costs.assign()
        graph.warnings.extend(graph.roofline.warnings())
    if whatif is not None:
        graph.whatif = whatif.finish(builder.nodes)
        graph.warnings.extend(graph.whatif.warnings)
    if builder.odd_groups:
        names = ", ".join(repr(name[:40]) for name, _ in builder.odd_groups.most_common(3))
        more = ", ..." if len(builder.odd_groups) > 3 else ""
        graph.warnings.append(
            f"{builder.odd_groups.total():,} collective(s) name a process group that is no group id ASTRA-sim reads "
            f"(a whole number in ASCII digits, no leading zero): {names}{more}; put in the default group (every rank)"
        )
    groups = _listed_groups(trace)
    if builder.default_group and groups > 1:
        graph.warnings.append(
            f"{builder.default_group} collective(s) name no process group (no 'Process Group Name'): put in "
            f"the default group (every rank), though the job has {groups} groups (distributedInfo.pg_config)"
        )
    return graph


def _comm_streams(trace: KinetoEvents) -> frozenset[Any]:
    return comm.comm_streams(
        [((e.pid, e.stream), e.name, e.dur) for e in trace.gpu if not e.name.startswith(("Memcpy", "Memset"))]
    )


def _serialise(builder: _Builder) -> overlap.OverlapSummary | None:
    """Kernels that overlapped on several streams written to end when they ended (``overlap.py``);
    the graph renumbered where a dependency added names a later node. None where none overlapped."""
    traced = {span.node.id: span.node.dur for span in builder.spans}
    summary, added = overlap.serialise(_resources(builder.spans), builder.rt)
    if not summary.any:
        return None
    if any(dep > node.id for node, dep in added):
        order = overlap.stable_order(builder.nodes)
        if order is None:  # not seen: the traced times would have to contradict each other
            for node, dep in added:
                node.deps.remove(dep)
            for node in builder.nodes:
                node.dur = traced.get(node.id, node.dur)
            return None
        nodes = [builder.nodes[p] for p in order]
        new_id = {node.id: i for i, node in enumerate(nodes, 1)}
        for node in nodes:
            node.id = new_id[node.id]
            node.deps = [new_id[d] for d in node.deps]
        builder.nodes[:] = nodes
        summary.renumbered = True
    return summary


def _resources(spans: list[overlap.Span]) -> dict[str, list[overlap.Span]]:
    """The GPU ops by the ASTRA-sim resource they take: compute, or communication (a receive takes
    none)."""
    found: dict[str, list[overlap.Span]] = {"compute": [], "communication": []}
    for span in spans:
        node = span.node
        assert isinstance(node, Node)
        if node.comm is None:
            found["compute"].append(span)
        elif node.type != NodeType.COMM_RECV_NODE:
            found["communication"].append(span)
    return found


def _listed_groups(trace: KinetoEvents) -> int:
    config = (trace.distributed_info or {}).get("pg_config")
    return len(config) if isinstance(config, list) else 0
