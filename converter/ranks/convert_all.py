"""``convert-all``: every rank of a job, host + device pairs found in one directory, in parallel.

Writes ``OUTDIR/<prefix>.<rank>.et`` (the names ASTRA-sim's workload loader expects) and
``OUTDIR/comm_group.json``, ASTRA-sim's ``--comm-group-configuration`` (``ranks/commgroups.py``).
One rank failing does not stop the others; each outcome is a row of the summary.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

from ..convert.pipeline import ConvertOptions
from ..errors import ConverterError
from . import commgroups
from .commgroups import COMM_GROUP_FILE, CommGroups
from .discover import FoundTraces, discover
from .onray import run_on_ray
from .pair import convert_pair


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    host: str | None
    device: str | None
    output: str | None
    ok: bool
    message: str  # the error, or the warnings joined
    nodes: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class MultiRankResult:
    outcomes: list[RankOutcome]
    comm_group_path: str
    comm_groups: CommGroups = field(default_factory=CommGroups)

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)


@dataclass(frozen=True)
class _Task:
    rank: int
    host: str
    device: str
    output: str


def convert_all(
    directory: str,
    output_dir: str,
    options: ConvertOptions,
    *,
    jobs: int | None = None,
    prefix: str = "trace",
    allow_mismatch: bool = False,
    on_rank_done: Callable[[RankOutcome], None] | None = None,
    ray_address: str | None = None,
) -> MultiRankResult:
    """Link and convert every rank found in ``directory``; see the module docstring.
    ``on_rank_done`` is called with each rank's outcome as it finishes. With ``ray_address``,
    each rank is a task on that Ray cluster (``ranks/onray.py``), else a local process."""
    found = discover(directory)
    os.makedirs(output_dir, exist_ok=True)
    tasks, outcomes = _plan(found, output_dir, prefix)
    options = replace(options, jobs=1)  # ranks run side by side: one process each
    for outcome in _run(tasks, options, allow_mismatch, jobs, ray_address):
        outcomes.append(outcome)
        if on_rank_done is not None:
            on_rank_done(outcome)
    outcomes.sort(key=lambda o: o.rank)
    groups = commgroups.from_distributed_info(found.dist_info.values())
    group_path = os.path.join(output_dir, COMM_GROUP_FILE)
    commgroups.write(groups, group_path)
    return MultiRankResult(outcomes, group_path, groups)


def _run(tasks: list[_Task], options: ConvertOptions, allow_mismatch: bool, jobs: int | None,
         ray_address: str | None) -> Iterator[RankOutcome]:
    if not tasks:
        return
    if ray_address is not None:
        yield from run_on_ray(ray_address, _convert_rank, tasks, (options, allow_mismatch), _lost)
        return
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(_convert_rank, task, options, allow_mismatch) for task in tasks]
        for future in as_completed(futures):
            yield future.result()


def _lost(task: _Task, reason: str) -> RankOutcome:
    return RankOutcome(task.rank, task.host, task.device, None, False, reason)


def _plan(found: FoundTraces, out_dir: str, prefix: str) -> tuple[list[_Task], list[RankOutcome]]:
    tasks, failures = [], []
    for rank in found.ranks():
        hosts, devices = found.hosts.get(rank, []), found.devices.get(rank, [])
        problem = _pair_problem(rank, hosts, devices)
        if problem:
            failures.append(RankOutcome(rank, _one(hosts), _one(devices), None, False, problem))
        else:
            tasks.append(_Task(rank, hosts[0], devices[0], os.path.join(out_dir, f"{prefix}.{rank}.et")))
    return tasks, failures


def _one(paths: list[str]) -> str | None:
    return paths[0] if len(paths) == 1 else None


def _pair_problem(rank: int, hosts: list[str], devices: list[str]) -> str | None:
    for kind, paths in (("host", hosts), ("device (Kineto)", devices)):
        if not paths:
            return f"rank {rank}: no {kind} trace found"
        if len(paths) > 1:
            return (
                f"rank {rank}: {len(paths)} {kind} traces found ({', '.join(map(os.path.basename, paths))})"
            )
    return None


def _convert_rank(task: _Task, options: ConvertOptions, allow_mismatch: bool) -> RankOutcome:
    """One worker's job; every failure becomes a row rather than an exception."""
    try:
        result = convert_pair(task.host, task.device, task.output, options, rank=task.rank,
                              allow_mismatch=allow_mismatch)
    except ConverterError as exc:
        return RankOutcome(task.rank, task.host, task.device, None, False, str(exc))
    except Exception as exc:  # a bug must not take the other ranks down; it is reported as such
        return RankOutcome(task.rank, task.host, task.device, None, False, f"internal error: {exc!r}")
    link = result.link
    return RankOutcome(task.rank, task.host, task.device, task.output, True, "; ".join(link.warnings),
                       result.conversion.nodes_written, link.seconds + result.conversion.seconds)
