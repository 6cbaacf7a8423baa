"""Stream a Kineto (Chrome JSON) trace and keep, compactly, the events a replay graph needs.

The ``traceEvents`` array is streamed (``schema/kineto.py``'s loop, shared with the linker's reader
``link/kineto.py``: runs of events decoded by msgspec, exact or refused) and only these are kept,
as compact ``Event`` records (names, pids, tids and ``args`` shared between equal ones; of the
``args``, only the correlation, the stream, the collective args, the recorded shapes and FLOPs and a
copy's bytes):

- host events (``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``cuda_driver``) and
  ``ProfilerStep#N`` markers: the CPU timeline;
- device work (``kernel``, ``gpu_memcpy``, ``gpu_memset``): the GPU timeline;
- ``ac2g`` flow events, which link a launch to its GPU work where ``correlation`` is missing.

Everything else (python_function stacks, memory instants, metadata rows, ``cuda_sync`` markers) is
skipped as it streams by; the time it covers is kept as the gaps between the kept host events.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec.structs import astuple

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..schema.kineto import (
    CPU_CATEGORIES,
    FLOW_CATEGORY,
    GPU_MEMCPY,
    GPU_MEMSET,
    KERNEL,
    RUNTIME_CATEGORIES,
    STEP_PREFIX,
    event_name,
    stream_trace,
)

HOST_CATEGORIES = CPU_CATEGORIES | RUNTIME_CATEGORIES
GPU_CATEGORIES = frozenset({KERNEL, GPU_MEMCPY, GPU_MEMSET})
STEP_CATEGORIES = CPU_CATEGORIES  # not gpu_user_annotation (its GPU-side copy)

__all__ = ["GPU", "HOST", "RUNTIME", "STEP", "STEP_PREFIX", "Event", "KinetoEvents", "read_events"]


class _Args(msgspec.Struct, gc=False, omit_defaults=True):
    """The ``args`` an event keeps beyond its correlation and stream (absent: None): collective
    args, recorded shapes and FLOPs, a copy's bytes. Equal ones are shared between events."""

    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    group_size: Any = msgspec.field(default=None, name="Group size")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    src_rank: Any = msgspec.field(default=None, name="Src Rank")
    dst_rank: Any = msgspec.field(default=None, name="Dst Rank")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    flops: Any = None
    bytes: Any = None


class _RawArgs(_Args, gc=False):
    """An event's ``args`` as decoded: the kept ones, and the correlation and stream."""

    correlation: Any = None
    stream: Any = None


class _Raw(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    id: Any = None
    args: _RawArgs | None = None


_NO_ARGS = _Args()
_KEPT = len(_Args.__struct_fields__)
_NONE = (None,) * _KEPT
_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Raw]))
_ENCODE = msgspec.json.Encoder().encode

#: The largest time or duration taken (microseconds: 285 years; the .et's times are whole
#: microseconds in 64 bits), and message size in elements (16-byte elements stay in the int64
#: ``comm_size``).
MAX_TIME = float(1 << 53)
MAX_ELEMENTS = 1 << 58
MAX_COUNT = (1 << 63) - 1  # the profiler's ``flops``: an int64

#: Event kinds.
HOST, RUNTIME, GPU, STEP = 0, 1, 2, 3


class Event:
    """A kept event, compactly: times in microseconds (floats); names, pids, tids and ``args``
    shared between the events that have equal ones (``_Args``; ``_NO_ARGS`` for none)."""

    __slots__ = ("args", "corr", "dur", "index", "kind", "name", "pid", "stream", "tid", "ts")

    def __init__(self, kind: int, raw: _Raw, index: int, args: _Args, shared: dict[Any, Any]) -> None:
        raw_args = raw.args
        self.kind = kind
        self.index = index
        self.name: str = shared.setdefault(raw.name, raw.name)
        self.ts: float = raw.ts
        self.dur: float = raw.dur
        self.pid: Any = shared.setdefault(raw.pid, raw.pid) if _hashable(raw.pid) else raw.pid
        self.tid: Any = shared.setdefault(raw.tid, raw.tid) if _hashable(raw.tid) else raw.tid
        self.corr: Any = raw_args.correlation if raw_args is not None else None
        stream = raw_args.stream if raw_args is not None else None
        self.stream: Any = stream if stream is not None else self.tid
        self.args: _Args = args

    @property
    def end(self) -> float:
        return self.ts + self.dur


def _hashable(value: Any) -> bool:
    return type(value) in (int, str)  # not float: 1.0 would become 1


@dataclass
class KinetoEvents:
    """What ``read_events`` keeps of one trace."""

    path: str
    host: list[Event] = field(default_factory=list)
    gpu: list[Event] = field(default_factory=list)
    steps: list[Event] = field(default_factory=list)
    #: flow id -> (tid, ts) of its start (``s``, on the launching thread) and end (``f``, on a stream)
    flow_starts: dict[Any, tuple[Any, float]] = field(default_factory=dict)
    flow_ends: dict[tuple[Any, float], Any] = field(default_factory=dict)
    distributed_info: dict[str, Any] | None = None
    device_name: str | None = None
    events: int = 0
    record_shapes: bool = False  # the trace's top-level ``record_shapes`` flag
    #: names, pids, tids and args (by their JSON) shared between the kept events
    shared: dict[Any, Any] = field(default_factory=dict, repr=False)


def read_events(path: str | os.PathLike[str]) -> KinetoEvents:
    """Stream ``path`` (``.json`` or ``.json.gz``) and return the kept events, each list in time
    order. Raises ``TraceFormatError`` for a file that is no Kineto trace or a malformed event."""
    trace = KinetoEvents(os.fspath(path))

    def top_level(key: str, value: Any, seen: bool) -> None:
        if key == "distributedInfo" and isinstance(value, dict):
            trace.distributed_info = value
        elif key == "deviceProperties" and isinstance(value, list) and value and isinstance(value[0], dict):
            name = value[0].get("name")
            trace.device_name = name if isinstance(name, str) else None
        elif key == "record_shapes":
            trace.record_shapes = value in (1, True)
        elif key in ("nodes", "schema") and not seen:
            raise TraceFormatError(
                trace.path, "a Chakra host or merged trace, not a Kineto trace: convert it as a host trace"
            )

    count = 0
    for index, raw in stream_trace(trace.path, _RUNS, top_level):
        if type(raw) is not _Raw:
            raw = _from_json(trace.path, index, raw)
        _keep(trace, raw, index)
        count = index + 1
    trace.events = count
    trace.shared.clear()
    for events in (trace.host, trace.gpu, trace.steps):
        events.sort(key=_order)
    return trace


def _order(event: Event) -> tuple[float, float, int]:
    return (event.ts, -event.dur, event.index)  # a parent before the children it starts with


def _from_json(path: str, index: int, value: Any) -> _Raw:
    """An event the standard library decoded (msgspec refused its run): checked the same way."""
    if not isinstance(value, dict):
        raise TraceFormatError(path, f"traceEvents[{index}] is not a JSON object")
    try:
        return msgspec.convert(value, _Raw)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(path, f"traceEvents[{index}]: {exc}") from None


def _kept_args(raw: _Raw, shared: dict[Any, Any]) -> _Args:
    """The event's kept ``args``, one object for equal ones."""
    args = raw.args
    if args is None:
        return _NO_ARGS
    values = astuple(args)[:_KEPT]  # a subclass's fields come after its base's
    if values == _NONE:
        return _NO_ARGS
    kept = _Args(*values)
    key = _ENCODE(kept)
    return shared.setdefault(key, kept)  # type: ignore[no-any-return]


def _keep(trace: KinetoEvents, raw: _Raw, index: int) -> None:
    cat = raw.cat
    if cat == FLOW_CATEGORY:
        if raw.ph in ("s", "f"):
            _check_key(trace.path, index, raw.name, "id", raw.id)
            _check_key(trace.path, index, raw.name, "tid", raw.tid)
        if raw.ph == "s":
            trace.flow_starts[raw.id] = (raw.tid, raw.ts)
        elif raw.ph == "f":
            trace.flow_ends[(raw.tid, raw.ts)] = raw.id
        return
    if raw.ph != "X":
        return
    name = raw.name
    if type(name) is str and name.startswith(STEP_PREFIX) and cat in STEP_CATEGORIES:
        kind = STEP
    elif cat in HOST_CATEGORIES:
        kind = RUNTIME if cat in RUNTIME_CATEGORIES else HOST
    elif cat in GPU_CATEGORIES:
        kind = GPU
    else:
        return
    _check(trace.path, index, raw)
    event = Event(kind, raw, index, _kept_args(raw, trace.shared), trace.shared)
    if kind == GPU:
        trace.gpu.append(event)
    elif kind == STEP:
        trace.steps.append(event)
        trace.host.append(event)
    else:
        trace.host.append(event)


def _check(path: str, index: int, raw: _Raw) -> None:
    where = event_name(index, raw.name)
    if not isinstance(raw.name, str):
        raise TraceFormatError(path, f"{where}: no 'name' string")
    for key in ("ts", "dur"):
        value = getattr(raw, key)
        if value is None:
            raise TraceFormatError(path, f"{where}: no '{key}'")
        if type(value) not in (int, float) or value != value or abs(value) == float("inf"):
            raise TraceFormatError(path, f"{where}: '{key}' must be a finite number, got {value!r}"[:200])
        if abs(value) > MAX_TIME:
            raise TraceFormatError(
                path, f"{where}: '{key}' {short_value(value)} is beyond {MAX_TIME:,.0f} us (285 years)"
            )
    if raw.dur < 0:
        raise TraceFormatError(path, f"{where}: negative 'dur' {raw.dur!r}")
    for key in ("pid", "tid"):
        _check_key(path, index, raw.name, key, getattr(raw, key))
    args = raw.args
    if args is None:
        return
    _check_key(path, index, raw.name, "correlation", args.correlation)
    _check_key(path, index, raw.name, "stream", args.stream)
    for key, value in (("In msg nelems", args.in_nelems), ("Out msg nelems", args.out_nelems)):
        if type(value) is int and value > MAX_ELEMENTS:
            raise TraceFormatError(path, f"{where}: '{key}' {short_value(value)} is beyond {MAX_ELEMENTS:,} elements")
    if type(args.flops) is int and args.flops > MAX_COUNT:
        raise TraceFormatError(path, f"{where}: 'flops' {short_value(args.flops)} is beyond {MAX_COUNT:,}")


def _check_key(path: str, index: int, name: Any, key: str, value: Any) -> None:
    """Ids the graph looks events up by: a number or a string (or absent)."""
    if value is not None and type(value) not in (int, float, str):
        shown = short_value(value)
        raise TraceFormatError(path, f"{event_name(index, name)}: '{key}' must be a number or a string, got {shown}")


def short_value(value: Any) -> str:
    """A value for a message: a huge integer as 1e+30, anything else its repr, cut at 60 characters."""
    if type(value) is int and abs(value) >= 10**15:
        digits = str(abs(value))
        sign = "-" if value < 0 else ""
        return f"{value:.3g}" if len(digits) < 300 else f"{sign}{digits[0]}.{digits[1:3]}e+{len(digits) - 1}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
