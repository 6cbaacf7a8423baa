"""How signals end a command: SIGINT, SIGTERM and SIGHUP unwind it (outputs removed, workers
stopped) like an exception; SIGXFSZ turns a file-size limit into a write error.

Before ``main`` runs, while Python imports the package, ``converter/_early.py`` has already put a
handler in place that ends the command with the same one line (nothing is open yet); the only
window left with Python's default handling is the interpreter's own start (see docs/reliability-matrix.md).
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

from .. import api
from .._early import early_handler


class Terminated(BaseException):
    """SIGTERM or SIGHUP: unwinds like KeyboardInterrupt, so partial outputs are removed."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_AGAIN_SECONDS = 0.01


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if api.signal_deferred(signum):  # during a commit (acted on after it), or after the last one (dropped)
        return
    if frame is not None and frame.f_code.co_name == "__del__":
        # Python drops an exception raised in a finalizer (it would only print "Exception ignored"
        # and go on): the signal is delivered again in a moment, outside the finalizer
        timer = threading.Timer(_AGAIN_SECONDS, os.kill, (os.getpid(), signum))
        timer.daemon = True
        timer.start()
        return
    ignore_stop_signals()  # a second signal must not cut the clean-up of the first short
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def ignore_stop_signals() -> None:
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def install_signal_handlers() -> dict[int, Any]:
    """SIGINT, SIGTERM and SIGHUP unwind the command (outputs removed, workers stopped) and end it
    with one line; a file-size limit (SIGXFSZ) makes the write fail with EFBIG, reported as an
    error, instead of killing the process halfway through a file. Returns the handlers replaced."""
    signums = [*STOP_SIGNALS, *([signal.SIGXFSZ] if hasattr(signal, "SIGXFSZ") else [])]
    previous: dict[int, Any] = {signum: signal.getsignal(signum) for signum in signums}
    for signum in signums:
        signal.signal(signum, _on_signal if signum in STOP_SIGNALS else signal.SIG_IGN)
    return previous


def restore(previous: dict[int, Any]) -> None:
    """Put back the handlers ``install_signal_handlers`` replaced; the start-up handler of the
    command line (which says "no output written") is not put back: the command is over, so a
    signal now is ignored while the process exits."""
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_IGN if handler is early_handler else handler)
