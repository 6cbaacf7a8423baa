"""Stream a Kineto (Chrome JSON) trace and keep, compactly, the events a replay graph needs.

The ``traceEvents`` array is streamed (``jsonstream``; runs of events decoded by msgspec, exact or
refused, as ``link/kineto.py`` does) and only these are kept, as slotted ``Event`` records:

- host events (``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``cuda_driver``) and
  ``ProfilerStep#N`` markers: the CPU timeline;
- device work (``kernel``, ``gpu_memcpy``, ``gpu_memset``): the GPU timeline;
- ``ac2g`` flow events, which link a launch to its GPU work where ``correlation`` is missing.

Everything else (python_function stacks, memory instants, metadata rows, ``cuda_sync`` markers) is
skipped as it streams by; the time it covers is kept as the gaps between the kept host events.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..jsonstream import EVENT_BOUNDARY, DecodedRun, JsonObjectStream

HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
FLOW_CATEGORIES = frozenset({"ac2g"})
STEP_CATEGORIES = frozenset({"cpu_op", "user_annotation"})  # not gpu_user_annotation (its GPU-side copy)
STEP_PREFIX = "ProfilerStep#"


class _Args(msgspec.Struct, gc=False):
    """The ``args`` fields read (absent: None)."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    stream: Any = None
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


class _Raw(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    id: Any = None
    args: _Args | None = None


_NO_ARGS = _Args()
_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Raw]))

#: Event kinds.
HOST, RUNTIME, GPU, STEP = 0, 1, 2, 3


class Event:
    """A kept event: times in microseconds (floats), ``args`` as read."""

    __slots__ = ("args", "cat", "corr", "dur", "index", "kind", "name", "pid", "stream", "tid", "ts")

    def __init__(self, kind: int, raw: _Raw, index: int) -> None:
        args = raw.args or _NO_ARGS
        self.kind = kind
        self.index = index
        self.name: str = raw.name
        self.cat: str = raw.cat
        self.ts: float = raw.ts
        self.dur: float = raw.dur
        self.pid: Any = raw.pid
        self.tid: Any = raw.tid
        self.corr: Any = args.correlation
        self.stream: Any = args.stream if args.stream is not None else raw.tid
        self.args: _Args = args

    @property
    def end(self) -> float:
        return self.ts + self.dur


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


def read_events(path: str | os.PathLike[str]) -> KinetoEvents:
    """Stream ``path`` (``.json`` or ``.json.gz``) and return the kept events, each list in time
    order. Raises ``TraceFormatError`` for a file that is no Kineto trace or a malformed event."""
    trace = KinetoEvents(os.fspath(path))
    seen = False
    with JsonObjectStream(path, stream_keys={"traceEvents"}, batch=_RUNS, boundary=EVENT_BOUNDARY) as stream:
        for key, value in stream.items():
            if key == "traceEvents":
                seen = True
                _read(trace, value)
            elif key == "distributedInfo" and isinstance(value, dict):
                trace.distributed_info = value
            elif key == "deviceProperties" and isinstance(value, list) and value and isinstance(value[0], dict):
                name = value[0].get("name")
                trace.device_name = name if isinstance(name, str) else None
            elif key in ("nodes", "schema") and not seen:
                raise TraceFormatError(
                    trace.path, "a Chakra host or merged trace, not a Kineto trace (convert it without --kineto)"
                )
    if not seen:
        raise TraceFormatError(trace.path, "no 'traceEvents' array: not a Kineto trace")
    for events in (trace.host, trace.gpu, trace.steps):
        events.sort(key=_order)
    return trace


def _order(event: Event) -> tuple[float, float, int]:
    return (event.ts, -event.dur, event.index)  # a parent before the children it starts with


def _read(trace: KinetoEvents, elements: Iterable[Any]) -> None:
    index = 0
    for element in elements:
        for raw in element if type(element) is DecodedRun else (element,):
            if type(raw) is not _Raw:
                raw = _from_json(trace.path, index, raw)
            _keep(trace, raw, index)
            index += 1
    trace.events = index


def _from_json(path: str, index: int, value: Any) -> _Raw:
    """An event the standard library decoded (msgspec refused its run): checked the same way."""
    if not isinstance(value, dict):
        raise TraceFormatError(path, f"traceEvents[{index}] is not a JSON object")
    try:
        return msgspec.convert(value, _Raw)
    except msgspec.ValidationError as exc:
        raise TraceFormatError(path, f"traceEvents[{index}]: {exc}") from None


def _keep(trace: KinetoEvents, raw: _Raw, index: int) -> None:
    cat = raw.cat
    if cat in FLOW_CATEGORIES:
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
    event = Event(kind, raw, index)
    if kind == GPU:
        trace.gpu.append(event)
    elif kind == STEP:
        trace.steps.append(event)
        trace.host.append(event)
    else:
        trace.host.append(event)


def _check(path: str, index: int, raw: _Raw) -> None:
    where = f"traceEvents[{index}]" + (f" ({raw.name[:60]!r})" if isinstance(raw.name, str) else "")
    if not isinstance(raw.name, str):
        raise TraceFormatError(path, f"{where}: no 'name' string")
    for key in ("ts", "dur"):
        value = getattr(raw, key)
        if value is None:
            raise TraceFormatError(path, f"{where}: no '{key}'")
        if type(value) not in (int, float) or value != value or abs(value) == float("inf"):
            raise TraceFormatError(path, f"{where}: '{key}' must be a finite number, got {value!r}"[:200])
    if raw.dur < 0:
        raise TraceFormatError(path, f"{where}: negative 'dur' {raw.dur!r}")
