"""The process's lifecycle: which outputs are committed, and what a termination signal may do.

One owner, one state object (``_Lifecycle``). Outputs are committed (renamed into place) inside
``commit_step``, each recorded with ``record_commit``: once an output is in place an interrupt can
no longer undo it, so the command line reports it as written (``committed_outputs``).
``hold_signals_after_commit(n)`` (the command line) keeps SIGINT/SIGTERM/SIGHUP blocked from the
n-th commit on, so the last commit and the report of success are one step; the command line's
signal handler asks ``signal_deferred`` first. ``forget_committed`` starts a new command.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

#: The stop signals: those that end a command (the command line's handlers), that a commit step
#: blocks, and that a worker process leaves to its parent or unwinds on. Defined here only.
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@dataclass
class _Lifecycle:
    """This process's commit protocol state.

    A process-directed signal can reach any thread (torch's, a queue's feeder), and then the
    handler still runs in the main thread, whatever the main thread's mask: so the handler asks
    ``signal_deferred``. ``committing``: a commit step is under way (the signal is kept in
    ``pending`` and acted on when it ends); ``held``: the command line's last commit is done (the
    signal is dropped: the command has succeeded)."""

    committed: list[str] = field(default_factory=list)  # outputs put in place, in order
    hold_after: int = 0  # hold signals from this commit on (0: never)
    hold_pid: int = 0  # the process that asked (not the workers it forks)
    committing: bool = False
    held: bool = False
    pending: int = 0  # a signal that came during a commit step


_STATE = _Lifecycle()


def committed_outputs() -> list[str]:
    """The outputs this process has put in place so far (see ``forget_committed``)."""
    return list(_STATE.committed)


def forget_committed() -> None:
    """Start a new command: no output committed yet, no signal held."""
    _STATE.committed.clear()
    _STATE.hold_after = _STATE.hold_pid = 0
    _STATE.committing = _STATE.held = False
    _STATE.pending = 0


def hold_signals_after_commit(after: int) -> None:
    """The command line, whose last step is committing its ``after``-th output: from that
    output's rename on, SIGINT/SIGTERM/SIGHUP stay blocked in this process (not in workers it
    forks) until ``release_held_signals``, so the rename and the report of success are one step.
    0: never held (a library caller keeps its signals)."""
    _STATE.hold_after, _STATE.hold_pid = after, os.getpid()
    if not after:
        _STATE.held = False


def release_held_signals() -> None:
    """Unblock the termination signals held since the last commit."""
    _STATE.held = False
    _STATE.pending = 0
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def signal_deferred(signum: int) -> bool:
    """For a signal handler: True when ``signum`` must not act now (a commit step is under way:
    it acts when the step ends; or the command line's last commit is done: it is dropped)."""
    if _STATE.held:
        return True
    if _STATE.committing:
        _STATE.pending = _STATE.pending or signum
        return True
    return False


def record_commit(shown: str) -> None:
    """An output (or a set of them, shown as one name) is in place; call inside ``commit_step``."""
    _STATE.committed.append(shown)


@contextmanager
def commit_step() -> Iterator[None]:
    """A rename (or several) with termination signals blocked, so it is never half done nor half
    reported; they stay blocked afterwards when it was the command line's last commit. The mask
    covers the main thread; ``signal_deferred`` covers a signal that another thread received."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        _run_pending_handlers()  # a signal that came just before the block is handled now, before the rename
        _STATE.committing = True
        _STATE.pending = 0
        yield
    finally:
        _STATE.committing = False
        state = _STATE
        if state.hold_after and state.hold_pid == os.getpid() and len(state.committed) >= state.hold_after:
            state.held = True
            state.pending = 0
        else:
            pending = state.pending
            state.pending = 0
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            if pending:  # it came to another thread during the step: it acts now
                os.kill(os.getpid(), pending)


def _run_pending_handlers() -> None:
    """Nothing: entering a Python function runs the handlers of signals already received."""
