"""Many outputs, all or nothing. Each file is written to a temporary next to its target (an
unnamed one where Linux's O_TMPFILE allows and descriptors are plentiful, so that even SIGKILL
leaves nothing; else a hidden ``.NAME.XXXX.tmp``), and they replace their targets together once
every one is complete. If any write or rename fails (or the command is interrupted), the
temporaries go and every target already replaced gets its previous content back, so a failed run
leaves the user's files as they were."""

from __future__ import annotations

import os
import resource
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO

from ..errors import OutputError
from ..io import OutputTarget, check_output
from ..io import _name_unnamed as name_unnamed  # the io module's O_TMPFILE helpers: one implementation
from ..io import _unnamed_file as unnamed_file

_SPARE_DESCRIPTORS = 128


@dataclass
class _Pending:
    target: OutputTarget
    fd: int  # an unnamed file still open, or -1
    temp: str  # its name once it has one


class OutputSet:
    """``write(target)`` gives a binary file for one output; ``commit()`` publishes them all."""

    def __init__(self) -> None:
        self._pending: list[_Pending] = []
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self._unnamed_left = max(0, (soft if soft != resource.RLIM_INFINITY else 4096) - _SPARE_DESCRIPTORS)

    @contextmanager
    def write(self, target: OutputTarget) -> Iterator[IO[bytes]]:
        if target.write_through:
            raise OutputError(target.path, "is a device or FIFO; name regular files for a set of outputs")
        directory, name = os.path.split(target.final)
        try:
            fd = unnamed_file(directory) if self._unnamed_left > 0 else None
            if fd is not None:
                self._unnamed_left -= 1
                pending = _Pending(target, fd, "")
            else:
                fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
                pending = _Pending(target, -1, temp)
        except OSError as exc:
            raise OutputError(target.path, f"cannot write in {directory}: {exc.strerror or exc}") from None
        self._pending.append(pending)
        try:
            with os.fdopen(fd, "wb", buffering=1 << 20, closefd=pending.fd < 0) as fh:
                yield fh
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Replace every target; on a failure, put back what was replaced and raise."""
        mask = os.umask(0)
        os.umask(mask)
        backups: list[tuple[str, str | None]] = []  # (target, backup of its old content or None)
        try:
            for pending in self._pending:
                final = pending.target.final
                if pending.fd >= 0:
                    pending.temp = f"{os.path.dirname(final)}/.{os.path.basename(final)}.{os.urandom(6).hex()}.tmp"
                    name_unnamed(pending.fd, pending.temp)
                    os.close(pending.fd)
                    pending.fd = -1
                else:
                    os.chmod(pending.temp, 0o666 & ~mask)
                backup = None
                if os.path.lexists(final):
                    backup = f"{pending.temp}.old"
                    os.link(final, backup)
                backups.append((final, backup))
                os.replace(pending.temp, final)
                pending.temp = ""
        except BaseException as exc:
            for final, backup in reversed(backups):
                with suppress(OSError):
                    if backup is not None:
                        os.replace(backup, final)
                    else:  # it did not exist before
                        os.unlink(final)
            if isinstance(exc, OSError):
                raise OutputError(exc.filename or "", f"cannot write: {exc.strerror or exc}") from None
            raise
        for _, backup in backups:
            if backup is not None:
                with suppress(OSError):
                    os.unlink(backup)

    def discard(self) -> None:
        """Remove what was not published: unnamed files are freed when closed."""
        for pending in self._pending:
            if pending.fd >= 0:
                with suppress(OSError):
                    os.close(pending.fd)
            if pending.temp:
                with suppress(OSError):
                    os.unlink(pending.temp)
        self._pending.clear()


@contextmanager
def output_set() -> Iterator[OutputSet]:
    """An ``OutputSet`` whose temporaries are removed unless ``commit()`` succeeded."""
    outputs = OutputSet()
    try:
        yield outputs
    finally:
        outputs.discard()


def targets(paths: list[str], *inputs: str) -> list[OutputTarget]:
    """``check_output`` of each path (checked before any work), refusing a path named twice."""
    found: list[OutputTarget] = []
    seen: set[str] = set()
    for path in paths:
        target = check_output(path, *inputs)
        if target.final in seen:
            raise OutputError(path, "named twice among the outputs")
        seen.add(target.final)
        found.append(target)
    return found
