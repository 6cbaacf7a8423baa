"""Signals: SIGINT, SIGTERM and SIGHUP end every command with one line and 130/143/129, leaving no
temporary file and no live child; after SIGKILL of a conversion, its worker exits by itself and
its spill file was never visible.

Each signal is sent at a known phase: the processes are stopped (SIGSTOP) once the phase is seen
(the worker process started; the input open; the output being written, seen in ``/proc``), the
signal is sent, and they are resumed, so the timing of the machine does not matter.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from chakra_convert_fast.converter import api, cli

from .clirun import CLI, ERROR_PREFIX, kill_session, listing
from .linkcases import edge_case_pair
from .simjobs import write_job
from .tracebuild import trace, two_threads
from .traces import ROOT

pytestmark = [pytest.mark.slow]

#: A plain-JSON trace this large is read by two processes (``parallel.MIN_SPLIT_BYTES``: 48 MB).
SPLIT_NODES = 50_000
MESSAGES = {
    signal.SIGINT: "interrupted; no output written",
    signal.SIGTERM: "terminated by SIGTERM; no output written",
    signal.SIGHUP: "terminated by SIGHUP; no output written",
}


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.fixtures.generate",
            "--nodes",
            str(SPLIT_NODES),
            "--compact",
            "-o",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    assert path.stat().st_size >= 48 << 20
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return edge_case_pair(tmp_path_factory.mktemp("pair"), layers=3000, gz=False)


# -- phases -----------------------------------------------------------------------------------
def _open_files(pid: int) -> list[tuple[str, int]]:
    """(what each descriptor of ``pid`` names, its access mode) from /proc."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = int(info.read().split("flags:")[1].split()[0], 8)
        except (OSError, IndexError):
            continue
        found.append((target, flags & os.O_ACCMODE))
    return found


def writing_into(directory: Path) -> Callable[[psutil.Process], bool]:
    """The output is being written: a file in ``directory`` open for writing only (spill files
    are open for reading and writing)."""
    return lambda process: any(
        target.startswith(f"{directory}/") and mode == os.O_WRONLY for target, mode in _open_files(process.pid)
    )


def reading(path: Path) -> Callable[[psutil.Process], bool]:
    return lambda process: any(target == str(path) for target, _ in _open_files(process.pid))


def has_worker(process: psutil.Process) -> bool:
    return bool(process.children())


Started = tuple[subprocess.Popen[str], list[psutil.Process]]


@pytest.fixture(autouse=True)
def no_process_left() -> Iterator[None]:
    """Whatever a test asserts, every process it started is gone when it ends."""
    yield
    for process, group in _STARTED:
        kill_session(process.pid)
        for member in group:
            with suppress(psutil.NoSuchProcess):
                member.kill()
        process.communicate()
    _STARTED.clear()


_STARTED: list[Started] = []


def start(args: list[str | Path], phase: Callable[[psutil.Process], bool]) -> Started:
    """Run the command until ``phase`` holds, then stop it and its children (SIGSTOP)."""
    process = subprocess.Popen(
        [*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    main = psutil.Process(process.pid)
    _STARTED.append((process, [main]))
    deadline = time.monotonic() + 120
    try:
        while not phase(main):
            assert process.poll() is None, f"ended before the phase: {process.communicate()[1]}"
            assert time.monotonic() < deadline, "the phase never came"
            time.sleep(0.002)
        group = [main, *main.children(recursive=True)]
        _STARTED[-1] = (process, group)
        for member in group:
            member.suspend()
    except BaseException:
        kill_session(process.pid)
        process.communicate()
        raise
    return process, group


def signal_and_wait(process: subprocess.Popen[str], group: list[psutil.Process], signum: int) -> str:
    os.kill(process.pid, signum)
    for member in group:
        member.resume()
    try:
        return process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        kill_session(process.pid)
        process.communicate()
        raise AssertionError("the command did not end after the signal") from None


def assert_no_live_child(group: list[psutil.Process], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    for child in group[1:]:
        while _alive(child):
            assert time.monotonic() < deadline, f"worker {child.pid} still alive"
            time.sleep(0.05)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_stopped_cleanly(done: subprocess.Popen[str], stderr: str, signum: int) -> None:
    assert done.returncode == 128 + signum, stderr
    assert stderr.splitlines() == [ERROR_PREFIX + MESSAGES[signal.Signals(signum)]], stderr


# -- convert: two processes ---------------------------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("phase", ["reading, worker running", "writing"])
def test_convert_stops_cleanly(signum: int, phase: str, big_trace: Path, tmp_path: Path) -> None:
    condition = has_worker if phase.startswith("reading") else writing_into(tmp_path)
    process, group = start(["convert", big_trace, tmp_path / "out.et"], condition)
    if phase.startswith("reading"):
        assert len(group) == 2, "the worker process runs"
    stderr = signal_and_wait(process, group, signum)
    assert_stopped_cleanly(process, stderr, signum)
    assert_no_live_child(group)
    assert listing(tmp_path) == []


def test_worker_exits_by_itself_when_the_conversion_is_killed(big_trace: Path, tmp_path: Path) -> None:
    process, group = start(["convert", big_trace, tmp_path / "out.et"], has_worker)
    assert len(group) == 2
    assert listing(tmp_path) == [], "no spill file is ever visible"
    os.kill(process.pid, signal.SIGKILL)
    for member in group:
        member.resume()
    process.communicate(timeout=60)
    try:
        assert_no_live_child(group, within=5.0)
    finally:
        for child in group[1:]:
            if _alive(child):
                child.kill()
    assert listing(tmp_path) == []


def test_nothing_is_left_when_killed_while_writing(big_trace: Path, tmp_path: Path) -> None:
    process, group = start(["convert", big_trace, tmp_path / "out.et"], writing_into(tmp_path))
    os.kill(process.pid, signal.SIGKILL)
    for member in group:
        member.resume()
    process.communicate(timeout=60)
    assert listing(tmp_path) == []


# -- link, convert --host/--device, convert-all ---------------------------------------------------
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.parametrize("command", ["link", "convert"])
@pytest.mark.parametrize("phase", ["reading", "writing"])
def test_pair_commands_stop_cleanly(
    signum: int, command: str, phase: str, pair: tuple[Path, Path], tmp_path: Path
) -> None:
    host, device = pair
    out = tmp_path / ("merged.json" if command == "link" else "out.et")
    condition = reading(host) if phase == "reading" else writing_into(tmp_path)
    process, group = start([command, "--host", host, "--device", device, out], condition)
    stderr = signal_and_wait(process, group, signum)
    assert_stopped_cleanly(process, stderr, signum)
    assert listing(tmp_path) == []


def test_convert_all_stops_its_ranks(tmp_path: Path) -> None:
    for rank in range(2):
        edge_case_pair(tmp_path / "job", layers=3000, rank=rank, world=2, gz=False)
    out = tmp_path / "out"

    def ranks_writing(process: psutil.Process) -> bool:
        return any(writing_into(out)(child) for child in process.children())

    process, group = start(["convert-all", tmp_path / "job", out, "--jobs", "2"], ranks_writing)
    assert len(group) >= 2, "rank workers run"
    stderr = signal_and_wait(process, group, signal.SIGTERM)
    assert_stopped_cleanly(process, stderr, signal.SIGTERM)
    assert_no_live_child(group)
    assert not out.exists() or listing(out) == []


# -- round two: start-up, the moment after the commit, workers of every read path ---------------------
def _catches(pid: int, signum: int) -> bool:
    """Whether ``pid`` has a handler for ``signum`` (``SigCgt`` of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except OSError:
        pass
    return False


def _maps(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return maps.read()
    except OSError:
        return ""


def _convert_once_its_handlers_are_in(tmp_path: Path, blocked: frozenset[int] = frozenset()) -> subprocess.Popen[str]:
    """``convert`` of a bad input, started (with ``blocked`` signals blocked, a mask it inherits)
    and stopped (SIGSTOP) as soon as its start-up handlers catch signals: Python itself never
    catches SIGTERM."""
    (tmp_path / "in.json").write_text("{}")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        process = subprocess.Popen(
            [*CLI, "convert", str(tmp_path / "in.json"), str(tmp_path / "o.et")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    _STARTED.append((process, [psutil.Process(process.pid)]))
    deadline = time.monotonic() + 60
    while not _catches(process.pid, signal.SIGTERM):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
        time.sleep(0.0002)
    os.kill(process.pid, signal.SIGSTOP)
    return process


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_python_imports_the_package_is_one_line(signum: int, tmp_path: Path) -> None:
    """The handler is in place before the package's heavy imports (msgspec, the converter): caught
    there, the signal ends the command with its one line, not a ``KeyboardInterrupt`` traceback
    from the middle of an import (Python's default until ``main`` ran)."""
    process = _convert_once_its_handlers_are_in(tmp_path)
    importing = "msgspec" not in _maps(process.pid)
    os.kill(process.pid, signum)
    os.kill(process.pid, signal.SIGCONT)
    stderr = process.communicate(timeout=60)[1]
    assert importing, "the handler came only after the package's imports"
    assert_stopped_cleanly(process, stderr, signum)
    assert listing(tmp_path) == ["in.json"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_command_started_with_the_signals_blocked_still_ends_on_them(signum: int, tmp_path: Path) -> None:
    """A signal mask is inherited: a parent with the stop signals blocked (a test runner after a
    commit step, a supervisor's thread) used to start a command whose Ctrl-C stayed pending until
    its last step, so it ran on and ended with its own error (1). The command line unblocks them."""
    stops = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
    process = _convert_once_its_handlers_are_in(tmp_path, stops)
    os.kill(process.pid, signum)
    os.kill(process.pid, signal.SIGCONT)
    stderr = process.communicate(timeout=60)[1]
    assert_stopped_cleanly(process, stderr, signum)
    assert listing(tmp_path) == ["in.json"]


@pytest.mark.parametrize("other_thread", [False, True], ids=["one thread", "another thread running"])
def test_an_interrupt_after_the_commit_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_thread: bool
) -> None:
    """Ctrl-C while the summary is printed, the output already in place: the command used to say
    "interrupted; no output written" (130) over a replaced output. The commit and its report are
    one step: the signal waits, and is dropped when the command is over. With another thread
    running (torch's, a queue's feeder), the kernel gives the signal to that thread, whose mask
    does not block it: the handler must still hold it."""
    stop = threading.Event()
    if other_thread:
        threading.Thread(target=stop.wait, daemon=True).start()
    from chakra_convert_fast.converter import cli
    from chakra_convert_fast.converter.cli import report

    (tmp_path / "in.json").write_text(json.dumps(trace(two_threads())))
    (tmp_path / "o.et").write_bytes(b"previous")
    sent: list[bool] = []
    real_info = report.Reporter.info

    def interrupt_once(self: report.Reporter, message: str) -> None:
        if not sent and (tmp_path / "o.et").read_bytes() != b"previous":
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # a signal that is not held is handled here
        real_info(self, message)

    monkeypatch.setattr(report.Reporter, "info", interrupt_once)
    try:
        assert cli.main(["convert", str(tmp_path / "in.json"), str(tmp_path / "o.et")]) == 0
    finally:
        stop.set()
    assert sent and (tmp_path / "o.et").read_bytes() != b"previous"


_DRIVER = """
import sys
from chakra_convert_fast.converter import cli
from chakra_convert_fast.converter.convert import feed, parallel
from chakra_convert_fast.converter.link import pipeline
parallel.MIN_SPLIT_BYTES, parallel.MIN_RANGE_BYTES = 1 << 20, 1 << 19  # small inputs take the worker paths
feed.MIN_FEED_BYTES = 1 << 16
pipeline._MIN_PARALLEL_BYTES = 1 << 16
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def mid_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mid") / "mid.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "chakra_convert_fast.fixtures.generate",
            "--nodes",
            "8000",
            "--compact",
            "-o",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    gz = path.with_suffix(".json.gz")
    with open(path, "rb") as plain, gzip.open(gz, "wb", compresslevel=1) as packed:
        shutil.copyfileobj(plain, packed)
    return path


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """Two ranks' pairs in one directory; rank 0's host and device traces."""
    folder = tmp_path_factory.mktemp("job")
    host, device = edge_case_pair(folder, layers=3000, rank=0, world=2, gz=False)
    edge_case_pair(folder, layers=3000, rank=1, world=2, gz=False)
    return folder, host, device


def _settled(children: list[psutil.Process], path: str) -> bool:
    """Workers run; a gzip-feed worker has answered once (its queue's thread runs: a signal may
    go to that thread while the main one waits for the next chunk, which is what held it ~5 s)."""
    if path != "gzip feed":
        return bool(children)
    with suppress(psutil.Error):
        return any(child.num_threads() >= 3 for child in children)
    return False


@pytest.mark.parametrize("path", ["byte ranges", "gzip feed", "link", "convert-all"])
def test_every_worker_is_gone_within_a_second_of_its_parent_s_death(
    path: str, mid_trace: Path, job: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    folder, host, device = job
    cases: dict[str, list[str | Path]] = {
        "byte ranges": ["convert", mid_trace, tmp_path / "o.et", "--jobs", "2"],
        "gzip feed": ["convert", mid_trace.with_suffix(".json.gz"), tmp_path / "o.et", "--jobs", "2"],
        "link": ["link", "--host", host, "--device", device, tmp_path / "m.json"],
        "convert-all": ["convert-all", folder, tmp_path / "out", "--jobs", "2"],
    }
    args = cases[path]
    process = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    main = psutil.Process(process.pid)
    _STARTED.append((process, [main]))
    deadline = time.monotonic() + 60
    while not _settled(main.children(), path):
        assert process.poll() is None, f"ended before a worker started: {process.communicate()[1]}"
        assert time.monotonic() < deadline, "no worker started"
        time.sleep(0.002)
    group = [main, *main.children(recursive=True)]
    _STARTED[-1] = (process, group)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    killed = time.monotonic()
    assert_no_live_child(group, within=1.0)
    assert time.monotonic() - killed <= 1.0


def test_an_interrupt_between_two_outputs_says_which_was_written(
    pair: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``convert --keep-merged``: interrupted once the merged trace is in place, before the .et is,
    the command says so instead of "no output written"."""
    import importlib

    from chakra_convert_fast.converter import cli

    pair_module = importlib.import_module("chakra_convert_fast.converter.ranks.pair")

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(pair_module, "convert_file", interrupted)
    host, device = pair
    merged, out = tmp_path / "merged.json", tmp_path / "out.et"
    status = cli.main(["convert", "--host", str(host), "--device", str(device), str(out), "--keep-merged", str(merged)])
    assert status == 130
    assert capsys.readouterr().err.splitlines() == [
        f"{ERROR_PREFIX}interrupted after {merged} was written; nothing else written"
    ]
    assert merged.exists() and not out.exists()


def test_a_signal_handled_inside_a_finalizer_still_ends_the_command() -> None:
    """Python drops an exception raised in ``__del__`` ("Exception ignored in ..."): a SIGTERM whose
    handler ran in a Connection's finalizer let a conversion run to its end (exit 0). The handler
    delivers it again outside the finalizer."""
    from chakra_convert_fast.converter.cli.signals import Terminated, install_signal_handlers, restore

    class Finalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))  # the handler runs here, inside the finalizer

    previous = install_signal_handlers()
    try:
        with pytest.raises(Terminated):
            Finalized()  # dropped at once: __del__ runs
            time.sleep(2)
    finally:
        restore(previous)


def test_main_in_this_process_leaves_no_signal_blocked(tmp_path: Path) -> None:
    """``main()`` holds the termination signals from its last commit to its end; afterwards the
    calling process (and what it starts) gets them again, also after a later library commit."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    merged = ROOT / "fixtures" / "data" / "gpt2_ddp2_rank0_merged.json.gz"
    assert cli.main([str(merged), str(tmp_path / "a.et"), "-q"]) == 0
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == blocked
    api.convert(merged, tmp_path / "b.et")  # a library commit after main(): nothing held
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == blocked


# -- round three (issue 29): two signals at once -------------------------------------------------------
def _sleeping_simulator(tmp_path: Path) -> Path:
    home = tmp_path / "fake-astra-sim"
    (home / "bin").mkdir(parents=True)
    for name in ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware"):
        script = home / "bin" / name
        script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
        script.chmod(0o755)
    return home


def _two_signals_case(command: str, tmp_path: Path, big_trace: Path) -> tuple[list[str | Path], Callable[..., bool]]:
    out = tmp_path / "out"
    out.mkdir()
    if command == "convert":
        return ["convert", big_trace, out / "o.et"], writing_into(out)
    if command == "text":
        return [
            "text",
            ROOT / "tests" / "data" / "text" / "data.txt",
            out / "w",
            "--npus",
            "4",
            "--passes",
            "1000000",
        ], writing_into(out)
    write_job(tmp_path / "job", 2)
    return [
        "simulate",
        tmp_path / "job",
        "--astra-sim-bin",
        _sleeping_simulator(tmp_path),
        "--json",
        out / "r.json",
    ], has_worker


@pytest.mark.parametrize("command", ["convert", "text", "simulate"])
@pytest.mark.parametrize(
    ("signals", "status"),
    [
        ((signal.SIGTERM, signal.SIGINT), signal.SIGTERM),
        ((signal.SIGINT, signal.SIGHUP, signal.SIGINT), signal.SIGHUP),
        ((signal.SIGINT, signal.SIGINT), signal.SIGINT),
    ],
    ids=["TERM+INT", "INT+HUP+INT", "INT+INT"],
)
def test_signals_together_end_with_one_line_and_no_traceback(
    command: str, signals: tuple[int, ...], status: int, big_trace: Path, tmp_path: Path
) -> None:
    """Issue 29: SIGTERM and SIGINT at once printed ``OSError: Signal 15 ignored due to race
    condition`` (a traceback) and exited 130. Signals that arrive together (the process stopped)
    have no order the kernel keeps: the strongest (SIGTERM, then SIGHUP, then SIGINT) ends the
    command, with its one line; the others are dropped."""
    args, phase = _two_signals_case(command, tmp_path, big_trace)
    process, group = start(args, phase)
    for signum in signals[:-1]:
        os.kill(process.pid, signum)
    stderr = signal_and_wait(process, group, signals[-1])
    assert "Traceback" not in stderr and "race condition" not in stderr, stderr
    assert_stopped_cleanly(process, stderr, status)
    assert_no_live_child(group)
    assert listing(tmp_path / "out") == []


def _files_written(directory: Path, count: int) -> Callable[[psutil.Process], bool]:
    """At least ``count`` files written in ``directory`` or a staging directory in it."""

    def written(_process: psutil.Process) -> bool:
        found = 0
        for folder in [directory, *directory.glob(".chakra-staging-*")]:
            with suppress(OSError):
                found += len(os.listdir(folder))
        return found >= count

    return written


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_generate_stopped_half_way_writes_nothing_and_says_so_in_a_short_line(signum: int, tmp_path: Path) -> None:
    """Issue 29: SIGTERM left 4k-28k files and a "one line" error of 0.2-1.9 MB naming every one of
    them. The files are written through ``io.OutputSet``: all or nothing."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "ALL_REDUCE.0.et").write_bytes(b"old")
    process, group = start(["generate", out, "--num-npus", "2000"], _files_written(out, 100))
    stderr = signal_and_wait(process, group, signum)
    assert_stopped_cleanly(process, stderr, signum)
    assert listing(out) == ["ALL_REDUCE.0.et"] and (out / "ALL_REDUCE.0.et").read_bytes() == b"old"


def test_an_interruption_names_only_outputs_still_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep's scaled job, committed into a temporary folder that is gone by the time the signal
    is reported, is not named; outputs still in place are (a path, a ``PREFIX.*`` set)."""
    cli_main = importlib.import_module("chakra_convert_fast.converter.cli.main")  # the package re-exports main()
    kept = tmp_path / "result.json"
    kept.write_text("{}")
    (tmp_path / "job.0.et").write_bytes(b"")
    gone = tmp_path / "removed" / "job"
    monkeypatch.setattr(cli_main, "committed_outputs", lambda: [f"{gone}.*", str(kept), f"{tmp_path}/job.*"])
    assert cli_main._interrupted(None, "interrupted", 130) == 130
    err = capsys.readouterr().err
    assert str(gone) not in err and str(kept) in err and f"{tmp_path}/job.*" in err
    monkeypatch.setattr(cli_main, "committed_outputs", lambda: [f"{gone}.*"])
    assert cli_main._interrupted(None, "interrupted", 130) == 130
    assert capsys.readouterr().err.strip().endswith("interrupted; no output written")
