"""The second front end: a Kineto (Chrome JSON) trace alone -> an ASTRA-sim-ready ``.et``.

``events`` streams the trace and keeps its host, runtime and GPU events; ``graph`` builds one
ProfilerStep's dependency graph (host timeline with its gaps, CPU -> GPU launches, GPU -> CPU
synchronisation, GPU -> GPU stream order and cross-stream waits); ``comm`` types NCCL kernels (and
other communication kernels, ``schema/comm_kernels.py``) as communication nodes; ``overlap`` writes
kernels that overlapped on several streams for one-at-a-time resources; ``write`` encodes the graph.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .. import baseline
from .. import overhead as tracing
from ..arguments import MAX_RANKS
from ..compact.rewrite import CompactResult
from ..devices.profile import DeviceProfile
from ..errors import TraceContentError
from ..et.encode import WORLD_SIZE
from ..io.output import check_output
from ..io.read import check_input
from ..job.metadata import job_metadata
from . import untrace
from .events import KinetoEvents, read_events
from .graph import DEPENDENCY_KINDS, KinetoGraph, build
from .roofline import KinetoRoofline
from .whatif import WhatIf, WhatIfSummary
from .write import write, write_compacted

__all__ = [
    "DEPENDENCY_KINDS",
    "KinetoConversion",
    "KinetoEvents",
    "KinetoGraph",
    "KinetoRoofline",
    "build",
    "convert_kineto",
    "read_events",
    "trace_rank",
]


@dataclass
class KinetoConversion:
    """What ``convert_kineto`` did."""

    input_path: str
    output_path: str
    rank: int | None
    step: int
    nodes: int
    gpu_ops: int
    comm_nodes: int
    events: int
    measured_us: float
    cpu_span_us: float
    device: str | None
    seconds: float
    warnings: list[str] = field(default_factory=list)
    roofline: KinetoRoofline | None = None
    compaction: CompactResult | None = None  # with ``compact``
    overlap: str | None = None  # what was done to kernels that overlapped on several streams
    world_size: int | None = None  # the job's ranks, from distributedInfo (written in the metadata)
    overhead: tracing.Removed | None = None  # the profiler's time taken out (None: kept)
    whatif: WhatIfSummary | None = None  # with ``device_profile``


def trace_rank(events: KinetoEvents) -> int | None:
    """The rank in ``distributedInfo``, if any; one past the ranks a job can have is refused."""
    info = events.distributed_info or {}
    rank = info.get("rank")
    if type(rank) is int and rank >= MAX_RANKS:
        raise TraceContentError(
            events.path,
            f"distributedInfo's rank {rank if rank < 10**9 else f'{rank:.3g}'} is beyond a job's ranks "
            f"(0 to {MAX_RANKS - 1:,})",
        )
    return rank if type(rank) is int and rank >= 0 else None


def convert_kineto(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    *,
    step: int | None = None,
    rank: int | None = None,
    drop: frozenset[str] = frozenset(),
    roofline: bool = False,
    accelerator: bool = False,
    compact: bool = False,
    serial_streams: bool = False,
    tracing_overhead: str | float = tracing.AUTO,
    device_profile: DeviceProfile | None = None,
    source_profile: DeviceProfile | None = None,
) -> KinetoConversion:
    """Convert one ProfilerStep (``step``, else the last complete one) of a Kineto trace into an
    ASTRA-sim-ready ``.et``. ``rank`` overrides ``distributedInfo``'s; ``roofline``: the GPU compute
    nodes' ``num_ops``/``tensor_size`` from their launching ops (``accelerator``: those without are
    written as CPU ops); ``compact``: the output compacted (``docs/compact.md``). Nothing is written
    on error. ``serial_streams``: kernels that overlapped on several streams keep their traced
    durations (default: written to end when they ended, one after another, ``overlap.py``);
    ``tracing_overhead``: the profiler's time taken out of the host timeline (``overhead.py``:
    ``auto``, ``none`` or microseconds per recorded op; none where a device profile re-times the
    host). ``device_profile``: every kernel and host node re-timed for that device (``whatif.py``;
    ``source_profile``: the capture's GPU's, kernels scaled by the two)."""
    started = time.perf_counter()
    source = os.fspath(input_path)
    check_input(source)
    target = check_output(output_path, source)
    events = read_events(source)
    own_rank = rank if rank is not None else trace_rank(events)
    whatif = None if device_profile is None else WhatIf(device_profile, source_profile)
    graph = build(
        events,
        step,
        own_rank,
        drop,
        roofline=roofline,
        accelerator=accelerator,
        share_overlap=not serial_streams,
        whatif=whatif,
    )
    if graph.whatif is not None:
        graph.warnings.extend(other_device(events.device_name, graph.whatif))
    # a what-if that re-times the host from its profile's costs leaves no profiler time to take out
    retimed_host = graph.whatif is not None and graph.whatif.host_whatif_us is not None
    model = None if retimed_host else tracing.choose(tracing_overhead, untrace.tracing(events), source)
    removed = untrace.apply(graph, model) if model is not None else None
    if graph.whatif is None:  # a what-if's step is no replay's: nothing to judge it against here
        graph.baseline = baseline.of(model, removed, source, graph.measured_us).note()
    pid = graph_pid(events)
    job = job_metadata(events.distributed_info or {}, own_rank)
    compaction = write_compacted(graph, target, own_rank, pid, job) if compact else None
    if compaction is None:
        write(graph, target, own_rank, pid, job)
    return KinetoConversion(
        source,
        os.fspath(output_path),
        own_rank,
        graph.step,
        len(graph.nodes),
        graph.gpu_ops,
        graph.comm_nodes,
        events.events,
        graph.measured_us,
        graph.cpu_span_us,
        events.device_name,
        time.perf_counter() - started,
        graph.warnings,
        graph.roofline,
        compaction,
        graph.overlap.describe() if graph.overlap is not None else None,
        job.get(WORLD_SIZE),
        removed,
        graph.whatif,
    )


def other_device(captured: str | None, whatif: WhatIfSummary) -> list[str]:
    """A what-if for another GPU than the capture's, without the capture's profile: the kernels the
    profile has no point for keep the capture's GPU's times (said, with the fix); a source profile of
    another GPU than the capture's scales from the wrong times (said)."""
    if captured is not None and whatif.source_device is not None and not _same_device(captured, whatif.source_device):
        return [
            f"`source_profile`: the trace was captured on {captured}, the source profile is {whatif.source_device}'s: "
            f"every kernel was scaled as if its traced time were {whatif.source_device}'s; give {captured}'s profile "
            "as `source_profile`"
        ]
    if captured is None or whatif.source is not None or _same_device(captured, whatif.device):
        return []
    kept = whatif.totals("traced")
    if not kept.kernels:  # every kernel timed from the profile: nothing of the capture's GPU is left
        return []
    return [
        f"`device_profile`: the trace was captured on {captured}, the profile is {whatif.device}'s: kernels are "
        f"timed from it by shape, but {kept.kernels:,} kernel(s) it has no point for keep {captured}'s times; "
        f"give `source_profile` ({captured}'s profile) to scale every kernel by the two"
    ]


def _same_device(a: str, b: str) -> bool:
    x, y = a.lower().replace("nvidia ", "").strip(), b.lower().replace("nvidia ", "").strip()
    return x == y or x.startswith(y) or y.startswith(x)


def graph_pid(events: KinetoEvents) -> int:
    pid = events.steps[0].pid if events.steps else 0
    return pid if type(pid) is int and pid >= 0 else 0
