"""Outputs, one at a time: ``check_output`` (``OutputTarget``) before any work, side inputs and
outputs named by an option, ``atomic_output`` / ``atomic_text_output`` (a temporary file renamed
over the target when the block completes), and the commit protocol (``committed_outputs``,
``hold_signals_after_commit``, ``signal_deferred``). See the package docstring."""

from __future__ import annotations

import errno
import gzip
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, cast

from ..errors import ConverterError, OutputError, TraceFormatError
from ..lifecycle import commit_step, record_commit
from .read import BUFFER_SIZE, CLOEXEC, MISSING_ERRNOS, NONBLOCK, file_kind, open_regular_file, reason_of

_TMPFILE = getattr(os, "O_TMPFILE", 0)
_PROC_FD = "/proc/self/fd"  # where an unnamed file can be given a name (linkat)


# -- side inputs: files named by an option ---------------------------------------------------------
#: The most a side input (``--comm-groups``, a configuration) may hold: it is read whole.
SIDE_INPUT_LIMIT = 64 << 20


def check_side_input(path: str | os.PathLike[str], option: str) -> None:
    """Raise a ``TraceFormatError`` naming ``option`` where ``path`` cannot be read as an input:
    the same checks as the main input (missing, a directory, a FIFO or device, unreadable)."""
    os.close(_open_side_input(os.fspath(path), option))


def read_side_input(path: str | os.PathLike[str], option: str, limit: int = SIDE_INPUT_LIMIT) -> bytes:
    """The whole content of a small input named by ``option`` (a regular file of at most ``limit``
    bytes: a FIFO, a device or a huge file is refused, never waited on nor read without end)."""
    path = os.fspath(path)
    fd = _open_side_input(path, option)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise TraceFormatError(path, f"{option}: {size:,} bytes; more than the {limit:,} such a file may hold")
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise TraceFormatError(path, f"{option}: cannot read: {reason_of(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TraceFormatError(path, f"{option}: more than the {limit:,} bytes such a file may hold")
    return data


def _open_side_input(path: str, option: str) -> int:
    try:
        return open_regular_file(path)
    except TraceFormatError as exc:
        problem = exc.problem.replace(": save the trace to a file first", "")
        raise TraceFormatError(exc.path, f"{option}: {problem}") from None


def check_side_output(
    path: str | os.PathLike[str], option: str, *inputs: str | os.PathLike[str], regular: bool = False
) -> OutputTarget:
    """``check_output`` for a file named by ``option`` (its messages name the option); with
    ``regular``, a device or FIFO is refused too (the file is read back after it is written)."""
    try:
        target = check_output(path, *inputs)
    except OutputError as exc:
        raise OutputError(exc.path, f"{option}: {exc.problem}") from None
    if regular and target.write_through:
        raise OutputError(
            target.path,
            f"{option}: a {file_kind(os.stat(target.path).st_mode)} cannot hold it "
            "(it is read back after it is written); name a regular file",
        )
    return target


# -- where an output goes -------------------------------------------------------------------------
@dataclass(frozen=True)
class OutputTarget:
    """Where an output goes: ``path`` as named (for messages), ``final`` the file that is replaced
    (symbolic links resolved, so a link is followed, never replaced), or, for a character device
    or a FIFO, ``write_through``: written in place."""

    path: str
    final: str
    write_through: bool

    @property
    def work_dir(self) -> str:
        """Where the command's temporary data goes: next to the output (the disk chosen for it),
        or the system's temporary directory for a device or a FIFO."""
        return tempfile.gettempdir() if self.write_through else os.path.dirname(self.final)


def check_output(path: str | os.PathLike[str], *inputs: str | os.PathLike[str]) -> OutputTarget:
    """How ``path`` will be written, or an error saying why it cannot be (call it before any work).

    Refused: an empty path, one of ``inputs``, a directory, a block device or socket, an existing
    file the user may not write (no write bit at all: root would otherwise replace it silently),
    a missing directory, a directory where no file can be created.
    """
    path = os.fspath(path)
    if not path:
        raise OutputError("", "the output path is empty")
    if path.endswith(("/", os.sep)) or os.path.basename(path) in (".", ".."):
        raise OutputError(path, "names a directory (it ends in '/'); name a file to write")
    found = stat_or_none(path, path)
    if found is not None:
        _refuse_inputs(path, found, inputs)
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise OutputError(path, "is a directory; name a file to write")
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return OutputTarget(path, path, write_through=True)
        if not stat.S_ISREG(mode):
            raise OutputError(path, f"is a {file_kind(mode)}, not a regular file; refusing to write to it")
        if not user_may_write(path, mode):
            raise OutputError(path, "is read-only; make it writable or remove it to replace it")
    try:
        final = os.path.realpath(path)
    except OSError as exc:  # a relative path, and the working directory was removed
        raise OutputError(
            path,
            f"cannot resolve the path ({reason_of(exc)}: the working directory was removed?); give an absolute path",
        ) from None
    directory = os.path.dirname(final)
    check_directory(path, directory, "output directory")
    _probe(path, directory)
    return OutputTarget(path, final, write_through=False)


def output_directory(path: str | os.PathLike[str]) -> bool:
    """Make sure ``path`` is a directory outputs can be written in (created if missing, with its
    parents); True if it was created."""
    path = os.fspath(path)
    if not path:
        raise OutputError("", "the output directory path is empty")
    existed = os.path.lexists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError:
        raise OutputError(path, "exists and is not a directory") from None
    except OSError as exc:
        raise OutputError(path, f"cannot create the output directory: {reason_of(exc)}") from None
    if not os.path.isdir(path):
        raise OutputError(path, "is not a directory")
    _probe(path, path)
    return not existed


def _refuse_inputs(path: str, found: os.stat_result, inputs: tuple[str | os.PathLike[str], ...]) -> None:
    for source in inputs:
        with suppress(OSError, ValueError):
            other = os.stat(source)
            if (other.st_dev, other.st_ino) == (found.st_dev, found.st_ino):
                raise OutputError(
                    path, f"the output would overwrite the input {os.fspath(source)}; choose another path"
                )


def user_may_write(path: str, mode: int) -> bool:
    """Whether the user may write the file: some write bit must be set (``os.access`` says yes to
    root for any file), and ``os.access`` must agree (for everyone else)."""
    return bool(mode & 0o222) and os.access(path, os.W_OK)


def check_directory(path: str, directory: str, what: str) -> None:
    found = stat_or_none(directory, path)
    if found is None:
        raise OutputError(path, f"{what} {directory} does not exist")
    if not stat.S_ISDIR(found.st_mode):
        raise OutputError(path, f"{directory} is not a directory")


def _probe(path: str, directory: str) -> None:
    """Create and remove a file in ``directory``: the one truthful test that it is writable
    (permissions, read-only file systems, exhausted inodes, quotas)."""
    try:
        fd = unnamed_file(directory)
        if fd is None:
            fd, probe = tempfile.mkstemp(dir=directory, prefix=".chakra-probe-")
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(path, f"cannot write in {directory}: {reason_of(exc)}") from None
    os.close(fd)


def stat_or_none(path: str, named: str) -> os.stat_result | None:
    """``os.stat`` (links followed), None where nothing is there; other problems are errors."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno in MISSING_ERRNOS:
            return None
        raise OutputError(named, f"cannot use {path}: {reason_of(exc)}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise OutputError(named, str(exc)) from None


# -- writing --------------------------------------------------------------------------------------
class Sink(io.RawIOBase):
    """A file descriptor written with ``os.write``; every ``OSError`` becomes an ``OutputError``
    naming ``path``. After ``abandon()`` writes are dropped: an output being discarded is not
    written further (so closing the layers above it cannot fail again)."""

    def __init__(self, fd: int, path: str, *, owns_fd: bool = True, what: str = "") -> None:
        super().__init__()
        self._fd = fd
        self._path = path
        self._owns_fd = owns_fd
        self._what = f"cannot write {what}".rstrip()
        self._abandoned = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def write(self, data: Any) -> int:
        if self._abandoned:
            return len(data)
        try:
            return os.write(self._fd, data)
        except OSError as exc:
            raise OutputError(self._path, f"{self._what}: {reason_of(exc)}") from None

    def abandon(self) -> None:
        self._abandoned = True

    def close(self) -> None:
        if not self.closed and self._owns_fd:
            os.close(self._fd)
        super().close()


@contextmanager
def atomic_output(output: str | os.PathLike[str] | OutputTarget, compress: bool = False) -> Iterator[IO[bytes]]:
    """A buffered binary file that becomes the output only if the block completes (gzipped with
    ``compress``); see ``check_output`` for what an output may be."""
    with _output(output, compress, text=False) as out:
        yield cast(IO[bytes], out)


@contextmanager
def atomic_text_output(output: str | os.PathLike[str] | OutputTarget) -> Iterator[IO[str]]:
    """UTF-8 text through ``atomic_output`` (gzip-compressed for ``.gz`` paths)."""
    target = output if isinstance(output, OutputTarget) else check_output(output)
    with _output(target, target.path.endswith(".gz"), text=True) as out:
        yield cast(IO[str], out)


@contextmanager
def _output(output: str | os.PathLike[str] | OutputTarget, compress: bool, text: bool) -> Iterator[IO[Any]]:
    target = output if isinstance(output, OutputTarget) else check_output(output)
    fd, temp = -1, ""
    sink: Sink | None = None
    layers: list[IO[Any]] = []  # outermost first; closing one flushes it into the next
    try:
        if target.write_through:
            fd = _open_in_place(target)
        else:
            fd, temp = _temporary(target)
        sink = Sink(fd, target.path, owns_fd=False)
        layers.append(io.BufferedWriter(sink, BUFFER_SIZE))
        if compress:
            layers.insert(0, cast(IO[bytes], gzip.GzipFile(fileobj=layers[0], mode="wb", compresslevel=6)))
        if text:
            layers.insert(0, io.TextIOWrapper(cast(IO[bytes], layers[0]), encoding="utf-8"))
        yield layers[0]
        for layer in layers:
            layer.close()
        if not target.write_through:
            _publish(fd, temp, target)
    except BaseException:
        if sink is not None:
            sink.abandon()  # what the layers still hold goes nowhere: closing them cannot fail
            for layer in layers:
                with suppress(OSError, ValueError, ConverterError):
                    layer.close()
        if temp:
            with suppress(OSError):
                os.unlink(temp)
        raise
    finally:
        if fd >= 0:
            with suppress(OSError):
                os.close(fd)


def _temporary(target: OutputTarget) -> tuple[int, str]:
    """The file the output is written to before it replaces the target, and its name: none where
    the system can make unnamed files (Linux's O_TMPFILE), so that even a killed process leaves
    nothing behind; else a hidden ``.NAME.XXXX.tmp`` next to the target."""
    directory, name = os.path.split(target.final)
    try:
        unnamed = unnamed_file(directory)
        if unnamed is not None:
            return unnamed, ""
        return tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(target.path, f"cannot write in {directory}: {reason_of(exc)}") from None


def unnamed_file(directory: str) -> int | None:
    """A new file in ``directory`` that has no name yet, or None where that is not supported."""
    if not _TMPFILE or not os.path.isdir(_PROC_FD):
        return None
    try:
        return os.open(directory, _TMPFILE | os.O_WRONLY | CLOEXEC, 0o666 & ~_umask())
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # not on this file system
            return None
        raise


def name_unnamed(fd: int, name: str) -> None:
    """linkat(2) of /proc/self/fd/FD, following the link (``os.link`` calls plain link(2), which
    does not, unless a directory descriptor is given)."""
    proc = os.open(_PROC_FD, os.O_RDONLY | CLOEXEC)
    try:
        os.link(str(fd), name, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _publish(fd: int, temp: str, target: OutputTarget) -> None:
    """Put the finished file in place of the target: name it if it has no name, then rename.

    The target is looked at again at this moment: a FIFO, device or directory that appeared
    while the command ran is refused, never replaced; an existing file keeps its mode (and, for
    root, its owner and group), as ``sed -i`` and editors do. The rename is one step signals
    cannot cut (``lifecycle.commit_step``)."""
    directory, name = os.path.split(target.final)
    named = ""
    try:
        existing = stat_or_none(target.final, target.path)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise OutputError(
                target.path,
                f"became a {file_kind(existing.st_mode)} while the command ran; not replaced (nothing written)",
            )
        keep_attributes(fd, existing)
        if not temp:
            named = temp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
            name_unnamed(fd, named)
        with commit_step():
            os.replace(temp, target.final)
            record_commit(target.path)
    except BaseException as exc:
        if named:
            with suppress(OSError):
                os.unlink(named)
        if isinstance(exc, OSError):
            raise OutputError(target.path, f"cannot write: {reason_of(exc)}") from None
        raise


def keep_attributes(fd: int, existing: os.stat_result | None) -> None:
    """The new file gets the replaced file's permission bits (and, where this process may set
    them, its owner and group); a new output gets the usual ``0666 & ~umask``."""
    if existing is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    if os.geteuid() == 0 and (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        with suppress(OSError):
            os.fchown(fd, existing.st_uid, existing.st_gid)
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))


def _open_in_place(target: OutputTarget) -> int:
    """A character device or FIFO opened for writing, neither created nor truncated."""
    try:
        # O_NONBLOCK: a FIFO nobody reads is an error (ENXIO), not a wait forever
        fd = os.open(target.path, os.O_WRONLY | CLOEXEC | NONBLOCK)
    except OSError as exc:
        raise OutputError(target.path, _in_place_problem(target.path, exc)) from None
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # replaced since it was checked
        os.close(fd)
        raise OutputError(target.path, "changed while the command ran; run it again")
    os.set_blocking(fd, True)
    return fd


def _in_place_problem(path: str, exc: OSError) -> str:
    """Why a device or FIFO could not be opened for writing, in words that fit what it is."""
    found = None
    with suppress(OSError, ValueError):
        found = os.stat(path)
    if exc.errno == errno.ENXIO and found is not None and stat.S_ISFIFO(found.st_mode):
        return "is a FIFO that no process is reading"
    if exc.errno == errno.ENXIO:
        return "is a device that is not there (a terminal that was closed?)"
    return f"cannot open: {reason_of(exc)}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
