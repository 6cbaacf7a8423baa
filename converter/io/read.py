"""Reading traces: ``open_trace`` (``TraceFile``), the one opener of trace files, gzip sniffed from
the first bytes whatever the name; ``check_input``; ``same_file``. Every problem opening or
reading a trace is a ``TraceFormatError`` naming the file."""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from typing import IO, cast

from ..errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
BUFFER_SIZE = 1 << 20
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: Errors that mean "this path names no file" rather than "this file cannot be used".
MISSING_ERRNOS = (errno.ENOENT, errno.ENOTDIR)


def is_gzip(path: str) -> bool:
    """True if the file starts with gzip's magic bytes (False if it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


class TraceFile:
    """An open trace: ``read`` gives its content, decompressed if the file starts with gzip's magic
    bytes; ``position`` and ``size`` count the bytes of the file itself (for progress).

    With ``byte_range`` (start, end), only those bytes of the content are read, as if they were
    the whole file (``size`` is then the range's length): one object among several.
    With ``cut_ok``, gzip data cut before its end (a copy or a save that stopped) ends where it
    was cut, as a plain file would (``cut`` tells whether it was): what was compressed before the
    cut is read, a decompressor's buffer at a time (``repair`` salvages it).
    """

    def __init__(
        self, path: str | os.PathLike[str], byte_range: tuple[int, int] | None = None, *, cut_ok: bool = False
    ) -> None:
        self.path = os.fspath(path)
        fd = open_regular_file(self.path)
        self._raw = open(fd, "rb")  # noqa: SIM115 - closed by close()
        self.size = os.fstat(fd).st_size
        self.gzipped = self._read_raw(2) == GZIP_MAGIC
        self._raw.seek(0)
        self._content: IO[bytes] = (
            cast(IO[bytes], gzip.GzipFile(fileobj=self._raw, mode="rb")) if self.gzipped else self._raw
        )
        self._left = -1  # bytes left in the range; -1: no range
        self._cut_ok = cut_ok and self.gzipped
        self.cut = False  # gzip data that ended before its end-of-stream marker (with cut_ok)
        if byte_range is not None:
            start, end = byte_range
            self.seek(start)
            self._left = self.size = end - start

    def __enter__(self) -> TraceFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, size: int = -1) -> bytes:
        if self._left >= 0:
            size = self._left if size < 0 else min(size, self._left)
        try:
            if self._cut_ok:  # one decompressor call at a time: a cut loses nothing read before it
                data = cast(gzip.GzipFile, self._content).read1(size) if size else b""
            else:
                data = self._content.read(size)
        except EOFError as exc:
            if not self._cut_ok:
                raise TraceFormatError(self.path, self._read_problem(exc)) from None
            self.cut, data = True, b""
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise TraceFormatError(self.path, self._read_problem(exc)) from None
        if self._left >= 0:
            self._left -= len(data)
        return data

    def seek(self, offset: int) -> None:
        """Go to ``offset`` in the content (a second process's start in a plain file)."""
        try:
            self._content.seek(offset)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(self.path, self._read_problem(exc)) from None

    @property
    def position(self) -> int:
        """Bytes of the file read so far."""
        return self._raw.tell()

    def close(self) -> None:
        if self._content is not self._raw:
            self._content.close()
        self._raw.close()

    def _read_raw(self, size: int) -> bytes:
        try:
            return self._raw.read(size)
        except OSError as exc:
            self._raw.close()
            raise TraceFormatError(self.path, self._read_problem(exc)) from None

    def _read_problem(self, exc: BaseException) -> str:
        if getattr(self, "gzipped", False):
            return f"cannot read (corrupt or truncated gzip data?): {exc}"
        return f"cannot read: {reason_of(exc)}"


def open_trace(
    path: str | os.PathLike[str], byte_range: tuple[int, int] | None = None, *, cut_ok: bool = False
) -> TraceFile:
    """Open a trace for reading (use it in a ``with``); see ``TraceFile``."""
    return TraceFile(path, byte_range, cut_ok=cut_ok)


def same_file(one: str, other: str) -> bool:
    """Whether two paths name the same file (or directory), existing or not."""
    if os.path.abspath(one) == os.path.abspath(other):
        return True
    try:
        return os.path.samefile(one, other)
    except (OSError, ValueError):
        return False


def check_input(path: str | os.PathLike[str]) -> None:
    """Raise the ``TraceFormatError`` that opening ``path`` would, before any work starts."""
    TraceFile(path).close()


def open_regular_file(path: str) -> int:
    if not path:
        raise TraceFormatError("", "the input path is empty")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
        fd = os.open(path, os.O_RDONLY | CLOEXEC | NONBLOCK)
    except OSError as exc:
        problem = "no such file" if exc.errno in MISSING_ERRNOS else f"cannot open: {reason_of(exc)}"
        raise TraceFormatError(path, problem) from None
    except ValueError as exc:  # a NUL byte in the path
        raise TraceFormatError(path, f"cannot open: {exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise TraceFormatError(path, "is a directory, not a trace file")
        raise TraceFormatError(path, f"is a {file_kind(mode)}, not a regular file: save the trace to a file first")
    os.set_blocking(fd, True)
    return fd


def file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "special file"


def reason_of(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__
