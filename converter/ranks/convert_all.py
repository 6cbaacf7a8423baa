"""``convert-all``: every rank of a job, host + device pairs found in one directory, in parallel
(a directory of host traces alone, with no Kineto trace at all: each host trace converted alone;
a directory of Kineto traces alone, with no host trace: each converted by the Kineto front end,
``kineto/``, the rank from its ``distributedInfo``, else its file name).

Writes ``OUTDIR/<prefix>.<rank>.et`` (the names ASTRA-sim's workload loader expects) and
``OUTDIR/<prefix>.comm_group.json``, ASTRA-sim's ``--comm-group-configuration`` (``ranks/commgroups.py``),
unless every rank failed (then nothing is written). The ranks write into a hidden staging
directory in OUTDIR; the files move into OUTDIR together, in one step signals cannot cut, once
every rank has ended: an interrupted run leaves OUTDIR as it was.
A folder holding the traces of several jobs is refused, naming each job's files (``ranks/jobs.py``).
One rank failing does not stop the others; each outcome is a row of the summary.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, field, replace

from ..convert.pipeline import ConversionResult, ConvertOptions, convert_file
from ..errors import ConverterError, OptionError
from ..io.output import OutputTarget, check_output, output_directory
from ..io.outputset import OutputSet
from ..io.read import same_file
from ..kineto import convert_kineto
from ..overhead import Removed
from ..workers import run_all
from . import alltoallv, collwaits, commgroups
from .commgroups import CommGroups
from .discover import DEFAULT_JOB_NAME, TRACE_SUFFIXES, FoundTraces, discover, job_name
from .jobs import refuse_mixed
from .jobsize import host_job_options
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
    overhead: Removed | None = None  # the profiler's time taken out of the rank's host timeline


@dataclass(frozen=True)
class MultiRankResult:
    outcomes: list[RankOutcome]
    comm_group_path: str | None  # None when every rank failed: nothing written
    comm_groups: CommGroups = field(default_factory=CommGroups)
    ray_cluster: str | None = None  # with --ray: which cluster ran the ranks, and how it was chosen
    prefix: str = DEFAULT_JOB_NAME  # the outputs' name: <prefix>.<rank>.et
    evened: tuple[int, int] = (0, 0)  # all-to-alls given one size on every rank, and the nodes changed
    #: a CPU job's collectives given the least traced duration of their ranks (``collwaits.py``)
    waits: collwaits.Waits | None = None

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)


@dataclass(frozen=True)
class _Task:
    rank: int
    host: str
    device: str | None  # None: a job of host traces alone, each converted by itself
    output: str
    options: ConvertOptions
    allow_mismatch: bool
    kineto: bool = False  # a Kineto trace alone (``device``), converted by the Kineto front end
    step: int | None = None


def convert_all(
    directory: str,
    output_dir: str,
    options: ConvertOptions,
    *,
    jobs: int | None = None,
    prefix: str | None = None,
    allow_mismatch: bool = False,
    on_rank_done: Callable[[RankOutcome], None] | None = None,
    ray_address: str | None = None,
    step: int | None = None,
) -> MultiRankResult:
    """Link and convert every rank found in ``directory``; see the module docstring.
    ``on_rank_done`` is called with each rank's outcome as it finishes. With ``ray_address``,
    each rank is a task on that Ray cluster (``ranks/onray.py``), else a local process. ``step``:
    the ProfilerStep of a job of Kineto traces alone (default: each trace's last complete one).
    ``output_dir`` is created if missing (and removed again if the command ends with nothing in it).
    ``prefix`` None: the capture's name (``discover.job_name``)."""
    if prefix is not None:
        _check_prefix(prefix)
    found = discover(directory)
    refuse_mixed(found, directory)  # never one job of mixed ranks
    prefix = job_name(found) if prefix is None else prefix
    created = output_directory(output_dir)
    try:
        if step is not None and (found.hosts or not found.devices):
            raise OptionError(f"{directory}: `step` is for a job of Kineto traces alone (this one has host traces)")
        if found.devices and not found.hosts:
            _check_kineto_options(directory, options)
        result = _convert_all(found, output_dir, options, jobs, prefix, allow_mismatch, on_rank_done, ray_address, step)
    finally:
        if created:
            with suppress(OSError):  # only succeeds if nothing was written there
                os.rmdir(output_dir)
    return result


#: Conversion options that cannot apply to a Kineto trace alone (its output is always ASTRA-sim
#: ready, its host timeline keeps its traced time), as ``convert`` refuses them.
_NOT_FOR_KINETO = (
    ("simulate", "the reference's execution model reads host traces"),
    ("break_cycles", "its graph has no cycle"),
    ("allow_missing_parents", "its graph names no parent"),
)


def _check_kineto_options(directory: str, options: ConvertOptions) -> None:
    for name, why in _NOT_FOR_KINETO:
        if getattr(options, name):
            raise OptionError(f"{directory}: `{name}` is not for a job of Kineto traces alone ({why})")
    if options.host_time != "none":
        raise OptionError(
            f"{directory}: `host_time` is not for a job of Kineto traces alone (its host timeline always keeps "
            "its traced time)"
        )


def _convert_all(
    found: FoundTraces,
    output_dir: str,
    options: ConvertOptions,
    jobs: int | None,
    prefix: str,
    allow_mismatch: bool,
    on_rank_done: Callable[[RankOutcome], None] | None,
    ray_address: str | None,
    step: int | None = None,
) -> MultiRankResult:
    if found.devices:
        groups = commgroups.from_distributed_info(found.dist_info.values())
    else:  # host traces alone: the groups their process-group nodes list
        groups = commgroups.from_distributed_info(
            commgroups.host_process_groups(paths[0]) for paths in found.hosts.values() if len(paths) == 1
        )
    group_target = check_output(commgroups.path_for(os.path.join(output_dir, prefix)))
    options = replace(options, jobs=1)  # ranks run side by side: one process each
    cluster: list[str] = []
    with OutputSet(shown=output_dir) as files:
        tasks, outcomes, targets = _plan(found, output_dir, files, prefix, options, allow_mismatch)
        if found.devices and not found.hosts:
            tasks = [replace(t, kineto=True, step=step) for t in tasks]
        for outcome in _run(tasks, jobs, ray_address, cluster.append):
            outcome = _in_place(outcome, output_dir)
            outcomes.append(outcome)
            if on_rank_done is not None:
                on_rank_done(outcome)
        outcomes.sort(key=lambda o: o.rank)
        if not any(o.ok for o in outcomes):
            return MultiRankResult(outcomes, None, groups, next(iter(cluster), None), prefix)
        evened = (0, 0)
        if options.astra_sim or options.compact or (found.devices and not found.hosts):
            evened = alltoallv.even_all_to_all([files.staged(targets[o.rank]) for o in outcomes if o.ok and o.output])
        waits = None
        if (options.astra_sim or (found.devices and not found.hosts)) and options.tracing_overhead != "none":
            done = [o for o in outcomes if o.ok and o.output]
            waits = collwaits.even_waits([files.staged(targets[o.rank]) for o in done], [o.rank for o in done])
        commgroups.write(groups, files.staged(group_target))
        files.commit([*(targets[o.rank] for o in outcomes if o.ok and o.output), group_target])
    return MultiRankResult(outcomes, group_target.path, groups, next(iter(cluster), None), prefix, evened, waits)


def _in_place(outcome: RankOutcome, output_dir: str) -> RankOutcome:
    """A rank's outcome naming its output where it will be, not in the staging directory."""
    if outcome.output is None:
        return outcome
    return replace(outcome, output=os.path.join(output_dir, os.path.basename(outcome.output)))


def uses_file(path: str, directory: str, output_dir: str, prefix: str | None) -> bool:
    """Whether ``convert_all`` could read or write ``path``: a trace file of ``directory``, or an
    output (``<prefix>.<rank>.et``, ``<prefix>.comm_group.json``; any prefix for None) of ``output_dir``."""
    folder, name = os.path.split(os.path.abspath(path))
    if same_file(folder, directory) and name.endswith(TRACE_SUFFIXES):
        return True
    if not same_file(folder, output_dir):
        return False
    if prefix is None:  # the capture's name, not known yet: any job's outputs
        return name.endswith(commgroups.COMM_GROUP_SUFFIX) or re.fullmatch(r".+\.-?[0-9]+\.et", name) is not None
    rank = name[len(prefix) + 1 : -len(".et")] if name.startswith(f"{prefix}.") and name.endswith(".et") else ""
    return name == f"{prefix}{commgroups.COMM_GROUP_SUFFIX}" or rank.lstrip("-").isdigit()


def _check_prefix(prefix: str) -> None:
    if not prefix or prefix in (".", "..") or any(s and s in prefix for s in (os.sep, os.altsep, "\0")):
        raise OptionError(f"`prefix` {prefix!r}: must be a plain file name (not empty, no '/')")


def _run(
    tasks: list[_Task], jobs: int | None, ray_address: str | None, on_connect: Callable[[str], None]
) -> Iterator[RankOutcome]:
    """Each task's outcome as it finishes: on the Ray cluster at ``ray_address``, else in local
    worker processes, ``jobs`` at a time (a worker that dies is a failed rank)."""
    if not tasks:
        return
    if ray_address is not None:
        yield from run_on_ray(ray_address, _convert_rank, tasks, (), _lost, on_connect)
        return
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with closing(run_all(_convert_rank, tasks, workers)) as finished:
        for task, outcome in finished:
            yield outcome if outcome is not None else _died(task)


def _lost(task: _Task, reason: str) -> RankOutcome:
    return RankOutcome(task.rank, task.host, task.device, None, False, reason)


def _plan(
    found: FoundTraces, out_dir: str, files: OutputSet, prefix: str, options: ConvertOptions, allow_mismatch: bool
) -> tuple[list[_Task], list[RankOutcome], dict[int, OutputTarget]]:
    """A task per rank whose pair is complete (its output written where ``files`` stages it, its
    place in ``out_dir`` checked first), a failed outcome for every other rank, and each task's
    output by rank."""
    tasks, failures = [], []
    targets: dict[int, OutputTarget] = {}
    output = ""
    for rank in found.ranks():
        hosts, devices = found.hosts.get(rank, []), found.devices.get(rank, [])
        kineto_alone = bool(found.devices) and not found.hosts
        problem = _pair_problem(rank, devices if kineto_alone else hosts, devices if found.devices else [""])
        if problem and rank in found.unreadable:
            problem = "; ".join([problem, *found.unreadable[rank]])
        if not problem:
            try:
                target = check_output(os.path.join(out_dir, f"{prefix}.{rank}.et"), *hosts, *devices)
                output = files.staged(target)  # a device or FIFO there is this rank's problem
                targets[rank] = target
            except ConverterError as exc:
                problem = str(exc)
        if problem:
            failures.append(RankOutcome(rank, _one(hosts), _one(devices), None, False, problem))
        else:
            tasks.append(
                _Task(
                    rank,
                    devices[0] if kineto_alone else hosts[0],
                    devices[0] if devices else None,
                    output,
                    options,
                    allow_mismatch,
                )
            )
    return tasks, failures, targets


def _one(paths: list[str]) -> str | None:
    return paths[0] if len(paths) == 1 else None


def _pair_problem(rank: int, hosts: list[str], devices: list[str]) -> str | None:
    for kind, paths in (("host", hosts), ("device (Kineto)", devices)):
        if not paths:
            return f"rank {rank}: no {kind} trace found"
        if len(paths) > 1:
            return f"rank {rank}: {len(paths)} {kind} traces found ({', '.join(map(os.path.basename, paths))})"
    return None


def _died(task: _Task) -> RankOutcome:
    return _lost(task, f"rank {task.rank}: the worker process died (out of memory?) before it finished")


def _convert_rank(task: _Task) -> RankOutcome:
    """One worker's job; every failure becomes a row rather than an exception."""
    if task.device is None:
        return _convert_host(task)
    if task.kineto:
        return _convert_kineto(task)
    try:
        result = convert_pair(
            task.host, task.device, task.output, task.options, rank=task.rank, allow_mismatch=task.allow_mismatch
        )
    except ConverterError as exc:
        return RankOutcome(task.rank, task.host, task.device, None, False, str(exc))
    except Exception as exc:  # a bug must not take the other ranks down; it is reported as such
        return RankOutcome(task.rank, task.host, task.device, None, False, f"internal error: {exc!r}")
    link, conversion = result.link, result.conversion
    warnings = [*link.warnings, *conversion.warnings]
    return RankOutcome(
        task.rank,
        task.host,
        task.device,
        task.output,
        True,
        "; ".join(warnings),
        _nodes(conversion),
        link.seconds + conversion.seconds,
        conversion.overhead,
    )


def _nodes(conversion: ConversionResult) -> int:
    """The nodes the rank's file holds (after compaction, with --compact)."""
    return conversion.nodes_written if conversion.compaction is None else conversion.compaction.nodes_written


def _convert_kineto(task: _Task) -> RankOutcome:
    """A rank of a job of Kineto traces alone."""
    assert task.device is not None
    try:
        options = task.options
        result = convert_kineto(
            task.device,
            task.output,
            step=task.step,
            rank=task.rank,
            roofline=options.roofline,
            accelerator=options.roofline and options.target == "accelerator",
            compact=options.compact,
            tracing_overhead=options.tracing_overhead,
        )
    except ConverterError as exc:
        return RankOutcome(task.rank, None, task.device, None, False, str(exc))
    except Exception as exc:  # a bug must not take the other ranks down; it is reported as such
        return RankOutcome(task.rank, None, task.device, None, False, f"internal error: {exc!r}")
    return RankOutcome(
        task.rank,
        None,
        task.device,
        task.output,
        True,
        "; ".join(result.warnings),
        result.nodes if result.compaction is None else result.compaction.nodes_written,
        result.seconds,
        result.overhead,
    )


def _convert_host(task: _Task) -> RankOutcome:
    """A rank of a job with no Kineto traces: its host trace converted alone."""
    try:
        result = convert_file(
            task.host, task.output, host_job_options(replace(task.options, rank=task.rank), task.host)
        )
    except ConverterError as exc:
        return RankOutcome(task.rank, task.host, None, None, False, str(exc))
    except Exception as exc:  # a bug must not take the other ranks down; it is reported as such
        return RankOutcome(task.rank, task.host, None, None, False, f"internal error: {exc!r}")
    return RankOutcome(
        task.rank,
        task.host,
        None,
        task.output,
        True,
        "; ".join(result.warnings),
        _nodes(result),
        result.seconds,
        result.overhead,
    )
