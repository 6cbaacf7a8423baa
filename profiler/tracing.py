"""One host trace (ExecutionTraceObserver) and one device trace (Kineto) per rank.

The observer is handed to ``torch.profiler.profile``, which starts it when the schedule enters
its active window, stops it when the window closes and unregisters it on exit: exactly once
each, so the host file is a single JSON document whose ``ProfilerStep#N`` nodes match the Kineto
trace. The schedule has ``repeat=1`` because a repeating schedule restarts the observer on
the same file. Nothing here reads the host file before the profiler has exited.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

PROFILER_STEP = "ProfilerStep#"


@dataclass(frozen=True)
class TracePaths:
    """Rank-specific file names, so ranks never share (and corrupt) one file."""

    host: Path
    device: Path

    @classmethod
    def for_rank(cls, outdir: Path, name: str, rank: int) -> TracePaths:
        return cls(outdir / f"{name}_rank{rank}_host.json", outdir / f"{name}_rank{rank}_device.json")


@dataclass(frozen=True)
class Schedule:
    """Steps skipped, profiled-but-discarded, and recorded, in that order."""

    wait: int
    warmup: int
    active: int

    @property
    def total(self) -> int:
        return self.wait + self.warmup + self.active

    def phase(self, step: int) -> str:
        """``wait``/``warmup``/``active`` inside the window, ``untraced`` after it."""
        if step < self.wait:
            return "wait"
        if step < self.wait + self.warmup:
            return "warmup"
        return "active" if step < self.total else "untraced"

    def active_steps(self) -> list[int]:
        """The ``ProfilerStep#N`` numbers the traces will contain."""
        return list(range(self.wait + self.warmup, self.total))


class Stepper(Protocol):
    def step(self) -> None: ...


class _NoProfiler:
    """Stands in for the profiler when tracing is off."""

    def step(self) -> None:
        return None


@contextmanager
def capture(
    paths: TracePaths,
    schedule: Schedule,
    cuda: bool,
    *,
    host: bool = True,
    shapes: bool = True,
    memory: bool = False,
) -> Iterator[Stepper]:
    """Profile the enclosed steps; call ``.step()`` after each training step. ``host``: the host
    execution trace too (the observer), else the Kineto trace alone; ``shapes``: Kineto's
    ``record_shapes``; ``memory``: Kineto's ``profile_memory`` (``[memory]`` events). Each hook
    costs every op it records some microseconds, which the traced step pays
    (bench/gpu/overhead.py measures it): the lightest capture is the closest to the untraced
    step."""
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile
    from torch.profiler import schedule as make_schedule

    paths.host.parent.mkdir(parents=True, exist_ok=True)
    for path in (paths.host, paths.device):
        path.unlink(missing_ok=True)  # a stale file from an earlier run must not pass for this one
    observer = ExecutionTraceObserver().register_callback(str(paths.host)) if host else None
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]

    def save_device_trace(prof: Any) -> None:
        prof.export_chrome_trace(str(paths.device))

    with profile(
        activities=activities,
        schedule=make_schedule(wait=schedule.wait, warmup=schedule.warmup, active=schedule.active, repeat=1),
        on_trace_ready=save_device_trace,
        record_shapes=shapes,
        profile_memory=memory,
        execution_trace_observer=observer,
    ) as prof:
        yield prof
    if observer is not None and observer.is_registered:
        raise RuntimeError("the execution trace observer is still registered after the profiler exited")


@contextmanager
def no_capture() -> Iterator[Stepper]:
    """Same shape as ``capture`` for untraced runs."""
    yield _NoProfiler()


def _load_one_document(path: Path) -> dict[str, Any]:
    """``json.load`` rejects a second document after the first ("Extra data"), which is the point."""
    with path.open(encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def profiler_steps(names: Iterator[str]) -> list[int]:
    """Distinct step numbers of the ``ProfilerStep#N`` names (GPU runs repeat them per stream)."""
    return sorted({int(n[len(PROFILER_STEP) :]) for n in names if n.startswith(PROFILER_STEP)})


def inspect_host(path: Path) -> dict[str, Any]:
    """Schema, node count and profiler steps of a finished host trace."""
    doc = _load_one_document(path)
    nodes = doc.get("nodes")
    if not isinstance(doc.get("schema"), str) or not isinstance(nodes, list):
        raise ValueError(f"{path}: not an execution trace (no 'schema' string and 'nodes' list)")
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "schema": doc["schema"],
        "nodes": len(nodes),
        "profiler_steps": profiler_steps(n.get("name", "") for n in nodes),
    }


def inspect_device(path: Path) -> dict[str, Any]:
    """Event count, profiler steps and distributed info of a Kineto (chrome) trace."""
    doc = _load_one_document(path)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    return {
        "path": str(path),
        "bytes": path.stat().st_size,
        "events": len(events),
        "profiler_steps": profiler_steps(str(e.get("name", "")) for e in events),
        "distributed": doc.get("distributedInfo"),
    }
