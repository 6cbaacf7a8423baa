"""Files in and out: the one opener of trace files and the one place outputs are written.

* ``open_trace`` opens a trace for reading (``TraceFile``); its content is decompressed when the
  file starts with gzip's magic bytes, whatever its name. Only regular files are read (a pipe
  cannot be read twice, and sniffing gzip would eat its first bytes). Every problem opening or
  reading it, gzip's and the operating system's alike, is a ``TraceFormatError`` naming the file.
* ``check_output`` says, before any work, whether an output can be written at a path, and how
  (``OutputTarget``): a regular file (or a path that does not exist yet) is replaced atomically;
  a character device (``/dev/null``, a terminal) or a FIFO is written in place, never replaced;
  a directory, a block device, a socket, a read-only file or an input is refused.
* ``atomic_output`` / ``atomic_text_output`` write an output: a temporary file in the target's
  directory (unnamed where Linux's O_TMPFILE allows, so even SIGKILL leaves nothing), renamed
  over the target only when the block completes, so a failed or interrupted run never leaves a
  partial output nor damages an existing file.
* ``SpillFile``: temporary data of a command, in an unnamed file the kernel frees on any exit.
* ``open_log``: a log file, appended to, never truncated.
* Side files named by an option: ``check_side_input(path, option)`` (the main input's checks:
  missing, directory, FIFO, device), ``read_side_input(path, option, limit)`` (a small file read
  whole, at most ``SIDE_INPUT_LIMIT`` bytes), ``check_side_output(path, option, *inputs,
  regular=False)`` (``check_output`` whose messages name the option; ``regular`` refuses devices
  and FIFOs, for a file read back later).
* Several outputs replaced together, all or nothing: ``OutputSet`` (each written where no user
  sees it, then all renamed in one step signals cannot cut, old files put back if a rename fails):
  the one implementation for every command that writes many files (convert-all, scale, text).
* What is committed: an output is re-checked at its rename (a FIFO or device that appeared is
  refused, never replaced) and keeps the replaced file's mode (and owner, as root); the commit
  itself (``committed_outputs()``, ``hold_signals_after_commit(n)``: the last commit and the
  report of success are one step) is ``converter/lifecycle.py``'s, re-exported here.

Every ``OSError`` of writing (no such directory, permission, read-only file system, disk full,
file too large) is an ``OutputError`` naming the file, raised where the bytes are written.

The package's modules: ``read`` (the trace opener), ``output`` (output and side-input checks,
atomic writes, the commit protocol), ``outputset`` (``OutputSet``), ``spill`` (``SpillFile``),
``log`` (the log file). The names below are re-exported for importers that name the package.
The modules share their file primitives by public names (``read.BUFFER_SIZE``, ``read.file_kind``,
``read.reason_of``, ``output.Sink``, ``output.stat_or_none``, ...), used within this package only.
"""

from __future__ import annotations

from ..lifecycle import (
    committed_outputs,
    forget_committed,
    hold_signals_after_commit,
    release_held_signals,
    signal_deferred,
)
from .log import open_log
from .output import (
    SIDE_INPUT_LIMIT,
    OutputTarget,
    atomic_output,
    atomic_text_output,
    check_output,
    check_side_input,
    check_side_output,
    output_directory,
    read_side_input,
)
from .outputset import OutputSet
from .read import GZIP_MAGIC, TraceFile, check_input, is_gzip, open_trace, same_file
from .spill import SpillFile

__all__ = [
    "GZIP_MAGIC",
    "SIDE_INPUT_LIMIT",
    "OutputSet",
    "OutputTarget",
    "SpillFile",
    "TraceFile",
    "atomic_output",
    "atomic_text_output",
    "check_input",
    "check_output",
    "check_side_input",
    "check_side_output",
    "committed_outputs",
    "forget_committed",
    "hold_signals_after_commit",
    "is_gzip",
    "open_log",
    "open_trace",
    "output_directory",
    "read_side_input",
    "release_held_signals",
    "same_file",
    "signal_deferred",
]
