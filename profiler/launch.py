"""``chakra-profile --nproc N``: torchrun and its ranks, ended with the command; ``--nproc 1``: the
one rank in this process, ended the same way (``run_in_process``).

torchrun starts each rank in a session of its own, so a signal to the command's process group
does not reach them, and a ``chakra-profile`` ended by SIGTERM used to leave torchrun and every
rank running, writing the capture after the command had ended. Here the command becomes the
"subreaper" of what it starts (``PR_SET_CHILD_SUBREAPER``: a rank whose torchrun died is
re-parented to it, not to init), torchrun dies with it even on SIGKILL (``PR_SET_PDEATHSIG``),
and SIGTERM, SIGINT or SIGHUP stops torchrun first (so that it starts nothing more), then kills
every process below the command, waits for them, removes what the run had written into the
output folder, and ends with one line and 128 + the signal's number.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from types import FrameType

from chakra_convert_fast.converter.children import die_with_parent

_PR_SET_CHILD_SUBREAPER = 36
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class _Stopped(BaseException):
    """A stop signal: a BaseException, so that no ``except Exception`` of the run (torch's, ours)
    swallows it where it is raised."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def run_ranks(command: Sequence[str], outdir: str) -> int:
    """Run torchrun's ``command``; its exit status, or 128 + N when signal N stopped the command."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    process: subprocess.Popen[bytes] | None = None

    def before_cleanup() -> None:
        if process is not None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGSTOP)  # torchrun starts nothing more

    def run() -> int:
        nonlocal process
        process = subprocess.Popen(list(command), start_new_session=True, preexec_fn=die_with_parent)
        return process.wait()

    return _stoppable(run, outdir, before_cleanup)


def run_in_process(run: Callable[[], int], outdir: str) -> int:
    """One rank, run in this process (``--nproc 1``), ended by a stop signal as ``run_ranks`` ends:
    what it started killed, what it wrote into ``outdir`` removed, one line, 128 + N. It used to
    end on a ``KeyboardInterrupt`` traceback and leave the half-written host trace."""
    return _stoppable(run, outdir, lambda: None)


def _stoppable(run: Callable[[], int], outdir: str, before_cleanup: Callable[[], None]) -> int:
    existed = os.path.isdir(outdir)
    before = _listing(outdir)
    started = time.time()

    def stop(number: int, frame: FrameType | None) -> None:
        for s in _SIGNALS:  # a second signal while we clean up is dropped
            signal.signal(s, signal.SIG_IGN)
        raise _Stopped(number)

    previous = {s: signal.signal(s, stop) for s in _SIGNALS}
    try:
        return run()
    except _Stopped as stopped:
        before_cleanup()
        _end_descendants()
        _remove_new(outdir, before, started, existed)
        name = signal.Signals(stopped.number).name
        print(f"chakra-profile: error: terminated by {name}; no capture written", file=sys.stderr)
        return 128 + stopped.number
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(pid):
            found.append(int(entry.name))
    return found


def _end_descendants() -> None:
    """SIGKILL every process below this one, until none is left (as subreaper, orphans come back
    to us), and reap them."""
    me = os.getpid()
    for _ in range(200):
        below: list[int] = []
        frontier = _children(me)
        while frontier:
            pid = frontier.pop()
            below.append(pid)
            frontier.extend(_children(pid))
        for pid in below:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
        time.sleep(0.05)


def _listing(outdir: str) -> set[str]:
    try:
        return set(os.listdir(outdir))
    except OSError:
        return set()


def _remove_new(outdir: str, before: set[str], started: float, existed: bool) -> None:
    """Remove the files the run wrote into ``outdir`` (there now, not before, made since it started)."""
    for name in _listing(outdir) - before:
        path = Path(outdir) / name
        with suppress(OSError):
            if path.is_file() and not path.is_symlink() and path.stat().st_mtime >= started - 1:
                path.unlink()
    with suppress(OSError):
        if not existed and not os.listdir(outdir):
            os.rmdir(outdir)  # a folder the run made, left empty
