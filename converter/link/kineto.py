"""Streaming Kineto (chrome trace) reader: keep only the events the linker needs, compactly.

``chakra_trace_link`` loads the whole Kineto document and wraps every event in an object. Here the
``traceEvents`` array is streamed one event at a time and only CPU ops, kernel launches and GPU
ops are kept, as slotted records. Field defaults follow the reference's ``KinetoOperator``
(``ts``/``dur`` 0, ``tid`` 0, ``External id`` -1) so the linker can reproduce its results exactly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceFormatError
from ..jsonstream import JsonObjectStream

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

    def __init__(self, event: dict[str, Any], args: dict[str, Any]) -> None:
        self.name: str = event.get("name", "")
        self.cat: str = event.get("cat", "")
        self.ph: Any = event.get("ph")
        self.ts: Any = event.get("ts", 0)
        self.dur: Any = event.get("dur", 0)
        self.excl: Any = self.dur
        self.tid: Any = event.get("tid", 0)
        self.ext: int = int(args.get("External id", -1))
        self.rf_id: Any = args.get("Record function id")
        self.corr: Any = args.get("correlation", -1)
        self.stream: Any = args.get("stream")
        self.pg_name: Any = args.get("Process Group Name")
        self.inter_dep: Any = None
        self.host_id: int | None = None

    @classmethod
    def annotation(cls, name: str, ts: Any) -> KinetoEvent:
        """The process/thread marker ops the reference inserts into its CPU op list (tid 0)."""
        return cls({"name": name, "ts": ts}, {})


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

    def thread_order(self) -> list[Any]:
        """Thread ids in order of their first event in time (the reference's dict order)."""
        return sorted(self.threads, key=lambda tid: self.threads[tid][2])


def read_kineto(path: str | os.PathLike[str]) -> KinetoTrace:
    """Stream ``path`` and return the kept events, sorted by start time (stable, as the reference)."""
    trace = KinetoTrace(os.fspath(path))
    seen_events = False
    with JsonObjectStream(path, stream_keys={"traceEvents"}) as stream:
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


#: Fields the linker uses, and the JSON values it can use them as (a missing field takes the
#: reference's default; another value makes the reference fail with a TypeError or an
#: OverflowError). Times are added to each other; ids and the pid key tables; names are searched.
_Check = tuple[tuple[str, Callable[[Any], bool], str], ...]


def _is_time(value: Any) -> bool:
    """A number, and one that mixes with floats (an integer beyond a float's range does not)."""
    return isinstance(value, float) or (isinstance(value, int) and -_FLOAT_LIMIT < value < _FLOAT_LIMIT)


def _is_key(value: Any) -> bool:
    return isinstance(value, int | float | str | bool | None)


_FLOAT_LIMIT = 1 << 1023
_TIMED: _Check = (("ts", _is_time, "a number"), ("dur", _is_time, "a number"))  # every event with a tid
_EVERY: _Check = (("tid", _is_key, "a number or a string"), ("cat", _is_key, "a string"))
_KEPT: _Check = (("name", lambda v: isinstance(v, str), "a string"), ("pid", _is_key, "a number or a string"))
_ARGS: _Check = (
    ("Record function id", _is_key, "a number or a string"),
    ("correlation", _is_key, "a number or a string"),
)
_SHOWN = 60  # characters of a bad value shown in an error


def _read_events(trace: KinetoTrace, events: Any) -> None:
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise TraceFormatError(trace.path, f"traceEvents[{index}] is not a JSON object")
        _check(trace.path, index, event, event, _EVERY if event.get("tid", 0) is None else _EVERY + _TIMED)
        _track_time(trace, event, index)
        cat = event.get("cat", "")
        if cat not in CPU_CATEGORIES and cat not in GPU_CATEGORIES and cat not in LAUNCH_CATEGORIES:
            continue
        _check(trace.path, index, event, event, _KEPT)
        args = event.get("args") or {}
        if not isinstance(args, dict):
            raise TraceFormatError(trace.path, f"{_event_name(index, event)}: 'args' must be a JSON object, "
                                               f"got {_shown(args)}")
        _check(trace.path, index, event, args, _ARGS)
        try:
            kept = KinetoEvent(event, args)
        except (TypeError, ValueError) as exc:
            raise TraceFormatError(trace.path, f"{_event_name(index, event)}: bad 'External id': {exc}") from None
        _classify(trace, kept, event)


def _check(path: str, index: int, event: dict[str, Any], values: dict[str, Any], fields: _Check) -> None:
    for key, valid, expected in fields:
        if key in values and not valid(values[key]):
            raise TraceFormatError(
                path, f"{_event_name(index, event)}: '{key}' must be {expected}, got {_shown(values[key])}"
            )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def _event_name(index: int, event: dict[str, Any]) -> str:
    name = event.get("name")
    return f"traceEvents[{index}] ({_shown(name)})" if isinstance(name, str) else f"traceEvents[{index}]"


def _classify(trace: KinetoTrace, kept: KinetoEvent, event: dict[str, Any]) -> None:
    if kept.cat in CPU_CATEGORIES:
        if PROFILER_STEP not in kept.name:
            trace.cpu_ops.append(kept)
            trace.pids.add(event.get("pid"))
    elif kept.cat in GPU_CATEGORIES:
        trace.gpu_ops.append(kept)
    elif kept.name in LAUNCH_NAMES:
        if kept.corr in trace.launch_by_corr:
            raise TraceFormatError(
                trace.path, f"two kernel launches share correlation id {kept.corr!r}; the trace is corrupt"
            )
        trace.launch_by_corr[kept.corr] = kept


def _track_time(trace: KinetoTrace, event: dict[str, Any], index: int) -> None:
    """Process and per-thread time spans over every event with a tid, as the reference computes."""
    tid = event.get("tid", 0)
    if tid is None:
        return
    ts = event.get("ts", 0)
    end = ts + event.get("dur", 0)
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
