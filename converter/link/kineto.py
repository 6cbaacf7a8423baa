"""Streaming Kineto (chrome trace) reader: keep only the events the linker needs, compactly.

``chakra_trace_link`` loads the whole Kineto document and wraps every event in an object. Here the
``traceEvents`` array is streamed (runs of events decoded by msgspec into ``_Event``\\ s that skip
what the linker never reads; ``fastjson``: exact or refused) and only CPU ops, kernel launches and
GPU ops are kept, as slotted records. Field defaults follow the reference's ``KinetoOperator``
(``ts``/``dur`` 0, ``tid`` 0, ``External id`` -1) so the linker can reproduce its results exactly.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..jsonstream import EVENT_BOUNDARY, DecodedRun, JsonObjectStream

CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy"})
LAUNCH_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
LAUNCH_NAMES = frozenset(
    {
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyToSymbol",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipMemcpyWithStream",
        "hipMemcpyAsync",
    }
)
PROFILER_STEP = "ProfilerStep"


class KinetoEvent:
    """One kept event; ``excl``, ``inter_dep`` and ``host_id`` are filled in by the linker."""

    __slots__ = (
        "cat",
        "corr",
        "dur",
        "excl",
        "ext",
        "host_id",
        "inter_dep",
        "name",
        "pg_name",
        "ph",
        "rf_id",
        "stream",
        "tid",
        "ts",
    )

    def __init__(self, event: _Event, args: _Args) -> None:
        self.name: str = event.name
        self.cat: str = event.cat
        self.ph: Any = event.ph
        self.ts: Any = event.ts
        self.dur: Any = event.dur
        self.excl: Any = self.dur
        self.tid: Any = event.tid
        self.ext: int = int(args.external_id)
        self.rf_id: Any = args.rf_id
        self.corr: Any = args.correlation
        self.stream: Any = args.stream
        self.pg_name: Any = args.pg_name
        self.inter_dep: Any = None
        self.host_id: int | None = None

    @classmethod
    def from_dict(cls, event: dict[str, Any]) -> KinetoEvent:
        """The kept event of a decoded Kineto event (its ``args`` an object, or absent)."""
        return cls(_from_dict(event), _args(event.get("args")))

    @classmethod
    def annotation(cls, name: str, ts: Any) -> KinetoEvent:
        """The process/thread marker ops the reference inserts into its CPU op list (tid 0)."""
        return cls(_Event(name=name, ts=ts), _NO_ARGS)


class _Args(msgspec.Struct, gc=False):
    """An event's ``args`` as the linker reads them (absent: what ``dict.get`` gives)."""

    external_id: Any = msgspec.field(default=-1, name="External id")
    rf_id: Any = msgspec.field(default=None, name="Record function id")
    correlation: Any = -1
    stream: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")


class _Event(msgspec.Struct, gc=False):
    """A Kineto event as the linker reads it (absent: what ``dict.get`` gives)."""

    name: Any = ""
    cat: Any = ""
    ph: Any = None
    ts: Any = 0
    dur: Any = 0
    tid: Any = 0
    pid: Any = None
    args: _Args | None = None


_NO_ARGS = _Args()
_EVENT_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Event]))


def _from_dict(event: dict[str, Any]) -> _Event:
    """An event the standard library decoded, as ``_Event``; its ``args`` are left as decoded
    (``_args`` reads them if the event is kept)."""
    return _Event(name=event.get("name", ""), cat=event.get("cat", ""), ph=event.get("ph"), ts=event.get("ts", 0),
                  dur=event.get("dur", 0), tid=event.get("tid", 0), pid=event.get("pid"), args=event.get("args"))


def _args(args: Any) -> _Args:
    if type(args) is _Args:
        return args
    args = args or {}
    return _Args(external_id=args.get("External id", -1), rf_id=args.get("Record function id"),
                 correlation=args.get("correlation", -1), stream=args.get("stream"),
                 pg_name=args.get("Process Group Name"))


@dataclass
class KinetoTrace:
    """The linker's view of a Kineto trace, with every list in the reference's sorted order."""

    path: str
    cpu_ops: list[KinetoEvent] = field(default_factory=list)
    gpu_ops: list[KinetoEvent] = field(default_factory=list)
    launch_by_corr: dict[Any, KinetoEvent] = field(default_factory=dict)
    #: tid -> [start, end, (ts, index) of its first event]; the reference's ``thread_info``.
    threads: dict[Any, list[Any]] = field(default_factory=dict)
    process_start: Any = sys.maxsize
    process_end: Any = 0
    distributed_info: dict[str, Any] | None = None
    pids: set[Any] = field(default_factory=set)
    exact: bool = True  # every event was decoded by msgspec (so no float is NaN or infinite)

    def thread_order(self) -> list[Any]:
        """Thread ids in order of their first event in time (the reference's dict order)."""
        return sorted(self.threads, key=lambda tid: self.threads[tid][2])


def read_kineto(path: str | os.PathLike[str]) -> KinetoTrace:
    """Stream ``path`` and return the kept events, sorted by start time (stable, as the reference)."""
    trace = KinetoTrace(os.fspath(path))
    seen_events = False
    with JsonObjectStream(path, stream_keys={"traceEvents"}, batch=_EVENT_RUNS, boundary=EVENT_BOUNDARY) as stream:
        for key, value in stream.items():
            if key == "traceEvents":
                seen_events = True
                _read_events(trace, value)
            elif key == "distributedInfo" and isinstance(value, dict):
                trace.distributed_info = value
    if not seen_events:
        raise TraceFormatError(trace.path, "no 'traceEvents' array: not a Kineto device trace")
    trace.cpu_ops.sort(key=_ts)
    trace.gpu_ops.sort(key=_ts)
    return trace


def _ts(event: KinetoEvent) -> Any:
    return event.ts


def _read_events(trace: KinetoTrace, elements: Any) -> None:
    index = 0
    for element in elements:
        for event in element if type(element) is DecodedRun else (element,):
            if type(event) is not _Event:
                if not isinstance(event, dict):
                    raise TraceFormatError(trace.path, f"traceEvents[{index}] is not a JSON object")
                event = _from_dict(event)
                trace.exact = False
            _track_time(trace, event, index)
            cat = event.cat
            if cat in CPU_CATEGORIES or cat in GPU_CATEGORIES or cat in LAUNCH_CATEGORIES:
                try:
                    kept = KinetoEvent(event, _args(event.args))
                except (TypeError, ValueError) as exc:
                    raise TraceFormatError(trace.path, f"traceEvents[{index}]: bad 'External id': {exc}") from None
                _classify(trace, kept, event)
            index += 1


def _classify(trace: KinetoTrace, kept: KinetoEvent, event: _Event) -> None:
    if kept.cat in CPU_CATEGORIES:
        if PROFILER_STEP not in kept.name:
            trace.cpu_ops.append(kept)
            trace.pids.add(event.pid)
    elif kept.cat in GPU_CATEGORIES:
        trace.gpu_ops.append(kept)
    elif kept.name in LAUNCH_NAMES:
        if kept.corr in trace.launch_by_corr:
            raise TraceFormatError(
                trace.path, f"two kernel launches share correlation id {kept.corr!r}; the trace is corrupt"
            )
        trace.launch_by_corr[kept.corr] = kept


def _track_time(trace: KinetoTrace, event: _Event, index: int) -> None:
    """Process and per-thread time spans over every event with a tid, as the reference computes."""
    tid = event.tid
    if tid is None:
        return
    ts = event.ts
    end = ts + event.dur
    trace.process_start = min(trace.process_start, ts)
    trace.process_end = max(trace.process_end, end)
    span = trace.threads.get(tid)
    if span is None:
        trace.threads[tid] = [min(sys.maxsize, ts), max(0, end), (ts, index)]
        return
    span[0] = min(span[0], ts)
    span[1] = max(span[1], end)
    if ts < span[2][0]:
        span[2] = (ts, index)
