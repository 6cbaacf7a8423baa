"""Kineto's ``[memory]`` events (``profile_memory=True``), each put in the phase that made it.

A ``[memory]`` instant carries ``Addr``, ``Bytes`` (negative for a free), ``Total Allocated``,
``Device Type`` (0 CPU, 1 CUDA) and ``Device Id``. The trace is streamed once
(``schema/kineto.py``); only these instants, the CPU op and annotation spans (to name the phase
of each allocation) and the ``ProfilerStep#N`` spans are kept, as tuples.

The phase of an allocation is read from the spans that enclose it on its thread: a
communication op (``c10d::``, ``record_param_comms``, ``nccl:``/``gloo:``, FSDP's all-gather and
reduce-scatter), the optimizer (``Optimizer.step#``; ``Optimizer.zero_grad#``), the backward
pass (``autograd::engine::evaluate_function``), else the forward pass.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..fastjson import ExactDecoder
from ..schema.kineto import CPU_CATEGORIES, STEP_PREFIX, stream_trace

MEMORY_EVENT = "[memory]"
CPU_DEVICE, CUDA_DEVICE = 0, 1

#: Phases, in the order a step goes through them.
FORWARD, BACKWARD, OPTIMIZER, COMMUNICATION = "forward", "backward", "optimizer", "communication"

_COMM_MARKERS = (
    "c10d::",
    "record_param_comms",
    "nccl:",
    "gloo:",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "all_reduce",
    "allreduce",
    "broadcast",
    "FSDP::all_gather",
    "FSDP::post_backward_reduce",
)


class _Args(msgspec.Struct, gc=False):
    addr: Any = msgspec.field(default=None, name="Addr")
    nbytes: Any = msgspec.field(default=None, name="Bytes")
    total: Any = msgspec.field(default=None, name="Total Allocated")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")


class _Raw(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    tid: Any = None
    args: _Args | None = None


_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Raw]))


@dataclass(frozen=True)
class Allocation:
    """One ``[memory]`` event: ``nbytes`` < 0 frees."""

    ts: float
    addr: int
    nbytes: int
    total: int
    phase: str


@dataclass
class KinetoMemory:
    """The memory events of one device of one rank's Kineto trace, in time order."""

    path: str
    device_type: int
    events: list[Allocation] = field(default_factory=list)
    steps: list[tuple[float, float]] = field(default_factory=list)  # ProfilerStep spans (start, end)
    devices_seen: set[int] = field(default_factory=set)


def _get(event: Any, key: str) -> Any:
    return event.get(key) if isinstance(event, dict) else getattr(event, key, None)


def _arg(args: Any, key: str, json_key: str) -> Any:
    if args is None:
        return None
    return args.get(json_key) if isinstance(args, dict) else getattr(args, key, None)


def phase_of_name(name: str) -> str | None:
    """The phase an op or annotation name marks by itself (None: it marks none)."""
    if any(marker in name for marker in _COMM_MARKERS):
        return COMMUNICATION
    if name.startswith("Optimizer."):
        return OPTIMIZER
    if name.startswith("autograd::engine::evaluate_function"):
        return BACKWARD
    return None


def _phase(names: list[str]) -> str:
    """The phase the innermost marking span says (outermost first in ``names``): a collective
    inside the backward pass is communication, an optimizer's op is the optimizer's wherever a
    tracer filed it."""
    phase = FORWARD
    for name in names:
        mine = phase_of_name(name)
        if mine is not None:
            phase = mine
    return phase


def read_memory(path: str | os.PathLike[str], device_type: int | None = None) -> KinetoMemory:
    """The ``[memory]`` events of ``path`` for ``device_type`` (None: CUDA where the trace has
    CUDA events, else CPU), each with its phase. Empty ``events`` when the trace has none."""
    raw: list[tuple[float, int, int, int, int, Any]] = []  # ts, addr, bytes, total, device type, tid
    spans: dict[Any, list[tuple[float, float, str]]] = {}
    steps: list[tuple[float, float]] = []
    for _, event in stream_trace(path, _RUNS, lambda *_: None):
        name = _get(event, "name")
        ts = _get(event, "ts")
        if not isinstance(ts, (int, float)) or not isinstance(name, str):
            continue
        if name == MEMORY_EVENT:
            args = _get(event, "args")
            values = [
                _arg(args, k, j)
                for k, j in (
                    ("addr", "Addr"),
                    ("nbytes", "Bytes"),
                    ("total", "Total Allocated"),
                    ("device_type", "Device Type"),
                )
            ]
            if all(isinstance(v, int) for v in values):
                raw.append((float(ts), values[0], values[1], values[2], values[3], _get(event, "tid")))
            continue
        dur = _get(event, "dur")
        if _get(event, "ph") != "X" or _get(event, "cat") not in CPU_CATEGORIES or not isinstance(dur, (int, float)):
            continue
        if name.startswith(STEP_PREFIX):
            steps.append((float(ts), float(ts) + dur))
        spans.setdefault(_get(event, "tid"), []).append((float(ts), float(ts) + dur, name))
    seen = {r[4] for r in raw}
    if device_type is None:
        device_type = CUDA_DEVICE if CUDA_DEVICE in seen else CPU_DEVICE
    out = KinetoMemory(os.fspath(path), device_type, steps=sorted(steps), devices_seen=seen)
    raw = sorted((r for r in raw if r[4] == device_type), key=lambda r: r[0])
    for tid in spans:
        spans[tid].sort(key=lambda s: (s[0], -s[1]))
    walkers = {tid: _Walker(v) for tid, v in spans.items()}
    for ts, addr, nbytes, total, _, tid in raw:
        walker = walkers.get(tid)
        names = walker.at(ts) if walker is not None else []
        out.events.append(Allocation(ts, addr, nbytes, total, _phase(names)))
    return out


class _Walker:
    """The spans of one thread that are open at a time, for times given in increasing order:
    spans nest, so a stack of the open ones, popped when they end, is all that is kept."""

    def __init__(self, spans: list[tuple[float, float, str]]) -> None:
        self._spans = spans  # sorted by start, the longer first on a tie
        self._next = 0
        self._open: list[tuple[float, float, str]] = []

    def at(self, ts: float) -> list[str]:
        """Names of the spans that contain ``ts``, outermost first."""
        while self._next < len(self._spans) and self._spans[self._next][0] <= ts:
            span = self._spans[self._next]
            while self._open and self._open[-1][1] < span[0]:
                self._open.pop()
            self._open.append(span)
            self._next += 1
        while self._open and self._open[-1][1] < ts:
            self._open.pop()
        return [name for _, end, name in self._open if end >= ts]
