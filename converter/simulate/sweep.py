"""``simulate --sweep KEY=V1,V2,..``: the job simulated at each value on each network; a table
(markdown), a plot (PNG) and the numbers (JSON).

What a sweep varies (``KEYS``): ``ranks`` (the job scaled to each rank count with ``scale``; the
captured count is the capture itself unless ``scale_capture``), ``bandwidth`` (GB/s of every
link, the job as captured) or ``accelerator`` (a roofline preset, the job as captured). Each value
is a task: it makes its own temporary folder (in ``work_dir`` or the system's), writes the scaled
job there if any, simulates it on each topology, and removes the folder. Tasks run one after the
other, in ``jobs`` local worker processes, or as Ray tasks (``ray``: the rules of ``convert-all
--ray``, ``ranks/onray.py``); a point's result does not depend on where it ran (ASTRA-sim is
deterministic), and the points are reported in the sweep's order.

Everything is checked before the first simulation: the job, each network at each value, the
roofline, the simulator, matplotlib, what ``scale`` would refuse at each rank count, the outputs
(against every input and each other, ``outputs.py``). The outputs are written at the end, all
or nothing: a failing point, a failing write or a signal leaves none.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConverterError, OptionError
from ..ranks.onray import run_on_ray
from ..ranks.scale import check_ranks
from ..workers import run_all
from . import configs, preflight
from .job import Job, find_job
from .notes import same_steps
from .options import SimulateOptions, network_of, roofline_option, setup_of
from .outputs import Outputs, inputs_of
from .plot import pyplot, sweep_png
from .process import BINARIES, Progress, find_simulator, make_workdir
from .reduced import Plan
from .run import SimulationResult, run_job
from .width import plan_for, run_plan

Scale = Callable[[str, str, int, str | None], Any]  # (captured, scaled, ranks, the group file)
KEYS = {"ranks": "ranks", "bandwidth": "bandwidth (GB/s)", "accelerator": "accelerator"}


@dataclass(frozen=True)
class SweepPoint:
    """One simulation of the sweep: the job's step (its slowest rank's), that rank's time with a
    communication node running and the part of it with no compute running, in ns."""

    ranks: int
    topology: str
    network: str
    step_ns: int
    comm_busy_ns: int
    exposed_comm_ns: int
    nodes_per_rank: float
    seconds: float  # ASTRA-sim's run, wall time
    scale_seconds: float  # writing the scaled job (0 for the capture itself)
    value: str = ""  # the swept value, as given
    links: str = ""  # per dimension: bandwidth and latency
    waiting_ns: int = 0  # of the slowest rank's communication: waiting for peers
    simulated_ranks: int = 0  # the ranks ASTRA-sim ran: fewer than ``ranks`` where a reduced job stood for them
    simulated_as: str = ""  # what ran, and why
    warning: str = ""  # the full job ran where a reduced one could not stand for it: why, and what to do

    @property
    def comm_share(self) -> float:
        return self.comm_busy_ns / self.step_ns if self.step_ns else 0.0


@dataclass(frozen=True)
class SweepResult:
    prefix: str
    captured_ranks: int
    backend: str
    points: list[SweepPoint]
    table_path: str
    plot_path: str
    json_path: str
    key: str = "ranks"
    notes: list[str] = field(default_factory=list)  # accelerators that gave the same step (notes.same_steps)

    def table(self) -> str:
        first = KEYS[self.key]
        rows = [
            f"| {first} | network | links | simulated step (ms) | communication (ms) | communication share | "
            "exposed communication (ms) | waiting for peers (ms) | nodes per rank | ASTRA-sim wall time (s) | "
            "scale time (s) | simulated ranks |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in self.points:
            rows.append(
                f"| {p.value or f'{p.ranks:,}'} | {p.network} | {p.links} | {p.step_ns / 1e6:,.2f} | "
                f"{p.comm_busy_ns / 1e6:,.2f} | {p.comm_share:.1%} | {p.exposed_comm_ns / 1e6:,.2f} | "
                f"{p.waiting_ns / 1e6:,.2f} | {p.nodes_per_rank:,.0f} | {p.seconds:.1f} | "
                f"{p.scale_seconds:.1f} | {p.simulated_ranks or p.ranks:,}{_reduced_mark(p)} |"
            )
        return "\n".join(rows) + "\n"

    def as_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "captured_ranks": self.captured_ranks,
            "backend": self.backend,
            "key": self.key,
            "points": [{**p.__dict__, "comm_share": p.comm_share} for p in self.points],
            "notes": self.notes,
        }


def _reduced_mark(point: SweepPoint) -> str:
    return "" if point.simulated_ranks in (0, point.ranks) else " (reduced)"


@dataclass(frozen=True)
class _Task:
    """One value of the sweep, simulated on every topology (run where ``run_task`` runs)."""

    index: int
    key: str
    value: str
    prefix: str
    topologies: tuple[str, ...]
    options: SimulateOptions
    work_dir: str | None
    scale: Scale | None  # ranks: writes the scaled job
    ranks: int  # the point's rank count
    exact: bool = False  # ranks: never the reduced job (width.py)


@dataclass(frozen=True)
class _Outcome:
    index: int
    points: list[SweepPoint]
    error: str | None = None


def parse(text: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,..`` as a key of ``KEYS`` and its values (whole numbers for ranks, positive
    numbers for bandwidth, preset names for accelerator), or a ConverterError."""
    key, _, values = text.partition("=")
    key = key.strip().lower()
    items = [v.strip() for v in values.split(",")] if values.strip() else []
    if key not in KEYS or not items or any(not v for v in items):
        raise ConverterError(
            f"`sweep` {text}: expected KEY=V1,V2,... with KEY one of {', '.join(KEYS)} "
            "(e.g. ranks=2,8,64; bandwidth=25,50,100; accelerator=A100,H100)"
        )
    if key == "ranks" and not all(v.isdigit() and int(v) >= 1 for v in items):
        raise ConverterError(f"`sweep` {text}: rank counts are whole numbers, at least 1")
    if key == "bandwidth":
        try:
            bad = [v for v in items if not 0 < float(v) < float("inf")]
        except ValueError:
            bad = items
        if bad:
            raise ConverterError(f"`sweep` {text}: bandwidths are positive numbers (GB/s, every link)")
    if key == "accelerator":
        for name in items:
            configs.accelerator(name, None, None)  # a preset, or its error
    if len(set(items)) != len(items):
        raise ConverterError(f"`sweep` {text}: a value is given twice")
    return key, items


def sweep(
    prefix: str,
    points: Sequence[int | float | str],
    topologies: Sequence[str],
    options: SimulateOptions,
    *,
    scale: Scale,
    out_prefix: str | None = None,
    work_dir: str | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
    progress: Callable[[Progress], None] | None = None,
    scale_capture: bool = False,
    key: str = "ranks",
    jobs: int = 1,
    ray: str | None = None,
    exact: bool = False,
    json_output: str | None = None,
) -> SweepResult:
    """Simulate ``prefix`` at each of ``points`` (the values of ``key``) on each topology. With
    ``jobs`` > 1 the values run in that many local processes, with ``ray`` (an address, or "auto")
    as tasks on that Ray cluster; ``progress`` is heard only when they run here one by one. A
    rank count runs on its equivalent reduced job where one is proven (``width``, docs/reduced.md),
    unless ``exact``. ``json_output``: the sweep's JSON written there too (``--json FILE``)."""
    if key not in KEYS:
        raise ConverterError(f"`key` {key}: one of {', '.join(KEYS)}")
    values = [str(p) for p in points]
    if not values:
        raise ConverterError(f"`values`: none given for `key` {key}")
    if key == "ranks" and any(not v.isdigit() or int(v) < 1 for v in values):
        raise ConverterError("`values`: rank counts are at least 1")
    if key == "ranks":
        values = [str(n) for n in sorted({int(v) for v in values})]
    if options.backend not in BINARIES:
        raise ConverterError(f"`backend` {options.backend}: one of {', '.join(BINARIES)}")
    if jobs < 1:
        raise ConverterError(f"`jobs` {jobs}: at least 1")
    if key == "bandwidth" and options.network_config is not None:
        raise ConverterError("a sweep of bandwidths sets every link's bandwidth: not with `network_config`")
    job = find_job(prefix, options.comm_groups)
    tasks = []
    for index, value in enumerate(values):
        point_options = _options_at(options, key, value)
        count = int(value) if key == "ranks" else job.ranks
        if count < 2 and key != "ranks":
            preflight.one_rank(job)
        for topology in topologies:
            network = network_of(point_options, count, topology)
            configs.check_backend(network, options.backend)
            roofline = configs.accelerator(
                point_options.accelerator, point_options.peak_tflops, point_options.mem_bandwidth
            )
            setup_of(point_options, network, roofline)
        scaled = key == "ranks" and (count != job.ranks or scale_capture)
        if scaled:  # what scale would refuse at this count, refused before the first point runs
            try:
                check_ranks(prefix, count, options.comm_groups, "the rank count")
            except ConverterError as exc:  # an OptionError (a count that cannot apply) stays one: exit 2
                kind = OptionError if isinstance(exc, OptionError) else ConverterError
                raise kind(f"`sweep` ranks={value}: {exc}") from None
        tasks.append(
            _Task(
                index,
                key,
                value,
                prefix,
                tuple(topologies),
                point_options,
                work_dir,
                scale if scaled else None,
                count,
                exact,
            )
        )
    first = tasks[0].options
    if options.check:
        roofline = configs.accelerator(first.accelerator, first.peak_tflops, first.mem_bandwidth)
        preflight.check_job(
            job, roofline, f"`sweep` accelerator={values[0]}" if key == "accelerator" else roofline_option(first)
        )
    find_simulator(options.backend, options.astra_sim_bin)
    out = out_prefix or f"{prefix}.sweep"
    paths = {ext: f"{out}.{ext}" for ext in ("md", "png", "json")}
    outputs = Outputs.check(  # against every input and each other, before the first point
        [*(("`out_prefix`", path) for path in paths.values()), ("`json_output`", json_output)],
        inputs_of(job, options),
        options.timeout,
    )
    pyplot()
    parent = work_dir or tempfile.gettempdir()
    if not os.path.isdir(parent):
        raise ConverterError(f"`work_dir` {parent}: no such directory")
    here = ray is None and jobs == 1
    outcomes: dict[int, list[SweepPoint]] = {}
    for outcome in _outcomes(tasks, jobs, ray, progress if here else None):
        if outcome.error is not None:
            raise ConverterError(f"`sweep` {key}={values[outcome.index]}: {outcome.error}")
        outcomes[outcome.index] = outcome.points
        if on_point is not None:
            for point in outcome.points:
                on_point(point)
    done = [p for index in range(len(tasks)) for p in outcomes[index]]
    same = (
        [
            n
            for t in dict.fromkeys(p.topology for p in done)
            for n in same_steps([(p.value, p.step_ns) for p in done if p.topology == t])
        ]
        if key == "accelerator"
        else []
    )
    result = SweepResult(prefix, job.ranks, options.backend, done, paths["md"], paths["png"], paths["json"], key, same)
    with outputs:  # every output, or none
        _write(result, outputs, topologies, options, json_output)
        outputs.commit()
    return result


def _options_at(options: SimulateOptions, key: str, value: str) -> SimulateOptions:
    if key == "bandwidth":
        return replace(options, bandwidth=value)
    if key == "accelerator":
        return replace(options, accelerator=value, peak_tflops=None, mem_bandwidth=None)
    return options


def _outcomes(
    tasks: list[_Task], jobs: int, ray: str | None, progress: Callable[[Progress], None] | None
) -> Iterator[_Outcome]:
    if ray is not None:
        yield from run_on_ray(ray, run_task, tasks, (), _lost)
        return
    if jobs == 1:
        for task in tasks:
            yield run_task(task, progress)
        return
    with closing(run_all(run_task, tasks, min(jobs, len(tasks)))) as finished:
        for task, outcome in finished:
            yield outcome if outcome is not None else _lost(task, "its worker process died")


def _lost(task: _Task, reason: str) -> _Outcome:
    return _Outcome(task.index, [], reason)


def run_task(task: _Task, progress: Callable[[Progress], None] | None = None) -> _Outcome:
    """One value of the sweep on every topology, in a temporary folder of its own; a ConverterError
    comes back as the outcome's error (a worker's or a Ray task's result is data)."""
    try:
        return _Outcome(task.index, _simulate_task(task, progress))
    except ConverterError as exc:
        return _Outcome(task.index, [], str(exc))


def _simulate_task(task: _Task, progress: Callable[[Progress], None] | None) -> list[SweepPoint]:
    options = task.options
    simulator = find_simulator(options.backend, options.astra_sim_bin)
    roofline = configs.accelerator(options.accelerator, options.peak_tflops, options.mem_bandwidth)
    scratch = make_workdir("chakra-sweep-", task.work_dir)
    try:
        captured = find_job(task.prefix, options.comm_groups)
        point_job: Job | None = captured if task.scale is None else None
        scaled = 0.0
        points = []
        for topology in task.topologies:
            network = network_of(options, task.ranks, topology)
            setup = setup_of(options, network, roofline)
            chosen = plan_for(captured, network, task.ranks, options.backend, setup, task.exact or task.key != "ranks")
            if chosen.reduced:
                started = time.monotonic()
                result = run_plan(
                    captured,
                    chosen,
                    options,
                    roofline,
                    setup,
                    simulator,
                    compact=False,
                    work_dir=task.work_dir,
                    progress=progress,
                )
                points.append(_point(task, topology, result, time.monotonic() - started - result.seconds))
                continue
            if point_job is None and task.scale is not None:
                started = time.monotonic()
                scaled_prefix = os.path.join(scratch, os.path.basename(task.prefix))
                task.scale(task.prefix, scaled_prefix, task.ranks, options.comm_groups)
                point_job, scaled = find_job(scaled_prefix), time.monotonic() - started
            assert point_job is not None
            result = run_job(point_job, network, options, roofline, setup, simulator, progress=progress)
            points.append(_point(task, topology, result, scaled, chosen))
        return points
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _point(
    task: _Task, topology: str, result: SimulationResult, scaled: float, chosen: Plan | None = None
) -> SweepPoint:
    slowest = result.slowest
    chosen = result.plan or chosen
    nodes = sum(r.nodes for r in result.ranks) / len(result.ranks)
    net = result.network
    links = ", ".join(f"{b:g} GB/s {lat:g} ns" for b, lat in zip(net.bandwidth, net.latency, strict=True))
    return SweepPoint(
        task.ranks,
        topology,
        net.name,
        result.step_ns,
        slowest.comm_busy_ns,
        slowest.exposed_comm_ns,
        nodes,
        result.seconds,
        scaled,
        task.value,
        links,
        slowest.waiting_ns,
        len(result.ranks),
        chosen.describe() if chosen is not None and task.key == "ranks" else "",
        (chosen.warning or "") if chosen is not None and task.key == "ranks" else "",
    )


def plot_title(outcome: SweepResult, options: SimulateOptions) -> str:
    """What the plot shows, and on what network: the links (bandwidth and latency per dimension)."""
    links = sorted({p.links for p in outcome.points})
    if outcome.key == "bandwidth":
        latency = options.latency or f"{configs.DEFAULT_LATENCY_NS:g}"
        network = f"links: bandwidth as on the x axis, latency {latency} ns"
    else:
        network = f"links {links[0]}" if len(links) == 1 else "links: " + "; ".join(links)
    what = {"ranks": "scaled", "bandwidth": "at each link bandwidth", "accelerator": "on each accelerator"}[outcome.key]
    compute = f", roofline {options.accelerator}" if options.accelerator and outcome.key != "accelerator" else ""
    return (
        f"{os.path.basename(outcome.prefix)} ({outcome.captured_ranks} captured ranks) {what}, ASTRA-sim "
        f"congestion-{outcome.backend}{compute}\n{network}"
    )


def _write(
    outcome: SweepResult,
    outputs: Outputs,
    topologies: Sequence[str],
    options: SimulateOptions,
    json_output: str | None,
) -> None:
    values = list(dict.fromkeys(p.value for p in outcome.points))
    numeric = outcome.key != "accelerator"
    position = {v: (float(v) if numeric else float(i + 1)) for i, v in enumerate(values)}
    lines = {
        t: [(position[p.value], p.step_ns / 1e6, p.comm_share) for p in outcome.points if p.topology == t]
        for t in topologies
    }
    png = sweep_png(
        lines,
        plot_title(outcome, options),
        x_label=KEYS[outcome.key],
        log_x=numeric,
        tick_labels=None if numeric else values,
    )
    numbers = (json.dumps(outcome.as_json(), indent=2) + "\n").encode()
    outputs.put(outcome.table_path, outcome.table().encode())
    outputs.put(outcome.plot_path, png)
    outputs.put(outcome.json_path, numbers)
    outputs.put(json_output, numbers)
