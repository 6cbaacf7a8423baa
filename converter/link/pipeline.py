"""Host trace + Kineto trace -> merged trace: index, read, plan, check, then write or stream.

``link`` is ``chakra_trace_link`` without et_replay or HTA, streaming and near-linear, and it refuses
pairs that do not belong together (the reference links nothing and reports success);
``link_document`` gives the merged trace as a readable stream for the converter instead of writing it.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass, field, replace
from typing import IO, Any

from ..errors import ConverterError, TraceContentError, TraceFormatError
from ..gcpause import gc_paused
from ..io.output import OutputTarget, check_output
from ..io.read import check_input
from ..workers import Worker, fork_available
from .byorder import link_by_order, needs_order_linking
from .cutoff import CutOff, adopt_orphans, count_recovered, is_cut_off
from .hostindex import HostIndex, index_host_trace
from .kineto import KinetoTrace, read_kineto
from .linker import LinkPlan, LinkStats
from .linker import link as plan_links
from .merged import DocumentReader, merged_document, write_merged
from .steps import StepChoice, StepSelection, choose_steps

_MISMATCH_SHARE = 0.5  # more matched ops with differing names than this share: another run
_MIN_PARALLEL_BYTES = 16 << 20  # both inputs at least this large: read them in two processes
_DOCUMENT_BUFFER = 1 << 20


@dataclass(frozen=True)
class LinkResult:
    host_path: str
    device_path: str
    output_path: str | None
    rank: int | None  # from the device trace's distributedInfo, else the one asked for
    nodes_written: int
    stats: LinkStats
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    steps: StepSelection = field(default_factory=StepSelection)  # the ProfilerSteps linked
    cut_off: CutOff | None = None  # a host trace cut off before its end (salvaged by repair)
    world_size: int | None = None  # the job's ranks, from the device trace's distributedInfo


def link(
    host_path: str | os.PathLike[str],
    device_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str] | None,
    *,
    rank: int | None = None,
    allow_mismatch: bool = False,
    steps: StepChoice = None,
) -> LinkResult:
    """Merge a host trace with its Kineto trace into ``output_path`` (same document as the reference).

    Raises ``TraceFormatError``/``TraceContentError`` for unreadable input, a rank that is not the
    device trace's, or a pair from different runs (unless ``allow_mismatch``); nothing is written then.
    ``output_path`` None links and checks without writing. ``steps``: which ProfilerSteps
    (``steps.py``: by default those the Kineto trace covers).
    """
    started = time.perf_counter()
    host, device = os.fspath(host_path), os.fspath(device_path)
    check_input(host)
    check_input(device)
    target = None if output_path is None else check_output(output_path, host, device)
    with gc_paused():
        result, index, plan = _plan(
            host, device, None if target is None else target.path, rank, allow_mismatch, steps=steps
        )
        if target is not None:
            write_merged(index, plan, target)
    return replace(result, seconds=time.perf_counter() - started)


def _plan(
    host_path: str | os.PathLike[str],
    device_path: str | os.PathLike[str],
    target: str | None,
    rank: int | None,
    allow_mismatch: bool,
    parallel: bool = True,
    steps: StepChoice = None,
) -> tuple[LinkResult, HostIndex, LinkPlan]:
    """First pass over the host trace, the Kineto trace, and the links between them (checked);
    ``parallel``: both traces at once, in two processes, when they are large."""
    started = time.perf_counter()
    host, device = os.fspath(host_path), os.fspath(device_path)
    index, trace = _read_pair(host, device, parallel)
    trace_rank = _check_rank(trace.distributed_info, rank, device)
    cut_off = index.cut_off = is_cut_off(index)
    selection = choose_steps(index, trace, steps, cut_off=cut_off)
    index.left_out = selection.left_out
    salvaged = adopt_orphans(index, trace, selection) if cut_off else None
    plan = link_by_order(index, trace) if needs_order_linking(trace) else plan_links(index, trace)
    if salvaged is not None:
        count_recovered(salvaged, trace)
    warnings = check_pair(plan.stats, host, device, allow_mismatch, expect_links=not selection.host_only)
    warnings += _check_pid(index.metadata, trace.pids, host, allow_mismatch)
    warnings += selection.warnings
    written = index.node_count - len(index.left_out) + plan.stats.gpu_linked
    result = LinkResult(
        host,
        device,
        target,
        trace_rank,
        written,
        plan.stats,
        warnings,
        time.perf_counter() - started,
        selection,
        salvaged,
        _world_size(trace.distributed_info),
    )
    return result, index, plan


def _read_pair(host: str, device: str, parallel: bool) -> tuple[HostIndex, KinetoTrace]:
    """The host trace's index and the Kineto trace, read at once by two processes when both are
    large: a worker indexes the host trace while this one reads the Kineto trace. Errors are the
    ones reading them one after the other gives: the host trace's first (a worker that failed is
    read again here, to report the problem)."""
    if not (parallel and _worth_a_worker(host, device)):
        return index_host_trace(host), read_kineto(device)
    worker = Worker(index_host_trace, host)
    try:
        try:
            trace = read_kineto(device)
        except ConverterError:
            if worker.result() is None:
                index_host_trace(host)  # raises the host trace's own error, which comes first
            raise
        index = worker.result()
    finally:
        worker.stop()
    return (index if index is not None else index_host_trace(host)), trace


def _worth_a_worker(host: str, device: str) -> bool:
    try:
        sizes = os.path.getsize(host), os.path.getsize(device)
    except OSError:
        return False
    return fork_available() and min(sizes) >= _MIN_PARALLEL_BYTES and (os.cpu_count() or 1) > 1


def link_document(
    host_path: str | os.PathLike[str],
    device_path: str | os.PathLike[str],
    target: OutputTarget,
    *,
    rank: int | None,
    allow_mismatch: bool,
    parallel: bool = True,
    steps: StepChoice = None,
) -> tuple[LinkResult, IO[bytes]]:
    """The link plan, and the merged trace's JSON as a readable stream, made as it is read (the
    host trace's second pass); spill files for an out-of-order host trace go where ``target``
    keeps its temporary data.
    ``parallel``: as ``_plan``. The caller closes the stream."""
    with gc_paused():
        result, index, plan = _plan(host_path, device_path, None, rank, allow_mismatch, parallel, steps)
    document = merged_document(index, plan, target.work_dir)
    return result, io.BufferedReader(DocumentReader(document), _DOCUMENT_BUFFER)


def _world_size(info: dict[str, Any] | None) -> int | None:
    found = info.get("world_size") if info else None
    return found if type(found) is int and found >= 1 else None


def _check_rank(info: dict[str, Any] | None, rank: int | None, device: str) -> int | None:
    found = info.get("rank") if info else None
    if rank is not None and isinstance(found, int) and found != rank:
        raise TraceFormatError(device, f"is the device trace of rank {found}, not of rank {rank}")
    return found if isinstance(found, int) else rank


def check_pair(
    stats: LinkStats, host: str, device: str, allow_mismatch: bool = False, *, expect_links: bool = True
) -> list[str]:
    """Errors for pairs that cannot belong together; warnings, with counts, for partial links.
    ``expect_links`` False (a step chosen that has no device data): no link is no error."""
    problems: list[str] = []
    if not expect_links:
        return []
    if stats.by_order and stats.host_ops and not stats.linked:
        problems.append(
            f"{device} has no 'Record function id' on its CPU ops (a PyTorch 2.0/2.1 Kineto trace), and "
            f"none of the {stats.host_ops} host ops matched its CPU ops by thread, order and name: "
            "the traces come from different programs"
        )
    elif stats.host_ops and not stats.linked:
        problems.append(
            f"none of its {stats.host_ops} host ops has a device op in {device} "
            "(no record-function id in common): the traces come from different runs or ranks"
        )
    elif stats.linked and stats.name_mismatches > _MISMATCH_SHARE * stats.linked:
        examples = ", ".join(stats.mismatch_examples)
        problems.append(
            f"{stats.name_mismatches} of {stats.linked} host ops matched a device op of another name "
            f"in {device} (e.g. {examples}): the traces come from different runs"
        )
    if problems and not allow_mismatch:
        raise TraceContentError(host, problems[0])
    if stats.by_order and stats.linked:
        problems.append(
            f"{device} has no 'Record function id' on its CPU ops (a PyTorch 2.0/2.1 Kineto trace): linked "
            f"{stats.linked} of {stats.host_ops} host ops by each thread's op order and names, and "
            f"{stats.gpu_linked} of {stats.gpu_ops} device ops to the op around their launch"
        )
    return problems + _link_warnings(stats)


def _check_pid(metadata: dict[str, Any], device_pids: set[Any], host: str, allow_mismatch: bool) -> list[str]:
    """Same program, other rank or run: the names agree, but the process id gives it away. Such a
    pair links into a graph with cycles (each rank's collectives), which the converter refuses:
    an error here too, unless ``allow_mismatch`` (then a warning)."""
    pid = metadata.get("pid")
    try:
        if pid is None or not device_pids or pid in device_pids:
            return []
    except TypeError:  # an unhashable pid: nothing to compare
        return []
    shown = ", ".join(str(p) for p in sorted(device_pids, key=str)[:3])
    problem = f"the host trace is from process {pid}, the device trace's CPU ops from {shown}: another rank or run"
    if not allow_mismatch:
        raise TraceContentError(host, problem, hint="`allow_mismatch` links them anyway")
    return [f"{problem}?"]


def _link_warnings(stats: LinkStats) -> list[str]:
    warnings = []
    if stats.unlinked_host_ops:
        warnings.append(f"{stats.unlinked_host_ops} of {stats.host_ops} host ops found no device op")
    if stats.gpu_without_launcher:
        warnings.append(f"{stats.gpu_without_launcher} of {stats.gpu_ops} device kernels have no launching CPU op")
    if stats.gpu_unattached:
        warnings.append(f"{stats.gpu_unattached} device kernels were launched by CPU ops no host op matched")
    return warnings
