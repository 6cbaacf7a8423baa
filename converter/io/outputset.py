"""Several outputs replaced together, all or nothing: ``OutputSet``."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import IO

from ..errors import OutputError
from ..lifecycle import commit_step, record_commit
from .output import OutputTarget, keep_attributes, name_unnamed, stat_or_none, unnamed_file
from .read import BUFFER_SIZE, CLOEXEC, file_kind, reason_of

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
    that signals cannot cut (``lifecycle.commit_step``), recorded as one commit (``shown``, for the command
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
                raise OutputError(target.path, f"cannot write in {directory}: {reason_of(exc)}") from None
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
            raise OutputError(target.path, f"cannot write: {reason_of(exc)}") from None
        return size

    @contextmanager
    def open(self, target: OutputTarget) -> Iterator[IO[bytes]]:
        """A buffered binary file that holds the output of ``target`` once the block completes."""
        directory, _ = self._add(target)
        fd = None
        if self._unnamed_left > 0:
            try:
                fd = unnamed_file(directory)
            except OSError as exc:
                raise OutputError(target.path, f"cannot write in {directory}: {reason_of(exc)}") from None
        try:
            if fd is None:
                out = open(self.staged(target), "wb", buffering=BUFFER_SIZE)  # noqa: SIM115 - closed below
            else:
                self._unnamed_left -= 1
                self._unnamed[target.final] = fd
                out = os.fdopen(fd, "wb", buffering=BUFFER_SIZE, closefd=False)  # the descriptor waits for commit()
            with out:
                yield out
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {reason_of(exc)}") from None

    def commit(self, targets: Sequence[OutputTarget] | None = None) -> None:
        """Put the files of ``targets`` (by default every one given) in place together."""
        chosen = list(self._targets.values()) if targets is None else list(targets)
        if not chosen:
            return
        moves: list[tuple[OutputTarget, str, bool]] = []  # (target, its staged file, whether one was there)
        for target in chosen:
            if target.final not in self._targets:
                raise OutputError(target.path, "was never written (internal error); nothing written")
            existing = stat_or_none(target.final, target.path)
            if existing is not None and not stat.S_ISREG(existing.st_mode):
                raise OutputError(
                    target.path,
                    f"became a {file_kind(existing.st_mode)} while the command ran; not replaced (nothing written)",
                )
            moves.append((target, self._ready(target, existing), existing is not None))
        try:  # old files go aside here, each under its own name (every staged file is named by now)
            backups = {
                staging: tempfile.mkdtemp(dir=staging, prefix=".old-")
                for staging in {os.path.dirname(staged) for _, staged, existed in moves if existed}
            }
        except OSError as exc:
            raise OutputError(moves[0][0].path, f"cannot write: {reason_of(exc)}; nothing written") from None
        replaced: list[tuple[OutputTarget, str, str | None]] = []  # (target, staged file, its old file)
        try:
            with commit_step():
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
                    record_commit(
                        self.shown or (chosen[0].path if len(chosen) == 1 else os.path.dirname(chosen[0].path) or ".")
                    )
                except BaseException:
                    _roll_back(replaced)
                    raise
        except OSError as exc:
            failed = replaced[-1][0] if replaced else moves[0][0]
            raise OutputError(failed.path, f"cannot write: {reason_of(exc)}; nothing written") from None

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
                    keep_attributes(fd, existing)
                    staged = self.staged(target)
                    name_unnamed(fd, staged)
                finally:
                    os.close(fd)
                return staged
            staged = self.staged(target)
            fd = os.open(staged, os.O_RDONLY | CLOEXEC)
            try:
                keep_attributes(fd, existing)
            finally:
                os.close(fd)
            return staged
        except FileNotFoundError:
            raise OutputError(target.path, "was never written (internal error); nothing written") from None
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {reason_of(exc)}") from None


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
