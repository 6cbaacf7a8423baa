"""ASTRA-sim's process: the binary found, its configs written in a working folder, the run
followed through its log pipe (progress, a timeout, every child ended with it), and its end read:
which ranks finished, and why not (``check_run``)."""

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
from dataclasses import dataclass

from ..children import die_with_parent, end_group
from ..errors import SimulatorError
from .configs import Network, logging_config
from .job import Job
from .logs import KIND, LogReader
from .setup import Setup

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


def run_simulator(
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


def check_run(
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
