"""One ASTRA-sim run: find the simulator, write its configs in a temporary directory (removed
after), run it, read its log as it is written (progress, the timeline) and check that every
rank finished.

The simulator is ``--astra-sim-bin`` (a binary, or a folder holding ``bin/NAME`` or ``NAME``),
else ``$ASTRA_SIM_HOME`` (the same), else ``PATH``; NAME is ASTRA-sim's analytical binary of the
backend: ``AstraSim_Analytical_Congestion_Unaware`` or ``..._Aware``. Its log comes through a
named pipe (no disk for the per-node lines, however large the job); its own rotating log (at
most ~110 MB) and its stdout/stderr stay in the temporary directory. The process is stopped when
we are (signals, errors), and dies with us (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import codecs
import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Any

from ..children import die_with_parent, end_group
from ..errors import ConverterError, SimulatorError
from ..et.decode import read_et
from ..io.output import atomic_text_output, check_output
from ..schema.chakra import NodeType
from . import configs, preflight
from .configs import Accelerator, Network, logging_config
from .job import Job, find_job
from .logs import KIND, LogReader
from .measured import measured_steps
from .notes import step_notes
from .reduced import Plan
from .setup import Setup, make_setup, read_network
from .timeline import TimelineWriter
from .waiting import waiting_for_peers

ENV = "ASTRA_SIM_HOME"
BINARIES = {"unaware": "AstraSim_Analytical_Congestion_Unaware", "aware": "AstraSim_Analytical_Congestion_Aware"}
HOW_TO_GET = (
    "build it with astra-sim/build.sh DEST (docs/getting-astra-sim.md) and set ASTRA_SIM_HOME=DEST, "
    "or pass `astra_sim_bin`"
)
_POLL_SECONDS = 0.25
_DRAIN_SECONDS = 2.0  # after the simulator exits, the longest its log pipe is read for
_STDERR_KEPT = 20000  # of the simulator's stderr, the end kept for messages


@dataclass(frozen=True)
class Progress:
    nodes_done: int
    nodes_total: int  # an estimate past 8 ranks
    ranks_finished: int
    ranks: int
    simulated_ns: int


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
    #: rank -> the measured step (ns) its ``.et`` records (Kineto conversions: ``measured.py``)
    measured_ns: dict[int, int] = field(default_factory=dict)
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
            "measured_step_ns": max(self.measured_ns.values()) if self.measured_ns else None,
            "notes": self.notes,
            "imbalance": self.imbalance,
            "per_rank": [{**r.__dict__, "transfer_ns": r.transfer_ns} for r in self.ranks],
            **({"memory": self.memory} if self.memory is not None else {}),
        }


def find_simulator(backend: str, given: str | None = None) -> str:
    """The ASTRA-sim binary of ``backend``, or a SimulatorError saying how to get it."""
    name = BINARIES[backend]
    if given:
        found = _in(given, name)
        if found is None:
            raise SimulatorError(
                f"`astra_sim_bin` {given}: no ASTRA-sim there (an executable, or a folder with "
                f"bin/{name}); {HOW_TO_GET}"
            )
        return found
    home = os.environ.get(ENV)
    if home:
        found = _in(home, name)
        if found is None:
            raise SimulatorError(f"ASTRA-sim not found: {ENV}={home} holds no bin/{name}; {HOW_TO_GET}")
        return found
    found = shutil.which(name)
    if found is None:
        raise SimulatorError(f"ASTRA-sim not found: {ENV} is not set and {name} is not on PATH; {HOW_TO_GET}")
    return found


def _in(place: str, name: str) -> str | None:
    """The executable ``name`` at ``place``, as an absolute path: the simulator runs in a
    temporary folder, so a relative ``--astra-sim-bin`` or ``ASTRA_SIM_HOME`` is resolved here,
    against the directory the command started in."""
    candidates = [place] if os.path.isfile(place) else [os.path.join(place, "bin", name), os.path.join(place, name)]
    found = next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)
    return None if found is None else os.path.abspath(found)


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
        returncode, stderr = _run(
            job, network, backend, setup, simulator, workdir, reader, timeout, started, progress, total
        )
        warnings = _check(returncode, stderr, reader, job, simulator, timeout)
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
        measured_ns=measured_steps(job),
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


def _run(
    job: Job,
    network: Network,
    backend: str,
    setup: Setup,
    simulator: str,
    workdir: str,
    reader: LogReader,
    timeout: float | None,
    started: float,
    progress: Callable[[Progress], None] | None,
    total: int,
) -> tuple[int, str]:
    events = os.path.join(workdir, "events.log")
    files = {  # the user's configs too, as read and checked here (configfiles): one network for both
        "system.json": json.dumps(setup.system, allow_nan=False),
        "remote_memory.json": json.dumps(setup.remote_memory, allow_nan=False),
        "network.yml": network.yaml(),
        "logging.toml": logging_config("events.log"),
    }
    try:
        os.mkfifo(events, 0o600)
        for name, text in files.items():
            with open(os.path.join(workdir, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        workload = _workload_argument(job, workdir)
    except OSError as exc:
        raise SimulatorError(f"{workdir}: cannot write ASTRA-sim's configs: {exc.strerror or exc}") from None
    # Every path is relative to the simulator's working folder, ``workdir``: no TMPDIR (one holding
    # "empty", which makes ASTRA-sim ignore a group file; a newline; an '=') reaches its options.
    command = [
        simulator,
        f"--workload-configuration={workload}",
        "--system-configuration=system.json",
        "--remote-memory-configuration=remote_memory.json",
        "--network-configuration=network.yml",
        "--logging-folder=log",
        "--logging-configuration=logging.toml",
        f"--comm-group-configuration={_groups_argument(job, workdir)}",
    ]
    fifo = os.open(events, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with (
            open(os.path.join(workdir, "stdout.txt"), "wb") as out,
            open(os.path.join(workdir, "stderr.txt"), "wb") as err,
        ):
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    cwd=workdir,
                    start_new_session=True,
                    preexec_fn=die_with_parent,
                )
            except OSError as exc:
                raise SimulatorError(f"cannot run ASTRA-sim {simulator}: {exc.strerror or exc}") from None
            try:
                _follow(process, fifo, reader, timeout, started, progress, total, job.ranks)
            finally:
                end_group(process.pid)  # the simulator and whatever it started, however we got here
                process.wait()
    finally:
        os.close(fifo)
    reader.close()
    if process.returncode != 0:  # an abort loses the log file's buffer: the finished lines are on stdout too
        with open(os.path.join(workdir, "stdout.txt"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "finished," in line:
                    reader.line(line.rstrip("\n"))
    with open(os.path.join(workdir, "stderr.txt"), "rb") as fh:  # its end only, however much it wrote
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - _STDERR_KEPT))
        stderr = fh.read(_STDERR_KEPT).decode("utf-8", errors="replace")
    return process.returncode, stderr


def _follow(
    process: subprocess.Popen[bytes],
    fifo: int,
    reader: LogReader,
    timeout: float | None,
    started: float,
    progress: Callable[[Progress], None] | None,
    total: int,
    ranks: int,
) -> None:
    """Read the log as it comes until the process has exited and the pipe is drained.

    ``timeout`` holds while anything of the simulator's runs or writes: once the process itself
    exits, its process group (what it started) is killed, and the pipe is read until its end, or
    for at most ``_DRAIN_SECONDS`` more should a writer that left the group keep it open. Each
    byte is decoded once, whatever the length of the lines (``LogReader.feed`` keeps a line's
    pieces, never re-copying them)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    last_report = 0.0
    exited_at: float | None = None
    while True:
        now = time.monotonic()
        if timeout is not None and now - started > timeout:
            end_group(process.pid)
            process.wait()
            raise SimulatorError(f"ASTRA-sim did not end within {timeout:g} s (`timeout`); stopped")
        if exited_at is None and process.poll() is not None:
            exited_at = now
            end_group(process.pid)  # a child it left running (a writer holding the log open) ends with it
        if exited_at is not None and now - exited_at > _DRAIN_SECONDS:
            break  # a writer outside its group keeps the pipe open: what ASTRA-sim wrote has been read
        readable, _, _ = select.select([fifo], [], [], _POLL_SECONDS)
        got = 0
        eof = False
        if readable:
            while True:
                try:
                    chunk = os.read(fifo, 1 << 20)
                except BlockingIOError:
                    break
                if not chunk:
                    eof = True
                    break
                got += len(chunk)
                reader.feed(decoder.decode(chunk))
                if time.monotonic() - now > _POLL_SECONDS:
                    break  # a writer faster than we read: look at the clock and the process again
        if progress is not None and time.monotonic() - last_report > 0.5:
            last_report = time.monotonic()
            progress(
                Progress(
                    reader.nodes_done, max(total, reader.nodes_done), reader.ranks_finished, ranks, reader.last_tick
                )
            )
        if exited_at is not None and not got:
            break  # exited, and nothing more in the pipe (EOF, or silence)
        if eof and not got:
            time.sleep(_POLL_SECONDS)  # no writer yet (EOF at once): do not spin
    reader.feed(decoder.decode(b"", final=True))
    if progress is not None:
        progress(
            Progress(reader.nodes_done, max(total, reader.nodes_done), reader.ranks_finished, ranks, reader.last_tick)
        )


def make_workdir(prefix: str, parent: str | None = None) -> str:
    """A new temporary folder (the system's, or in ``parent``), or a SimulatorError saying why not."""
    try:
        return tempfile.mkdtemp(prefix=prefix, dir=parent)
    except OSError as exc:
        raise SimulatorError(
            f"{parent or tempfile.gettempdir()}: cannot make a temporary folder: {exc.strerror or exc}"
        ) from None


def _groups_argument(job: Job, workdir: str) -> str:
    """ASTRA-sim's group file: the job's groups, as checked, copied into ``workdir`` and named
    relative to it (ASTRA-sim ignores any path that contains "empty"); "empty" when there are none."""
    if not job.groups:
        return "empty"
    try:
        with open(os.path.join(workdir, "groups.json"), "w", encoding="utf-8") as fh:
            json.dump(job.groups, fh)
    except OSError as exc:
        raise SimulatorError(f"{workdir}: cannot write ASTRA-sim's configs: {exc.strerror or exc}") from None
    return "groups.json"


#: A job path ASTRA-sim gets as it is; any other is linked into the working folder first.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")


def _workload_argument(job: Job, workdir: str) -> str:
    """The job's prefix as ASTRA-sim is given it: its absolute path where that is plain (no
    "empty", no space, newline, '=' or other character its option parser or its checks could
    take for something else), else ``job``: a symbolic link per rank in ``workdir``."""
    prefix = os.path.abspath(job.prefix)
    if _PLAIN_PATH.fullmatch(prefix) and "empty" not in prefix:
        return prefix
    for rank in range(job.ranks):
        os.symlink(os.path.abspath(job.rank_file(rank)), os.path.join(workdir, f"job.{rank}.et"))
    return "job"


#: ASTRA-sim 518bd51 corrupts its heap on collectives over sub-groups and may die in its closing
#: statistics or at exit, after every rank logged ``finished`` (docs: text workloads).
_CRASHES_AT_EXIT = (signal.SIGABRT, signal.SIGSEGV)


def _check(
    returncode: int, stderr: str, reader: LogReader, job: Job, simulator: str, timeout: float | None
) -> list[str]:
    """Raise ``SimulatorError`` unless every rank finished in a run that ended well; returns the
    warnings of a run whose result stands (a crash at exit once every rank had finished)."""
    name = os.path.basename(simulator)
    finished = not reader.unknown_ranks and all(r.finished for r in reader.ranks)
    if returncode in tuple(-s for s in _CRASHES_AT_EXIT) and finished:
        return [
            f"ASTRA-sim ({name}) died of {_signal_name(-returncode)} after every rank had finished "
            "(a known ASTRA-sim bug with communicator sub-groups); the steps are read from its log, whose last "
            "per-node lines may be lost (node and communication counts can fall short)"
        ]
    if returncode < 0:
        said = _reason(stderr, reader, "")
        raise SimulatorError(
            f"ASTRA-sim ({name}) was killed by {_signal_name(-returncode)}{': ' + said if said else ''}; no result"
        )
    if returncode != 0:
        raise SimulatorError(f"ASTRA-sim ({name}) failed with exit status {returncode}: {_reason(stderr, reader)}")
    if reader.unknown_ranks:
        raise SimulatorError(
            f"ASTRA-sim's log names rank {min(reader.unknown_ranks)}, but {job.prefix} has {job.ranks} ranks"
        )
    unfinished = [r.rank for r in reader.ranks if not r.finished]
    if not unfinished:
        return []
    dropped = {d.rank: d for d in reader.dropped()}
    first = next((dropped[r] for r in unfinished if r in dropped), None)
    where = f"rank {unfinished[0]} did not finish ({len(unfinished)} of {job.ranks} ranks unfinished)"
    if first is not None:
        where += (
            f"; the first node ASTRA-sim dropped: rank {first.rank} node {first.node_id} '{first.name}' "
            f"({KIND.get(first.node_type, 'other')}, issued at {first.issued_at / 1e6:.3f} ms, never completed)"
        )
    if reader.problems:
        where += f"; ASTRA-sim said: {reader.problems[0]}"
    raise SimulatorError(where)


def _reason(stderr: str, reader: LogReader, nothing: str = "no message") -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if any("error while loading shared libraries" in line for line in lines):
        library = next(line for line in lines if "error while loading shared libraries" in line)
        return f"{library} (Debian/Ubuntu: apt-get install libprotobuf32)"
    what = [line for line in lines if "what():" in line]
    if what:
        return what[-1].split("what():", 1)[1].strip()
    if reader.problems:
        return reader.problems[0]
    return lines[-1] if lines else nothing


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class SimulateOptions:
    """What ``simulate`` is asked for (the command line's options, as strings where it takes lists;
    ``bandwidth`` and ``latency`` also as a number, or one a dimension). ``api.simulate`` checks
    every field as the command line checks its flags, ranges included (``optioncheck.py``)."""

    topology: str = "Ring"
    npus_per_dim: str | None = None
    bandwidth: str | None = None  # GB/s, one a dimension or one for all
    latency: str | None = None  # ns, the same
    backend: str = "unaware"
    comm_groups: str | None = None
    astra_sim_bin: str | None = None
    accelerator: str | None = None
    peak_tflops: float | None = None
    mem_bandwidth: float | None = None  # GB/s
    timeout: float | None = None
    check: bool = True  # the job's files checked first (preflight.py)
    system_config: str | None = None  # the user's files (setup.py)
    network_config: str | None = None
    remote_memory_config: str | None = None
    collective: str | None = None  # one algorithm, or one a dimension
    active_chunks: int | None = None
    replay: bool = False  # replay-only: every node its traced duration


def roofline_option(options: SimulateOptions) -> str:
    """The option that asked for a roofline, as messages name it."""
    if options.accelerator is not None:
        return f"`accelerator` {options.accelerator}"
    return "`peak_tflops`" if options.peak_tflops is not None else "`mem_bandwidth`"


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


def network_of(options: SimulateOptions, ranks: int, topology: str | None = None) -> Network:
    """The network of ``ranks`` NPUs: the user's file, else made from the options (``topology``
    replacing theirs: a sweep's line)."""
    if options.network_config is not None:
        return read_network(options.network_config, ranks)
    return configs.network(
        topology or options.topology, ranks, options.npus_per_dim, options.bandwidth, options.latency
    )


def setup_of(options: SimulateOptions, network: Network, roofline: Accelerator | None) -> Setup:
    setup = make_setup(
        len(network.npus),
        roofline,
        system_file=options.system_config,
        network_file=options.network_config,
        remote_memory_file=options.remote_memory_config,
        collective=options.collective,
        active_chunks=options.active_chunks,
    )
    if options.replay:  # every node its traced duration, communication included (Workload::issue)
        setup.system["replay-only"] = 1
    return setup
