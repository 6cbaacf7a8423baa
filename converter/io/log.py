"""``open_log``: the log file, appended to, never truncated."""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import IO

from ..errors import OutputError
from .output import Sink, check_directory, stat_or_none, user_may_write
from .read import CLOEXEC, NONBLOCK, file_kind, reason_of


def open_log(path: str) -> IO[str]:
    """``path`` opened for appending UTF-8 lines (created if missing, never truncated): a regular
    file the user may write, a character device, or a FIFO with a reader. Write problems are
    ``OutputError``\\ s."""
    found = stat_or_none(path, path)
    if found is not None:
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise OutputError(path, "the log file is a directory")
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OutputError(path, f"the log file is a {file_kind(mode)}; refusing to write to it")
        if stat.S_ISREG(mode) and not user_may_write(path, mode):
            raise OutputError(path, "the log file is read-only")
    else:
        check_directory(path, os.path.dirname(os.path.abspath(path)), "log directory")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | CLOEXEC | NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(path, "the log file is a FIFO that no process is reading") from None
        raise OutputError(path, f"cannot open the log file: {reason_of(exc)}") from None
    os.set_blocking(fd, True)
    return io.TextIOWrapper(
        io.BufferedWriter(Sink(fd, path, what="the log file")),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
