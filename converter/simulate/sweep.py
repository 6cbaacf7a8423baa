"""``simulate --sweep ranks=...``: the job scaled to each rank count (``scale``) and simulated on
each network; a table (markdown), a plot (PNG) and the numbers (JSON).

Everything is checked before the first simulation: the job, each network at each rank count,
the simulator, matplotlib, the outputs. Each scaled job is written in a temporary folder (or
``--work-dir``) and removed once simulated; the point at the captured rank count is the capture
itself. The three outputs are written at the end, each atomically: a failing point leaves none.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConverterError
from ..io import OutputTarget, atomic_output, atomic_text_output, check_output
from . import configs, preflight
from .job import find_job
from .plot import pyplot, sweep_png
from .run import (
    BINARIES,
    Progress,
    SimulateOptions,
    SimulationResult,
    find_simulator,
    make_workdir,
    network_of,
    roofline_option,
    setup_of,
    simulate,
)

Scale = Callable[[str, str, int], Any]


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

    def table(self) -> str:
        rows = ["| ranks | network | simulated step (ms) | communication (ms) | communication share | exposed "
                "communication (ms) | nodes per rank | ASTRA-sim wall time (s) | scale time (s) |",
                "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for p in self.points:
            rows.append(f"| {p.ranks:,} | {p.network} | {p.step_ns / 1e6:,.2f} | {p.comm_busy_ns / 1e6:,.2f} | "
                        f"{p.comm_share:.1%} | {p.exposed_comm_ns / 1e6:,.2f} | {p.nodes_per_rank:,.0f} | "
                        f"{p.seconds:.1f} | {p.scale_seconds:.1f} |")
        return "\n".join(rows) + "\n"

    def as_json(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "captured_ranks": self.captured_ranks, "backend": self.backend,
                "points": [{**p.__dict__, "comm_share": p.comm_share} for p in self.points]}


def sweep(prefix: str, points: Sequence[int], topologies: Sequence[str], options: SimulateOptions, *,
          scale: Scale, out_prefix: str | None = None, work_dir: str | None = None,
          on_point: Callable[[SweepPoint], None] | None = None,
          progress: Callable[[Progress], None] | None = None, scale_capture: bool = False) -> SweepResult:
    """Each point's job is ``scale(prefix, scratch, count)``, except the capture's own rank count,
    simulated as captured unless ``scale_capture`` (a ``scale`` that rewrites ranks: ``--compact``)."""
    if not points or any(n < 1 for n in points):
        raise ConverterError("--sweep ranks=...: rank counts are at least 1")
    if options.backend not in BINARIES:
        raise ConverterError(f"--backend {options.backend}: one of {', '.join(BINARIES)}")
    job = find_job(prefix, options.comm_groups)
    ranks = sorted(set(points))
    for count in ranks:
        for topology in topologies:
            network = network_of(options, count, topology)
            configs.check_backend(network, options.backend)
            setup_of(options, network, None)
    roofline = configs.accelerator(options.accelerator, options.peak_tflops, options.mem_bandwidth)
    if options.check:
        preflight.check_job(job, roofline, roofline_option(options))
    simulator = find_simulator(options.backend, options.astra_sim_bin)
    pyplot()
    out = out_prefix or f"{prefix}.sweep"
    inputs = [job.rank_file(r) for r in range(job.ranks)]
    targets = {ext: check_output(f"{out}.{ext}", *inputs) for ext in ("md", "png", "json")}
    parent = work_dir or tempfile.gettempdir()
    if not os.path.isdir(parent):
        raise ConverterError(f"--work-dir {parent}: no such directory")
    done: list[SweepPoint] = []
    for count in ranks:
        scratch = make_workdir("chakra-sweep-", parent)
        try:
            started = time.monotonic()
            if count == job.ranks and not scale_capture:
                point_job, scaled = job, 0.0
            else:
                scaled_prefix = os.path.join(scratch, os.path.basename(prefix))
                scale(prefix, scaled_prefix, count)
                point_job, scaled = find_job(scaled_prefix), time.monotonic() - started
            for topology in topologies:
                network = network_of(options, count, topology)
                result = simulate(point_job, network, backend=options.backend, roofline=roofline,
                                  simulator=simulator, timeout=options.timeout, progress=progress,
                                  setup=setup_of(options, network, roofline))
                point = _point(count, topology, result, scaled)
                done.append(point)
                if on_point is not None:
                    on_point(point)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    outcome = SweepResult(prefix, job.ranks, options.backend, done, targets["md"].path, targets["png"].path,
                          targets["json"].path)
    _write(outcome, targets, topologies, options.backend)
    return outcome


def _point(count: int, topology: str, result: SimulationResult, scaled: float) -> SweepPoint:
    slowest = result.slowest
    nodes = sum(r.nodes for r in result.ranks) / len(result.ranks)
    return SweepPoint(count, topology, result.network.name, result.step_ns, slowest.comm_busy_ns,
                      slowest.exposed_comm_ns, nodes, result.seconds, scaled)


def _write(outcome: SweepResult, targets: dict[str, OutputTarget], topologies: Sequence[str], backend: str) -> None:
    lines = {t: [(p.ranks, p.step_ns / 1e6, p.comm_share) for p in outcome.points if p.topology == t]
             for t in topologies}
    png = sweep_png(lines, f"{os.path.basename(outcome.prefix)} ({outcome.captured_ranks} captured ranks) scaled, "
                           f"ASTRA-sim congestion-{backend}")
    with atomic_text_output(targets["md"]) as fh:
        fh.write(outcome.table())
    with atomic_output(targets["png"]) as fh:
        fh.write(png)
    with atomic_text_output(targets["json"]) as fh:
        json.dump(outcome.as_json(), fh, indent=2)
        fh.write("\n")
