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
  refused, never replaced), keeps the replaced file's mode (and owner, as root), and is listed by
  ``committed_outputs()``; ``hold_signals_after_commit(n)`` (the command line) keeps
  SIGINT/SIGTERM/SIGHUP blocked from the n-th commit on, so the last commit and the report of
  success are one step.

Every ``OSError`` of writing (no such directory, permission, read-only file system, disk full,
file too large) is an ``OutputError`` naming the file, raised where the bytes are written.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import resource
import shutil
import signal
import stat
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, cast

from .errors import ConverterError, OutputError, TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
_BUFFER = 1 << 20
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_TMPFILE = getattr(os, "O_TMPFILE", 0)
_PROC_FD = "/proc/self/fd"  # where an unnamed file can be given a name (linkat)
#: Errors that mean "this path names no file" rather than "this file cannot be used".
_MISSING = (errno.ENOENT, errno.ENOTDIR)
_STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


# -- reading --------------------------------------------------------------------------------------
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
    """

    def __init__(self, path: str | os.PathLike[str], byte_range: tuple[int, int] | None = None) -> None:
        self.path = os.fspath(path)
        fd = _open_regular_file(self.path)
        self._raw = open(fd, "rb")  # noqa: SIM115 - closed by close()
        self.size = os.fstat(fd).st_size
        self.gzipped = self._read_raw(2) == GZIP_MAGIC
        self._raw.seek(0)
        self._content: IO[bytes] = (
            cast(IO[bytes], gzip.GzipFile(fileobj=self._raw, mode="rb")) if self.gzipped else self._raw
        )
        self._left = -1  # bytes left in the range; -1: no range
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
            data = self._content.read(size)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
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
        return f"cannot read: {_reason(exc)}"


def open_trace(path: str | os.PathLike[str], byte_range: tuple[int, int] | None = None) -> TraceFile:
    """Open a trace for reading (use it in a ``with``); see ``TraceFile``."""
    return TraceFile(path, byte_range)


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


def _open_regular_file(path: str) -> int:
    if not path:
        raise TraceFormatError("", "the input path is empty")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below)
        fd = os.open(path, os.O_RDONLY | _CLOEXEC | _NONBLOCK)
    except OSError as exc:
        problem = "no such file" if exc.errno in _MISSING else f"cannot open: {_reason(exc)}"
        raise TraceFormatError(path, problem) from None
    except ValueError as exc:  # a NUL byte in the path
        raise TraceFormatError(path, f"cannot open: {exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise TraceFormatError(path, "is a directory, not a trace file")
        raise TraceFormatError(path, f"is a {_kind(mode)}, not a regular file: save the trace to a file first")
    os.set_blocking(fd, True)
    return fd


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
        raise TraceFormatError(path, f"{option}: cannot read: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise TraceFormatError(path, f"{option}: more than the {limit:,} bytes such a file may hold")
    return data


def _open_side_input(path: str, option: str) -> int:
    try:
        return _open_regular_file(path)
    except TraceFormatError as exc:
        problem = exc.problem.replace(": save the trace to a file first", "")
        raise TraceFormatError(exc.path, f"{option}: {problem}") from None


def check_side_output(path: str | os.PathLike[str], option: str, *inputs: str | os.PathLike[str],
                      regular: bool = False) -> OutputTarget:
    """``check_output`` for a file named by ``option`` (its messages name the option); with
    ``regular``, a device or FIFO is refused too (the file is read back after it is written)."""
    try:
        target = check_output(path, *inputs)
    except OutputError as exc:
        raise OutputError(exc.path, f"{option}: {exc.problem}") from None
    if regular and target.write_through:
        raise OutputError(target.path, f"{option}: a {_kind(os.stat(target.path).st_mode)} cannot hold it "
                          "(it is read back after it is written); name a regular file")
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
    found = _stat(path, path)
    if found is not None:
        _refuse_inputs(path, found, inputs)
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise OutputError(path, "is a directory; name a file to write")
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            return OutputTarget(path, path, write_through=True)
        if not stat.S_ISREG(mode):
            raise OutputError(path, f"is a {_kind(mode)}, not a regular file; refusing to write to it")
        if not _user_may_write(path, mode):
            raise OutputError(path, "is read-only; make it writable or remove it to replace it")
    try:
        final = os.path.realpath(path)
    except OSError as exc:  # a relative path, and the working directory was removed
        raise OutputError(path, f"cannot resolve the path ({_reason(exc)}: the working directory was "
                          "removed?); give an absolute path") from None
    directory = os.path.dirname(final)
    _check_directory(path, directory, "output directory")
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
        raise OutputError(path, f"cannot create the output directory: {_reason(exc)}") from None
    if not os.path.isdir(path):
        raise OutputError(path, "is not a directory")
    _probe(path, path)
    return not existed


def _refuse_inputs(path: str, found: os.stat_result, inputs: tuple[str | os.PathLike[str], ...]) -> None:
    for source in inputs:
        with suppress(OSError, ValueError):
            other = os.stat(source)
            if (other.st_dev, other.st_ino) == (found.st_dev, found.st_ino):
                raise OutputError(path, f"the output would overwrite the input {os.fspath(source)}; "
                                  "choose another path")


def _user_may_write(path: str, mode: int) -> bool:
    """Whether the user may write the file: some write bit must be set (``os.access`` says yes to
    root for any file), and ``os.access`` must agree (for everyone else)."""
    return bool(mode & 0o222) and os.access(path, os.W_OK)


def _check_directory(path: str, directory: str, what: str) -> None:
    found = _stat(directory, path)
    if found is None:
        raise OutputError(path, f"{what} {directory} does not exist")
    if not stat.S_ISDIR(found.st_mode):
        raise OutputError(path, f"{directory} is not a directory")


def _probe(path: str, directory: str) -> None:
    """Create and remove a file in ``directory``: the one truthful test that it is writable
    (permissions, read-only file systems, exhausted inodes, quotas)."""
    try:
        fd = _unnamed_file(directory)
        if fd is None:
            fd, probe = tempfile.mkstemp(dir=directory, prefix=".chakra-probe-")
            os.unlink(probe)
    except OSError as exc:
        raise OutputError(path, f"cannot write in {directory}: {_reason(exc)}") from None
    os.close(fd)


def _stat(path: str, named: str) -> os.stat_result | None:
    """``os.stat`` (links followed), None where nothing is there; other problems are errors."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno in _MISSING:
            return None
        raise OutputError(named, f"cannot use {path}: {_reason(exc)}") from None
    except ValueError as exc:  # a NUL byte in the path
        raise OutputError(named, str(exc)) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"), (stat.S_ISFIFO, "FIFO"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return name
    return "special file"


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__


# -- writing --------------------------------------------------------------------------------------
class _Sink(io.RawIOBase):
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
            raise OutputError(self._path, f"{self._what}: {_reason(exc)}") from None

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
    sink: _Sink | None = None
    layers: list[IO[Any]] = []  # outermost first; closing one flushes it into the next
    try:
        if target.write_through:
            fd = _open_in_place(target)
        else:
            fd, temp = _temporary(target)
        sink = _Sink(fd, target.path, owns_fd=False)
        layers.append(io.BufferedWriter(sink, _BUFFER))
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
        unnamed = _unnamed_file(directory)
        if unnamed is not None:
            return unnamed, ""
        return tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    except OSError as exc:
        raise OutputError(target.path, f"cannot write in {directory}: {_reason(exc)}") from None


def _unnamed_file(directory: str) -> int | None:
    """A new file in ``directory`` that has no name yet, or None where that is not supported."""
    if not _TMPFILE or not os.path.isdir(_PROC_FD):
        return None
    try:
        return os.open(directory, _TMPFILE | os.O_WRONLY | _CLOEXEC, 0o666 & ~_umask())
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # not on this file system
            return None
        raise


def _name_unnamed(fd: int, name: str) -> None:
    """linkat(2) of /proc/self/fd/FD, following the link (``os.link`` calls plain link(2), which
    does not, unless a directory descriptor is given)."""
    proc = os.open(_PROC_FD, os.O_RDONLY | _CLOEXEC)
    try:
        os.link(str(fd), name, src_dir_fd=proc, follow_symlinks=True)
    finally:
        os.close(proc)


def _publish(fd: int, temp: str, target: OutputTarget) -> None:
    """Put the finished file in place of the target: name it if it has no name, then rename.

    The target is looked at again at this moment: a FIFO, device or directory that appeared
    while the command ran is refused, never replaced; an existing file keeps its mode (and, for
    root, its owner and group), as ``sed -i`` and editors do. The rename is one step signals
    cannot cut (``_commit_step``)."""
    directory, name = os.path.split(target.final)
    named = ""
    try:
        existing = _stat(target.final, target.path)
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise OutputError(target.path, f"became a {_kind(existing.st_mode)} while the command ran; "
                              "not replaced (nothing written)")
        _keep_attributes(fd, existing)
        if not temp:
            named = temp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
            _name_unnamed(fd, named)
        with _commit_step():
            os.replace(temp, target.final)
            _COMMITTED.append(target.path)
    except BaseException as exc:
        if named:
            with suppress(OSError):
                os.unlink(named)
        if isinstance(exc, OSError):
            raise OutputError(target.path, f"cannot write: {_reason(exc)}") from None
        raise


def _keep_attributes(fd: int, existing: os.stat_result | None) -> None:
    """The new file gets the replaced file's permission bits (and, where this process may set
    them, its owner and group); a new output gets the usual ``0666 & ~umask``."""
    if existing is None:
        os.fchmod(fd, 0o666 & ~_umask())
        return
    if os.geteuid() == 0 and (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
        with suppress(OSError):
            os.fchown(fd, existing.st_uid, existing.st_gid)
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))


#: Outputs committed (renamed into place) by this process, in order: once an output is in
#: place, an interrupt can no longer undo it, so the command line reports it as written.
_COMMITTED: list[str] = []
_HOLD: dict[str, int] = {"after": 0, "pid": 0}
#: The command line's signal handler asks ``signal_deferred`` first: a process-directed signal
#: can reach any thread (torch's, a queue's feeder), and then the handler still runs here, in the
#: main thread, whatever the main thread's mask. ``committing``: a commit step is under way (the
#: signal is kept in ``pending`` and acted on when it ends); ``held``: the command line's last
#: commit is done (the signal is dropped: the command has succeeded).
_SIGNALS: dict[str, int] = {"committing": 0, "held": 0, "pending": 0}


def committed_outputs() -> list[str]:
    """The outputs this process has put in place so far (see ``forget_committed``)."""
    return list(_COMMITTED)


def forget_committed() -> None:
    """Start a new command: no output committed yet, no signal held."""
    _COMMITTED.clear()
    _HOLD.update(after=0, pid=0)
    _SIGNALS.update(committing=0, held=0, pending=0)


def hold_signals_after_commit(after: int) -> None:
    """The command line, whose last step is committing its ``after``-th output: from that
    output's rename on, SIGINT/SIGTERM/SIGHUP stay blocked in this process (not in workers it
    forks) until ``release_held_signals``, so the rename and the report of success are one step.
    0: never held (a library caller keeps its signals)."""
    _HOLD.update(after=after, pid=os.getpid())
    if not after:
        _SIGNALS.update(held=0)


def release_held_signals() -> None:
    """Unblock the termination signals held since the last commit."""
    _SIGNALS.update(held=0, pending=0)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


def signal_deferred(signum: int) -> bool:
    """For a signal handler: True when ``signum`` must not act now (a commit step is under way:
    it acts when the step ends; or the command line's last commit is done: it is dropped)."""
    if _SIGNALS["held"]:
        return True
    if _SIGNALS["committing"]:
        _SIGNALS["pending"] = _SIGNALS["pending"] or signum
        return True
    return False


@contextmanager
def _commit_step() -> Iterator[None]:
    """A rename (or several) with termination signals blocked, so it is never half done nor half
    reported; they stay blocked afterwards when it was the command line's last commit. The mask
    covers the main thread; ``signal_deferred`` covers a signal that another thread received."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        _run_pending_handlers()  # a signal that came just before the block is handled now, before the rename
        _SIGNALS.update(committing=1, pending=0)
        yield
    finally:
        _SIGNALS["committing"] = 0
        hold = _HOLD["after"] and _HOLD["pid"] == os.getpid() and len(_COMMITTED) >= _HOLD["after"]
        if hold:
            _SIGNALS.update(held=1, pending=0)
        else:
            pending = _SIGNALS["pending"]
            _SIGNALS["pending"] = 0
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
            if pending:  # it came to another thread during the step: it acts now
                os.kill(os.getpid(), pending)


def _run_pending_handlers() -> None:
    """Nothing: entering a Python function runs the handlers of signals already received."""


# -- several outputs, all or nothing --------------------------------------------------------------
_SPARE_DESCRIPTORS = 128  # left to the rest of the command when unnamed files are kept open


class OutputSet:
    """Several outputs replaced together, all or nothing: use it in a ``with`` (leaving the block
    without a ``commit()`` removes everything written).

    Each output is first written where no user sees it. ``staged(target)`` is its path in a hidden
    ``.chakra-staging-XXXX`` directory next to the target (made when first needed; another process
    may write it); ``write(target, data)`` writes it there whole; ``open(target)`` gives a binary
    file: with ``unnamed``, an unnamed one (Linux's O_TMPFILE, kept open until the commit while
    file descriptors last) so that even a SIGKILL leaves nothing, else one in the staging directory.

    ``commit()`` puts them in place the way ``atomic_output`` puts one: each target is looked at
    again (a FIFO, device or directory there is refused, and nothing is replaced), each file gets
    the mode (and, as root, the owner) of the file it replaces, and all are renamed in one step
    that signals cannot cut (``_commit_step``), recorded as one commit (``shown``, for the command
    line's report). If a rename fails, every target already replaced gets its old file back. A
    SIGKILL can leave a hidden staging directory, never a partial output. Every ``OSError`` is an
    ``OutputError`` naming the file.
    """

    def __init__(self, *, unnamed: bool = False, shown: str | None = None) -> None:
        self.shown = shown
        self._targets: dict[str, OutputTarget] = {}  # by the file replaced, in the order given
        self._unnamed: dict[str, int] = {}  # the file replaced -> descriptor of its unnamed file
        self._staging: dict[str, str] = {}  # a target directory -> its staging directory
        self._unnamed_left = _descriptors_to_spare() if unnamed else 0

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def staged(self, target: OutputTarget) -> str:
        """Where the file of ``target`` is written before the commit."""
        directory, name = self._add(target)
        staging = self._staging.get(directory)
        if staging is None:
            try:
                staging = tempfile.mkdtemp(dir=directory, prefix=".chakra-staging-")
            except OSError as exc:
                raise OutputError(target.path, f"cannot write in {directory}: {_reason(exc)}") from None
            self._staging[directory] = staging
        return os.path.join(staging, name)

    def write(self, target: OutputTarget, data: bytes | Sequence[bytes]) -> int:
        """Write the whole file of ``target`` (bytes, or parts joined) into the staging directory;
        returns its size."""
        parts = [data] if isinstance(data, bytes) else data
        path = self.staged(target)
        size = 0
        try:
            with open(path, "wb") as out:
                for part in parts:
                    out.write(part)
                    size += len(part)
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {_reason(exc)}") from None
        return size

    @contextmanager
    def open(self, target: OutputTarget) -> Iterator[IO[bytes]]:
        """A buffered binary file that holds the output of ``target`` once the block completes."""
        directory, _ = self._add(target)
        fd = None
        if self._unnamed_left > 0:
            try:
                fd = _unnamed_file(directory)
            except OSError as exc:
                raise OutputError(target.path, f"cannot write in {directory}: {_reason(exc)}") from None
        try:
            if fd is None:
                out = open(self.staged(target), "wb", buffering=_BUFFER)  # noqa: SIM115 - closed below
            else:
                self._unnamed_left -= 1
                self._unnamed[target.final] = fd
                out = os.fdopen(fd, "wb", buffering=_BUFFER, closefd=False)  # the descriptor waits for commit()
            with out:
                yield out
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {_reason(exc)}") from None

    def commit(self, targets: Sequence[OutputTarget] | None = None) -> None:
        """Put the files of ``targets`` (by default every one given) in place together."""
        chosen = list(self._targets.values()) if targets is None else list(targets)
        if not chosen:
            return
        moves: list[tuple[OutputTarget, str, bool]] = []  # (target, its staged file, whether one was there)
        for target in chosen:
            if target.final not in self._targets:
                raise OutputError(target.path, "was never written (internal error); nothing written")
            existing = _stat(target.final, target.path)
            if existing is not None and not stat.S_ISREG(existing.st_mode):
                raise OutputError(target.path, f"became a {_kind(existing.st_mode)} while the command ran; "
                                  "not replaced (nothing written)")
            moves.append((target, self._ready(target, existing), existing is not None))
        try:  # old files go aside here, each under its own name (every staged file is named by now)
            backups = {staging: tempfile.mkdtemp(dir=staging, prefix=".old-") for staging in
                       {os.path.dirname(staged) for _, staged, existed in moves if existed}}
        except OSError as exc:
            raise OutputError(moves[0][0].path, f"cannot write: {_reason(exc)}; nothing written") from None
        replaced: list[tuple[OutputTarget, str, str | None]] = []  # (target, staged file, its old file)
        try:
            with _commit_step():
                try:
                    for target, staged, existed in moves:
                        old = None
                        if existed:
                            old = os.path.join(backups[os.path.dirname(staged)], os.path.basename(staged))
                            try:
                                os.link(target.final, old)  # the target stays in place until it is replaced
                            except OSError:  # no hard links here: moved aside, put back on a failure
                                os.replace(target.final, old)
                        replaced.append((target, staged, old))
                        os.replace(staged, target.final)
                    _COMMITTED.append(self.shown or (chosen[0].path if len(chosen) == 1 else
                                                     os.path.dirname(chosen[0].path) or "."))
                except BaseException:
                    _roll_back(replaced)
                    raise
        except OSError as exc:
            failed = replaced[-1][0] if replaced else moves[0][0]
            raise OutputError(failed.path, f"cannot write: {_reason(exc)}; nothing written") from None

    def discard(self) -> None:
        """Remove whatever was not put in place (call it in a ``finally``, or use the ``with``)."""
        for fd in self._unnamed.values():
            with suppress(OSError):
                os.close(fd)
        self._unnamed.clear()
        for staging in self._staging.values():
            shutil.rmtree(staging, ignore_errors=True)
        self._staging.clear()

    def _add(self, target: OutputTarget) -> tuple[str, str]:
        if target.write_through:
            raise OutputError(target.path, "is a device or FIFO; the outputs of this command must be regular files")
        self._targets.setdefault(target.final, target)
        return os.path.split(target.final)

    def _ready(self, target: OutputTarget, existing: os.stat_result | None) -> str:
        """The staged file of ``target``, named, with the attributes of the file it replaces."""
        try:
            fd = self._unnamed.pop(target.final, -1)
            if fd >= 0:
                try:
                    _keep_attributes(fd, existing)
                    staged = self.staged(target)
                    _name_unnamed(fd, staged)
                finally:
                    os.close(fd)
                return staged
            staged = self.staged(target)
            fd = os.open(staged, os.O_RDONLY | _CLOEXEC)
            try:
                _keep_attributes(fd, existing)
            finally:
                os.close(fd)
            return staged
        except FileNotFoundError:
            raise OutputError(target.path, "was never written (internal error); nothing written") from None
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {_reason(exc)}") from None


def _roll_back(replaced: list[tuple[OutputTarget, str, str | None]]) -> None:
    """Put back the old files of the targets already replaced (and remove the new ones)."""
    for target, staged, old in reversed(replaced):
        with suppress(OSError):
            if old is not None:
                os.replace(old, target.final)
            elif not os.path.lexists(staged):  # it was renamed into place: there was nothing before
                os.unlink(target.final)


def _descriptors_to_spare() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(0, (soft if soft != resource.RLIM_INFINITY else 4096) - _SPARE_DESCRIPTORS)


def _open_in_place(target: OutputTarget) -> int:
    """A character device or FIFO opened for writing, neither created nor truncated."""
    try:
        # O_NONBLOCK: a FIFO nobody reads is an error (ENXIO), not a wait forever
        fd = os.open(target.path, os.O_WRONLY | _CLOEXEC | _NONBLOCK)
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
    return f"cannot open: {_reason(exc)}"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- temporary data -------------------------------------------------------------------------------
class SpillFile:
    """A command's temporary data (encoded node tails, nodes waiting for their turn): an unnamed
    file in ``directory`` that the kernel frees however the process ends, and that a forked worker
    writes through the descriptor it inherits. Appends are buffered; reads are by offset. Every
    problem creating, writing or reading it is an ``OutputError`` naming the directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory or "."
        try:
            self._file = tempfile.TemporaryFile(dir=self.directory, prefix=".chakra-tails-")  # noqa: SIM115
        except OSError as exc:
            raise OutputError(self.directory, f"cannot create temporary data: {_reason(exc)}") from None
        sink = _Sink(self._file.fileno(), self.directory, owns_fd=False, what="temporary data")
        self._writer = io.BufferedWriter(sink, _BUFFER)
        #: Append bytes (the buffered writer's own method: this is on the hot path).
        self.write: Callable[[bytes], int] = self._writer.write

    def flush(self) -> None:
        self._writer.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def pread(self, size: int, offset: int) -> bytes:
        try:
            return os.pread(self._file.fileno(), size, offset)
        except OSError as exc:
            raise OutputError(self.directory, f"cannot read temporary data: {_reason(exc)}") from None

    def close(self) -> None:
        with suppress(OutputError):  # data nobody will read is not worth an error
            self._writer.close()
        self._file.close()


# -- the log --------------------------------------------------------------------------------------
def open_log(path: str) -> IO[str]:
    """``path`` opened for appending UTF-8 lines (created if missing, never truncated): a regular
    file the user may write, a character device, or a FIFO with a reader. Write problems are
    ``OutputError``\\ s."""
    found = _stat(path, path)
    if found is not None:
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise OutputError(path, "the log file is a directory")
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OutputError(path, f"the log file is a {_kind(mode)}; refusing to write to it")
        if stat.S_ISREG(mode) and not _user_may_write(path, mode):
            raise OutputError(path, "the log file is read-only")
    else:
        _check_directory(path, os.path.dirname(os.path.abspath(path)), "log directory")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _CLOEXEC | _NONBLOCK, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError(path, "the log file is a FIFO that no process is reading") from None
        raise OutputError(path, f"cannot open the log file: {_reason(exc)}") from None
    os.set_blocking(fd, True)
    return io.TextIOWrapper(io.BufferedWriter(_Sink(fd, path, what="the log file")), encoding="utf-8",
                            errors="backslashreplace", line_buffering=True)
