"""The command line's first act, before the package's heavy imports: SIGINT, SIGTERM and SIGHUP
end the process with the command's one line (nothing is open yet, nothing to clean up), instead
of Python's ``KeyboardInterrupt`` traceback in the middle of an import.

The stop signals are unblocked too: a blocked mask is inherited from the parent, and with it
a Ctrl-C would wait, pending, until the command ended on its own.

Done only when this process is the command line (``python -m chakra_convert_fast.converter`` or
the ``chakra-convert-fast`` script): importing the package as a library changes no handler.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
from types import FrameType

_MESSAGES: dict[int, bytes] = {
    signal.SIGINT: b"interrupted; no output written",
    signal.SIGTERM: b"terminated by SIGTERM; no output written",
    signal.SIGHUP: b"terminated by SIGHUP; no output written",
}


def early_handler(signum: int, _frame: FrameType | None) -> None:
    with contextlib.suppress(OSError):
        os.write(2, b"chakra-convert-fast: error: " + _MESSAGES.get(signum, b"terminated") + b"\n")
    os._exit(128 + signum)


def _is_command_line() -> bool:
    argv = getattr(sys, "orig_argv", None) or sys.argv
    for flag, value in itertools.pairwise(argv):
        if flag == "-m":
            return value in ("chakra_convert_fast.converter", "chakra_convert_fast.converter.__main__")
    return os.path.basename(sys.argv[0] if sys.argv else "") == "chakra-convert-fast"


def standard_descriptors() -> None:
    """Descriptors 0, 1 and 2 open: one the caller closed (``2>&-``) is opened on /dev/null, so no
    file this command opens can become its stderr (and receive its messages)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                opened = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if opened != fd:  # a lower one was free after all
                os.close(opened)


def install() -> None:
    if not _is_command_line():
        return
    standard_descriptors()
    caught = [signum for signum in _MESSAGES if signal.getsignal(signum) is not signal.SIG_IGN]  # nohup's kept
    for signum in caught:
        signal.signal(signum, early_handler)
    # a mask is inherited: a parent that had them blocked (a test runner, a supervisor's thread)
    # would leave them pending until the command's last step, and a Ctrl-C would be lost
    signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)


install()
