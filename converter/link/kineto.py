"""Streaming Kineto (chrome trace) reader: keep only the events the linker needs, compactly.

``chakra_trace_link`` loads the whole Kineto document and wraps every event in an object. Here the
``traceEvents`` array is streamed (``schema/kineto.py``'s loop and names, shared with the Kineto
front end's reader ``kineto/events.py``; runs of events decoded by msgspec into ``_Event``\\ s that
skip what the linker never reads; ``fastjson``: exact or refused) and only CPU ops, kernel launches
and GPU ops are kept, as slotted records. Field defaults follow the reference's ``KinetoOperator``
(``ts``/``dur`` 0, ``tid`` 0, ``External id`` -1) so the linker can reproduce its results exactly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..schema.kineto import (
    CPU_CATEGORIES,
    GPU_MEMCPY,
    KERNEL,
    LAUNCH_NAMES,
    PROFILER_STEP,
    RUNTIME_CATEGORIES,
    step_number,
    stream_trace,
)
from ..schema.kineto import event_name as _event_name
from ..schema.kineto import shown as _shown

GPU_CATEGORIES = frozenset({KERNEL, GPU_MEMCPY})  # the reference's (no memset)
LAUNCH_CATEGORIES = RUNTIME_CATEGORIES


class KinetoEvent:
    """One kept event; ``excl``, ``inter_dep``, ``inter_op`` and ``host_id`` are filled in by the linker."""

    __slots__ = (
        "cat",
        "corr",
        "dur",
        "excl",
        "ext",
        "host_id",
        "inter_dep",
        "inter_op",
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
        self.cat: Any = event.cat  # one of the kept categories (strings), or "" for a marker
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
        self.inter_op: KinetoEvent | None = None  # the op behind ``inter_dep`` (the by-order linking's)
        self.host_id: int | None = None

    @classmethod
    def from_dict(cls, event: dict[str, Any]) -> KinetoEvent:
        """The kept event of a decoded Kineto event (its ``args`` an object, or absent)."""
        return cls(_from_dict(event), _args(event.get("args")))

    @classmethod
    def annotation(cls, name: str, ts: Any) -> KinetoEvent:
        """The process/thread marker ops the reference inserts into its CPU op list (tid 0)."""
        return cls(_Event(name=name, ts=ts), _NO_ARGS)


#: A JSON value the linker can key a table with (``_is_key``).
_Key = int | float | str | bool | None
#: A JSON number that mixes with floats (``_is_time``); msgspec gives integers of any size, so a
#: larger one is left to the standard library's path and its check.
_Time = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)] | float


class _Args(msgspec.Struct, gc=False):
    """An event's ``args`` as the linker reads them (absent: what ``dict.get`` gives)."""

    external_id: Any = msgspec.field(default=-1, name="External id")
    rf_id: _Key = msgspec.field(default=None, name="Record function id")
    correlation: _Key = -1
    stream: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")


class _Event(msgspec.Struct, gc=False):
    """A Kineto event as the linker reads it (absent: what ``dict.get`` gives)."""

    name: Any = ""
    cat: _Key = ""
    ph: Any = None
    ts: _Time = 0
    dur: _Time = 0
    tid: _Key = 0
    pid: _Key = None
    args: _Args | None = None


_NO_ARGS = _Args()
_EVENT_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Event]))


def _from_dict(event: dict[str, Any]) -> _Event:
    """An event the standard library decoded, as ``_Event``; its ``args`` are left as decoded
    (``_args`` reads them if the event is kept)."""
    return _Event(
        name=event.get("name", ""),
        cat=event.get("cat", ""),
        ph=event.get("ph"),
        ts=event.get("ts", 0),
        dur=event.get("dur", 0),
        tid=event.get("tid", 0),
        pid=event.get("pid"),
        args=event.get("args"),
    )


def _args(args: Any) -> _Args:
    if type(args) is _Args:
        return args
    args = args or {}
    return _Args(
        external_id=args.get("External id", -1),
        rf_id=args.get("Record function id"),
        correlation=args.get("correlation", -1),
        stream=args.get("stream"),
        pg_name=args.get("Process Group Name"),
    )


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
    #: ``ProfilerStep#N`` number -> (start, duration, record-function id) of its CPU annotation
    steps: dict[int, tuple[Any, Any, Any]] = field(default_factory=dict)
    exact: bool = True  # every event was decoded by msgspec (so no float is NaN or infinite)

    def thread_order(self) -> list[Any]:
        """Thread ids in order of their first event in time (the reference's dict order)."""
        return sorted(self.threads, key=lambda tid: self.threads[tid][2])


def read_kineto(path: str | os.PathLike[str]) -> KinetoTrace:
    """Stream ``path`` and return the kept events, sorted by start time (stable, as the reference)."""
    trace = KinetoTrace(os.fspath(path))

    def top_level(key: str, value: Any, seen: bool) -> None:
        if key == "distributedInfo" and isinstance(value, dict):
            trace.distributed_info = value

    _read_events(trace, stream_trace(trace.path, _EVENT_RUNS, top_level))
    trace.cpu_ops.sort(key=_ts)
    trace.gpu_ops.sort(key=_ts)
    return trace


def _ts(event: KinetoEvent) -> Any:
    return event.ts


#: Fields the linker uses, and the JSON values it can use them as (a missing field takes the
#: reference's default; another value makes the reference fail with a TypeError or an
#: OverflowError). Times are added to each other; ids and the pid key tables; names are searched.
#: msgspec enforces the same through ``_Event``'s and ``_Args``' field types (a run it refuses is
#: decoded by the standard library, and its events checked here).
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


def _read_events(trace: KinetoTrace, events: Iterator[tuple[int, Any]]) -> None:
    for index, event in events:
        if type(event) is not _Event:
            event = _checked(trace.path, index, event)
            trace.exact = False
        _track_time(trace, event, index)
        cat = event.cat
        if cat in CPU_CATEGORIES or cat in GPU_CATEGORIES or cat in LAUNCH_CATEGORIES:
            if type(event.name) is not str:  # msgspec does not check the name: most events are not kept
                raise TraceFormatError(
                    trace.path, f"traceEvents[{index}]: 'name' must be a string, got {_shown(event.name)}"
                )
            try:
                kept = KinetoEvent(event, _args(event.args))
            except (TypeError, ValueError) as exc:
                raise TraceFormatError(
                    trace.path, f"{_event_name(index, event.name)}: bad 'External id': {exc}"
                ) from None
            _classify(trace, kept, event)


def _checked(path: str, index: int, event: Any) -> _Event:
    """An event the standard library decoded, checked as msgspec checks ``_Event``."""
    if not isinstance(event, dict):
        raise TraceFormatError(path, f"traceEvents[{index}] is not a JSON object")
    _check(path, index, event, event, _EVERY if event.get("tid", 0) is None else _EVERY + _TIMED)
    cat = event.get("cat", "")
    if cat in CPU_CATEGORIES or cat in GPU_CATEGORIES or cat in LAUNCH_CATEGORIES:
        _check(path, index, event, event, _KEPT)
        args = event.get("args") or {}
        if not isinstance(args, dict):
            raise TraceFormatError(
                path, f"{_event_name(index, event.get('name'))}: 'args' must be a JSON object, got {_shown(args)}"
            )
        _check(path, index, event, args, _ARGS)
    return _from_dict(event)


def _check(path: str, index: int, event: dict[str, Any], values: dict[str, Any], fields: _Check) -> None:
    for key, valid, expected in fields:
        if key in values and not valid(values[key]):
            raise TraceFormatError(
                path, f"{_event_name(index, event.get('name'))}: '{key}' must be {expected}, got {_shown(values[key])}"
            )


def _classify(trace: KinetoTrace, kept: KinetoEvent, event: _Event) -> None:
    if kept.cat in CPU_CATEGORIES:
        if PROFILER_STEP not in kept.name:
            trace.cpu_ops.append(kept)
            trace.pids.add(event.pid)
        elif (number := step_number(kept.name)) is not None:
            trace.steps.setdefault(number, (kept.ts, kept.dur, kept.rf_id))
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
