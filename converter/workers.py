"""Worker processes: one function call each, quiet under signals, gone with their parent.

A worker (the reader of a large file's second half, one rank of ``convert-all``) returns its
function's result through a pipe. It leaves Ctrl-C to its parent, which stops it; SIGTERM and
SIGHUP unwind it as ``SystemExit``, so its ``finally`` blocks remove its temporary files and no
traceback is printed; and a thread watches the parent: when the parent dies, even by SIGKILL,
the worker terminates itself within a second. Signals are held while a worker starts, so none
reaches it before its own handlers are in place.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any, Generic, TypeVar, cast

from .errors import ConverterError
from .lifecycle import STOP_SIGNALS

Task = TypeVar("Task")

#: The signals a worker handles itself, held while one starts.
_WATCH_SECONDS = 0.2  # how often a worker checks that its parent lives
_GRACE_SECONDS = 0.5  # after asking itself to stop, how long a worker waits before it just exits
_PR_SET_PDEATHSIG = 1  # prctl(2): a signal this process gets when its parent dies
_STOP_SECONDS = 5.0  # how long ``Worker.stop`` waits for SIGTERM before it sends SIGKILL


def default_jobs() -> int:
    """The processes a command may use by default: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def fork_available() -> bool:
    """Whether workers can share open files with their parent (the ``fork`` start method)."""
    return "fork" in multiprocessing.get_all_start_methods()


class Worker:
    """``function(*args)`` in a child process; ``result()`` is its return value, or None if the
    call raised or the process died. ``stop()`` must follow in every case."""

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("fork" if fork_available() else None)
        try:
            self.receiver, sender = context.Pipe(duplex=False)
            with signals_held():
                self._process = context.Process(
                    target=_run, args=(os.getpid(), self.receiver, sender, function, args), daemon=True
                )
                self._process.start()
        except OSError as exc:  # no more processes or memory
            raise ConverterError(f"cannot start a worker process: {exc.strerror or exc}") from None
        sender.close()

    def result(self) -> Any:
        try:
            outcome = self.receiver.recv()
        except (EOFError, OSError):
            outcome = None
        self._process.join()
        return outcome

    def stop(self) -> None:
        """Stop the process if it still runs (SIGTERM, then SIGKILL), and wait for it."""
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(_STOP_SECONDS)
            if self._process.is_alive():
                self._process.kill()
        self._process.join()
        self.receiver.close()


class _Running(Generic[Task]):
    def __init__(self, task: Task, worker: Worker) -> None:
        self.task = task
        self.worker = worker


def run_all(
    function: Callable[[Task], Any], tasks: Sequence[Task], jobs: int
) -> Generator[tuple[Task, Any], None, None]:
    """``function(task)`` for every task, each in its own worker, at most ``jobs`` at once; yields
    ``(task, result)`` as they finish (result None: the worker died). Closing the iterator early
    (an error, a signal) stops every running worker; use it in ``contextlib.closing``."""
    waiting = list(reversed(tasks))
    running: dict[Connection, _Running[Task]] = {}
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                task = waiting.pop()
                worker = Worker(function, task)
                running[worker.receiver] = _Running(task, worker)
            for ready in wait(list(running)):
                done = running.pop(cast(Connection, ready))
                outcome = done.worker.result()
                done.worker.stop()
                yield done.task, outcome
    finally:
        for left in running.values():
            left.worker.stop()


@contextmanager
def signals_held() -> Iterator[None]:
    """Termination signals wait (in this thread) until the block ends; a child forked inside
    starts with them held too, and releases them once its own handlers are set. The child also
    starts with stderr on /dev/null: what Python prints on its own in a worker (a failure of
    multiprocessing's start-up under a memory limit) never lands between the command's messages;
    the parent reports a worker that died."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    saved = -1
    try:
        with suppress(OSError):
            saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        yield
    finally:
        if saved >= 0:
            with suppress(OSError):
                os.dup2(saved, 2)
            os.close(saved)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _run(
    parent: int, receiver: Connection, sender: Connection, function: Callable[..., Any], args: tuple[Any, ...]
) -> None:
    """The worker's body: its signal handling and parent watch, the call, the result sent back."""
    try:
        become_worker(parent)
    except Exception:  # no thread or memory left: the parent sees this worker die, and says so
        os._exit(1)
    receiver.close()  # the parent's end: holding it, a send to a dead parent would wait forever
    try:
        outcome = function(*args)
    except Exception:  # the parent is told the call failed and reports it its own way
        outcome = None
    with suppress(OSError):  # the parent is gone: nobody to tell
        sender.send(outcome)
    sender.close()


def become_worker(parent: int) -> None:
    """In a process just forked (inside ``signals_held``) from ``parent``: leave Ctrl-C to the
    parent, unwind on SIGTERM/SIGHUP, release the held signals, and exit when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops us
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _exit_on_signal)
    with suppress(ValueError):  # the parent's wake-up pipe (cli/signals.py) is not ours to write into
        signal.set_wakeup_fd(-1)
    _signal_on_parent_death()
    _quiet_stderr()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if not _exists(parent):  # gone before the line above took effect
        raise SystemExit(128 + signal.SIGTERM)
    threading.Thread(target=_watch_parent, args=(parent, os.getppid()), name="parent-watch", daemon=True).start()


def _quiet_stderr() -> None:
    """A worker says nothing itself: its outcome (or its death) is reported by the parent, in the
    command's one line. What Python would print on its own (a failure under a memory limit in a
    queue's thread, at exit) goes to /dev/null, not between the command's messages."""
    with suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)


def _signal_on_parent_death() -> None:
    """Linux: SIGTERM as soon as the parent dies (the watch thread is the portable fallback, and
    ends the worker if SIGTERM does not)."""
    with suppress(OSError, AttributeError, TypeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _watch_parent(parent: int, first_ppid: int) -> None:
    """Wait until the parent is gone (this process re-parented, or ``parent`` no longer exists);
    then unwind the worker with SIGTERM and, if that does not end it, exit."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # signals go to the main thread, which they must unwind
    while os.getppid() == first_ppid and _exists(parent):
        time.sleep(_WATCH_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(_GRACE_SECONDS)
    os._exit(128 + signal.SIGTERM)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
