"""One ASTRA-sim run and its result: ``simulate_prefix`` checks everything first (the job, its
groups, the network, the roofline, the simulator), ``simulate`` runs the job (``process.py``: the
binary, its working folder, its log pipe), reads its log as it is written (progress, the timeline)
and returns one ``SimulationResult`` per run, every rank's step in it.

The simulator is ``--astra-sim-bin`` (a binary, or a folder holding ``bin/NAME`` or ``NAME``),
else ``$ASTRA_SIM_HOME`` (the same), else ``PATH``; NAME is ASTRA-sim's analytical binary of the
backend: ``AstraSim_Analytical_Congestion_Unaware`` or ``..._Aware``. Its log comes through a
named pipe (no disk for the per-node lines, however large the job); its own rotating log (at
most ~110 MB) and its stdout/stderr stay in the temporary directory. The process is stopped when
we are (signals, errors), and dies with us (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import ConverterError
from ..et.decode import read_et
from ..io.output import atomic_text_output, check_output
from ..schema.chakra import NodeType
from . import configs, preflight
from .configs import Accelerator, Network
from .job import Job, find_job
from .logs import LogReader
from .measured import Measured, Recorded, job_measured, judge, note, recorded_steps
from .notes import step_notes

# what the importers of this module name from it: the options (options.py) and the process (process.py)
from .options import SimulateOptions as SimulateOptions
from .options import network_of as network_of
from .options import roofline_option as roofline_option
from .options import setup_of as setup_of
from .process import BINARIES as BINARIES
from .process import ENV as ENV
from .process import Progress as Progress
from .process import check_run, run_simulator
from .process import find_simulator as find_simulator
from .process import make_workdir as make_workdir
from .reduced import Plan
from .setup import Setup, make_setup
from .timeline import TimelineWriter
from .waiting import waiting_for_peers


@dataclass(frozen=True)
class RankResult:
    """One rank's simulated step (ns): its ``finished`` time, its communication nodes' summed time,
    the time any of them ran, the part of that with no compute running (exposed), and ASTRA-sim's
    own "exposed communication" (step minus non-CPU compute: all of a CPU capture's step)."""

    rank: int
    step_ns: int
    comm_ns: int
    comm_busy_ns: int
    exposed_comm_ns: int
    astra_exposed_ns: int
    nodes: int
    collectives: int
    sends: int
    recvs: int
    waiting_ns: int = 0  # of comm_ns: collectives waiting for the last rank of their group (waiting.py)

    @property
    def transfer_ns(self) -> int:
        """Of comm_ns, what is not waiting for peers."""
        return self.comm_ns - self.waiting_ns


@dataclass(frozen=True)
class SimulationResult:
    prefix: str
    ranks: list[RankResult]
    network: Network
    backend: str
    roofline: Accelerator | None
    comm_groups: str | None
    simulator: str
    seconds: float
    timeline: str | None
    timeline_events: int
    warnings: list[str] = field(default_factory=list)
    setup: Setup | None = None
    plan: Plan | None = None  # simulate --ranks: the job asked for, and whether a reduced one ran for it
    #: rank -> the steps its ``.et`` records (Kineto conversions, and the host path's with
    #: ``--astra-sim``: ``measured.py``)
    recorded: dict[int, Recorded] = field(default_factory=dict)
    #: the user's own measured step (ns; ``simulate --measured-ms``), held against every rank
    yours_ns: int | None = None
    #: whether each rank's memory fits the accelerator (``memory/fit.py``), where asked and known
    memory: dict[str, Any] | None = None
    #: what the step cannot tell by itself (``notes.py``): kernels left as CPU ops, empty collectives,
    #: a host-bound step, a what-if's device
    notes: list[str] = field(default_factory=list)
    #: how the captured ranks differ in compute and how much of the step the most waiting rank
    #: waits for its peers (``ranks/imbalance.py``: ``Imbalance.as_json``); None where not measured
    imbalance: dict[str, Any] | None = None

    @property
    def modelled_ranks(self) -> int:
        """The ranks of the job this result stands for (more than ran, where a reduced job ran)."""
        return self.plan.ranks if self.plan is not None else len(self.ranks)

    @property
    def replay(self) -> bool:
        """``replay-only``: every node took its traced duration."""
        return self.setup is not None and bool(self.setup.system.get("replay-only"))

    @property
    def measured(self) -> dict[int, Measured]:
        """rank -> the step its replay is held against, and what it is (``measured.py``)."""
        return judge(self.recorded, [r.rank for r in self.ranks], self.yours_ns)

    @property
    def measured_ns(self) -> dict[int, int]:
        """rank -> the step (ns) its replay is held against, for the ranks where one is known: the
        untraced step where the profiler's time was taken out and it is known, else the traced one
        (or the user's)."""
        return {rank: m.ns for rank, m in self.measured.items() if m.ns}

    @property
    def slowest(self) -> RankResult:
        return max(self.ranks, key=lambda r: (r.step_ns, -r.rank))

    @property
    def step_ns(self) -> int:
        """The job's step: its slowest rank's."""
        return self.slowest.step_ns

    def as_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "ranks": self.modelled_ranks,
            "step_ns": self.step_ns,
            "slowest_rank": self.slowest.rank,
            "simulated_ranks": len(self.ranks),
            "simulated_as": None if self.plan is None else self.plan.as_json(),
            "network": {
                "topology": list(self.network.topology),
                "npus_per_dim": list(self.network.npus),
                "bandwidth_gbps": list(self.network.bandwidth),
                "latency_ns": list(self.network.latency),
            },
            "backend": self.backend,
            "roofline": None
            if self.roofline is None
            else {
                "accelerator": self.roofline.name,
                "peak_tflops": self.roofline.peak_tflops,
                "mem_bandwidth_gbps": self.roofline.mem_bandwidth_gbps,
                "source": self.roofline.source,
            },
            "comm_groups": self.comm_groups,
            "simulator": self.simulator,
            "wall_seconds": round(self.seconds, 3),
            "timeline": self.timeline,
            "configs": None if self.setup is None else self.setup.as_json(),
            "replay": self.replay,
            **self._measured_json(),
            "notes": self.notes,
            "imbalance": self.imbalance,
            "per_rank": [{**r.__dict__, "transfer_ns": r.transfer_ns} for r in self.ranks],
            **({"memory": self.memory} if self.memory is not None else {}),
        }

    def _measured_json(self) -> dict[str, Any]:
        measured = self.measured
        job = job_measured(measured)
        said = job.recorded.baseline if job is not None and job.recorded is not None else None
        traced = [m.traced_ns for m in measured.values() if m.traced_ns]
        untraced = [m.untraced_ns for m in measured.values() if m.untraced_ns]
        return {
            "measured_step_ns": job.ns if job is not None and job.ns else None,
            "measured_as": job.kind if job is not None and job.ns else None,
            "traced_step_ns": max(traced) if traced else None,
            "untraced_step_ns": max(untraced) if untraced else None,
            "tracing_overhead": None
            if said is None
            else {
                "correction": said.correction,
                "removed_ns": round(said.removed_us * 1000),
                "source": said.source,
                "calibration": said.calibration,
            },
            "measured_note": note(measured, self.roofline is not None),
            "measured_per_rank": [{"rank": rank, **m.as_json()} for rank, m in sorted(measured.items())],
        }


def simulate(
    job: Job,
    network: Network,
    *,
    backend: str = "unaware",
    roofline: Accelerator | None = None,
    simulator: str,
    timeline: str | IO[str] | None = None,
    timeout: float | None = None,
    progress: Callable[[Progress], None] | None = None,
    setup: Setup | None = None,
) -> SimulationResult:
    """Run ``job`` on ``network`` and read the result; the timeline (if asked for) is written
    atomically: it exists only if the run succeeded (or, given an open file, written into it: its
    caller commits it, ``outputs.Outputs``). ``setup``: the system and remote-memory configs
    (default: ours, ``make_setup``), and the user's network file if any."""
    setup = setup or make_setup(len(network.npus), roofline)
    path = timeline if isinstance(timeline, str) else None
    target = check_output(path, *(job.rank_file(r) for r in range(job.ranks))) if path else None
    total = job.estimate_nodes() if progress is not None else 0
    started = time.monotonic()
    with ExitStack() as stack:
        workdir = make_workdir("chakra-simulate-")
        stack.callback(shutil.rmtree, workdir, True)
        writer = None
        out = stack.enter_context(atomic_text_output(target)) if target is not None else timeline
        if out is not None and not isinstance(out, str):
            writer = TimelineWriter(out, job.ranks, f"{job.prefix} on {network.name}, {backend}")
        reader = LogReader(job.ranks, writer.span if writer else None)
        returncode, stderr = run_simulator(
            job, network, backend, setup, simulator, workdir, reader, timeout, started, progress, total
        )
        warnings = check_run(returncode, stderr, reader, job, simulator, timeout)
        if writer is not None:
            writer.close()
    waited = waiting_for_peers(reader.ranks, _collective_groups(job) if job.groups else None)
    ranks = [
        RankResult(
            r.rank,
            r.cycles,
            r.comm_time,
            r.comm_busy,
            r.exposed_comm,
            r.astra_exposed,
            r.nodes_done,
            r.comm_done.get("collective", 0),
            r.comm_done.get("send", 0),
            r.comm_done.get("recv", 0),
            waited[r.rank],
        )
        for r in reader.ranks
    ]
    slowest = max(ranks, key=lambda r: (r.step_ns, -r.rank)) if ranks else None
    notes = step_notes(job, slowest.rank, slowest.step_ns, roofline is not None) if slowest is not None else []
    return SimulationResult(
        job.prefix,
        ranks,
        network,
        backend,
        roofline,
        job.comm_groups,
        simulator,
        time.monotonic() - started,
        path,
        writer.events if writer else 0,
        warnings,
        setup,
        recorded=recorded_steps(job),
        notes=notes,
    )


def _collective_groups(job: Job) -> dict[tuple[int, int], str]:
    """(rank, collective node id) -> its group, read from the job's files (only where it has sub-groups)."""
    found: dict[tuple[int, int], str] = {}
    for rank in range(job.ranks):
        trace = read_et(job.rank_file(rank))
        for row, attrs in trace.comm.items():
            if trace.types[row] == NodeType.COMM_COLL_NODE:
                found[(rank, trace.ids[row])] = str(attrs.get("pg_name") or "0")
    return found


def simulate_prefix(
    prefix: str,
    options: SimulateOptions,
    *,
    timeline: str | IO[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SimulationResult:
    """Everything checked first (the job, its groups, the network, the roofline, the simulator),
    then the run."""
    if options.backend not in BINARIES:
        raise ConverterError(f"`backend` {options.backend}: one of {', '.join(BINARIES)}")
    job = find_job(prefix, options.comm_groups)
    preflight.one_rank(job)
    network = network_of(options, job.ranks)
    configs.check_backend(network, options.backend)
    roofline = configs.accelerator(options.accelerator, options.peak_tflops, options.mem_bandwidth)
    setup = setup_of(options, network, roofline)
    if options.check:
        preflight.check_job(job, roofline, roofline_option(options))
    simulator = find_simulator(options.backend, options.astra_sim_bin)
    return run_job(job, network, options, roofline, setup, simulator, timeline=timeline, progress=progress)


def run_job(
    job: Job,
    network: Network,
    options: SimulateOptions,
    roofline: Accelerator | None,
    setup: Setup,
    simulator: str,
    *,
    timeline: str | IO[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SimulationResult:
    """``simulate`` as ``options`` ask it (their backend and timeout), everything else checked and
    chosen by the caller: the one call of ``simulate`` for one job, a width's job and a sweep's point."""
    return simulate(
        job,
        network,
        backend=options.backend,
        roofline=roofline,
        simulator=simulator,
        timeline=timeline,
        timeout=options.timeout,
        progress=progress,
        setup=setup,
    )
