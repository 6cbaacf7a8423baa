"""Programs this package runs (graphviz's ``dot``): they end with us, and so do theirs.

``run_child`` starts the program in a process group of its own and, however the call ends (its
exit, an error, a signal that unwinds the command), kills that whole group: a program that
started programs of its own leaves none running. The child also asks the kernel to kill it when
this process dies, even by SIGKILL (``PR_SET_PDEATHSIG``, Linux).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
from collections.abc import Sequence
from contextlib import suppress

_PR_SET_PDEATHSIG = 1


def run_child(command: Sequence[str], stdin: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``command`` with ``stdin`` (a descriptor; else nothing) and its output captured; raises
    ``OSError`` if it cannot start. Whatever happens, nothing it started is left running."""
    with subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL if stdin is None else stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=die_with_parent,
    ) as process:
        try:
            stdout, stderr = process.communicate()
        finally:
            end_group(process.pid)  # its own children too, on any way out
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def end_group(leader: int) -> None:
    """SIGKILL to every process of the group ``leader`` started (none left: nothing to do)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


def die_with_parent() -> None:
    """In the child, before it runs the program: SIGKILL when its parent (this process) dies."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
