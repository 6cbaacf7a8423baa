"""Host trace + Kineto trace -> merged trace: index, read, plan, check, then write or stream.

``link`` is ``chakra_trace_link`` without et_replay or HTA, streaming and near-linear, and it refuses
pairs that do not belong together (the reference links nothing and reports success);
``link_items`` gives the merged trace as items for the converter instead of writing it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import TraceContentError, TraceFormatError
from ..io import OutputTarget, check_input, check_output
from .hostindex import HostIndex, index_host_trace
from .kineto import read_kineto
from .linker import LinkPlan, LinkStats
from .linker import link as plan_links
from .merged import merged_items, write_merged

_MISMATCH_SHARE = 0.5  # more matched ops with differing names than this share: another run


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


def link(
    host_path: str | os.PathLike[str],
    device_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str] | None,
    *,
    rank: int | None = None,
    allow_mismatch: bool = False,
) -> LinkResult:
    """Merge a host trace with its Kineto trace into ``output_path`` (same document as the reference).

    Raises ``TraceFormatError``/``TraceContentError`` for unreadable input, a rank that is not the
    device trace's, or a pair from different runs (unless ``allow_mismatch``); nothing is written then.
    ``output_path`` None links and checks without writing.
    """
    started = time.perf_counter()
    host, device = os.fspath(host_path), os.fspath(device_path)
    check_input(host)
    check_input(device)
    target = None if output_path is None else check_output(output_path, host, device)
    result, index, plan = _plan(host, device, None if target is None else target.path, rank, allow_mismatch)
    if target is not None:
        write_merged(index, plan, target)
    return replace(result, seconds=time.perf_counter() - started)


def _plan(
    host_path: str | os.PathLike[str], device_path: str | os.PathLike[str], target: str | None,
    rank: int | None, allow_mismatch: bool,
) -> tuple[LinkResult, HostIndex, LinkPlan]:
    """First pass over the host trace, the Kineto trace, and the links between them (checked)."""
    started = time.perf_counter()
    host, device = os.fspath(host_path), os.fspath(device_path)
    index = index_host_trace(host)
    trace = read_kineto(device)
    trace_rank = _check_rank(trace.distributed_info, rank, device)
    plan = plan_links(index, trace)
    warnings = check_pair(plan.stats, host, device, allow_mismatch)
    warnings += _check_pid(index.metadata, trace.pids, host, allow_mismatch)
    written = index.node_count + plan.stats.gpu_linked
    result = LinkResult(
        host, device, target, trace_rank, written, plan.stats, warnings, time.perf_counter() - started
    )
    return result, index, plan


def link_items(
    host_path: str | os.PathLike[str], device_path: str | os.PathLike[str], target: OutputTarget, *,
    rank: int | None, allow_mismatch: bool,
) -> tuple[LinkResult, Iterator[tuple[str, Any]]]:
    """The link plan, and the merged trace as items (made during the host trace's second pass);
    spill files for an out-of-order host trace go where ``target`` keeps its temporary data."""
    result, index, plan = _plan(host_path, device_path, None, rank, allow_mismatch)
    return result, merged_items(index, plan, target.work_dir)


def _check_rank(info: dict[str, Any] | None, rank: int | None, device: str) -> int | None:
    found = info.get("rank") if info else None
    if rank is not None and isinstance(found, int) and found != rank:
        raise TraceFormatError(device, f"is the device trace of rank {found}, not of rank {rank}")
    return found if isinstance(found, int) else rank


def check_pair(stats: LinkStats, host: str, device: str, allow_mismatch: bool = False) -> list[str]:
    """Errors for pairs that cannot belong together; warnings, with counts, for partial links."""
    problems: list[str] = []
    if stats.host_ops and not stats.linked:
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
        raise TraceContentError(host, f"{problem} (--allow-mismatch links them anyway)")
    return [f"{problem}?"]


def _link_warnings(stats: LinkStats) -> list[str]:
    warnings = []
    if stats.unlinked_host_ops:
        warnings.append(f"{stats.unlinked_host_ops} of {stats.host_ops} host ops found no device op")
    if stats.gpu_without_launcher:
        warnings.append(
            f"{stats.gpu_without_launcher} of {stats.gpu_ops} device kernels have no launching CPU op"
        )
    if stats.gpu_unattached:
        warnings.append(f"{stats.gpu_unattached} device kernels were launched by CPU ops no host op matched")
    return warnings
