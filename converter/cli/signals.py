"""How signals end a command: SIGINT, SIGTERM and SIGHUP unwind it (outputs removed, workers
stopped) like an exception; SIGXFSZ turns a file-size limit into a write error.

Two signals in a row end the command with the first one's status: once the first is acted on, the
others are dropped by a handler that does nothing (not ``SIG_IGN``: a signal Python had already
received but not yet handled then printed "OSError: Signal 15 ignored due to race condition", a
traceback). Signals that reach the process together (sent while it was stopped or not scheduled)
come without an order: the kernel delivers the lowest number first. The handler sees every one of
them (Python's wake-up descriptor has a byte per signal received) and the strongest wins: SIGTERM,
then SIGHUP, then SIGINT, as a supervisor's stop outranks a Ctrl-C.

Before ``main`` runs, while Python imports the package, ``converter/_early.py`` has already put a
handler in place that ends the command with the same one line (nothing is open yet); the only
window left with Python's default handling is the interpreter's own start (see docs/reliability-matrix.md).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import suppress
from types import FrameType
from typing import Any

from .._early import early_handler
from ..lifecycle import STOP_SIGNALS, signal_deferred


class Terminated(BaseException):
    """SIGTERM or SIGHUP: unwinds like KeyboardInterrupt, so partial outputs are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_AGAIN_SECONDS = 0.01
#: Of stop signals received together, the one that ends the command.
_STRENGTH: dict[int, int] = {signal.SIGINT: 1, signal.SIGHUP: 2, signal.SIGTERM: 3}
#: The wake-up pipe's descriptors (read, write) and the wake-up descriptor it replaced; -1: none.
_WAKEUP = {"read": -1, "write": -1, "previous": -1}


def _on_signal(signum: int, frame: FrameType | None) -> None:
    received = _received_since_last_look()
    if signal_deferred(signum):  # during a commit (acted on after it), or after the last one (dropped)
        return
    if frame is not None and frame.f_code.co_name == "__del__":
        # Python drops an exception raised in a finalizer (it would only print "Exception ignored"
        # and go on): the signal is delivered again in a moment, outside the finalizer
        timer = threading.Timer(_AGAIN_SECONDS, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    ignore_stop_signals()  # a second signal must not cut the clean-up of the first short
    signum = max({signum, *received}, key=lambda s: _STRENGTH.get(s, 0))
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _dropped(_signum: int, _frame: FrameType | None) -> None:
    """A stop signal after the first: the command is already ending by the first one."""


def ignore_stop_signals() -> None:
    """Every later stop signal is dropped (by ``_dropped``, so that one Python received but has not
    handled yet is dropped as well, silently)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _dropped)


def _received_since_last_look() -> set[int]:
    """The stop signals received (by the C-level handler) since the last call: the bytes waiting
    in the wake-up pipe."""
    seen: set[int] = set()
    if _WAKEUP["read"] < 0:
        return seen
    while True:
        try:
            data = os.read(_WAKEUP["read"], 512)
        except OSError:  # nothing waiting (EAGAIN)
            return seen
        if not data:
            return seen
        seen.update(byte for byte in data if byte in _STRENGTH)


def _listen() -> None:
    """Python's wake-up descriptor onto a pipe of ours (main thread only; elsewhere signals are not
    this thread's to handle and ``signal.signal`` refuses anyway)."""
    if _WAKEUP["read"] >= 0 or threading.current_thread() is not threading.main_thread():
        return
    try:
        read, write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # out of descriptors: signals received together then end by Python's order
        return
    _WAKEUP.update(read=read, write=write, previous=signal.set_wakeup_fd(write, warn_on_full_buffer=False))


def _stop_listening() -> None:
    if _WAKEUP["read"] < 0:
        return
    with suppress(ValueError):
        signal.set_wakeup_fd(_WAKEUP["previous"])
    for fd in (_WAKEUP["read"], _WAKEUP["write"]):
        with suppress(OSError):
            os.close(fd)
    _WAKEUP.update(read=-1, write=-1, previous=-1)


def install_signal_handlers() -> dict[int, Any]:
    """SIGINT, SIGTERM and SIGHUP unwind the command (outputs removed, workers stopped) and end it
    with one line; a file-size limit (SIGXFSZ) makes the write fail with EFBIG, reported as an
    error, instead of killing the process halfway through a file. Returns the handlers replaced."""
    signums = [*STOP_SIGNALS, *([signal.SIGXFSZ] if hasattr(signal, "SIGXFSZ") else [])]
    previous: dict[int, Any] = {signum: signal.getsignal(signum) for signum in signums}
    for signum in signums:
        signal.signal(signum, _on_signal if signum in STOP_SIGNALS else signal.SIG_IGN)
    _listen()
    return previous


def restore(previous: dict[int, Any]) -> None:
    """Put back the handlers ``install_signal_handlers`` replaced; the start-up handler of the
    command line (which says "no output written") is not put back: the command is over, so a
    signal now is ignored while the process exits."""
    for signum, handler in previous.items():
        signal.signal(signum, _dropped if handler is early_handler else handler)
    _stop_listening()
