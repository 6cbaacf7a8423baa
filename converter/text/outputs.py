"""Many outputs, all or nothing: each file is written to a hidden temporary next to it and they
replace their targets together once every one is complete. If any write or rename fails (or the
command is interrupted), the temporaries are removed and every target that was already replaced
gets its previous content back, so a failed run leaves the user's files as they were."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO

from ..errors import OutputError
from ..io import OutputTarget, check_output


class OutputSet:
    """``write(path)`` gives a binary file for one output; ``commit()`` publishes them all."""

    def __init__(self) -> None:
        self._written: list[tuple[str, OutputTarget]] = []  # (temporary, target)
        self._committed = False

    @contextmanager
    def write(self, target: OutputTarget) -> Iterator[IO[bytes]]:
        if target.write_through:
            raise OutputError(target.path, "is a device or FIFO; name regular files for a set of outputs")
        directory, name = os.path.split(target.final)
        try:
            fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        except OSError as exc:
            raise OutputError(target.path, f"cannot write in {directory}: {exc.strerror or exc}") from None
        self._written.append((temp, target))
        try:
            with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
                yield fh
        except OSError as exc:
            raise OutputError(target.path, f"cannot write: {exc.strerror or exc}") from None

    def commit(self) -> None:
        """Replace every target; on a failure, put back what was replaced and raise."""
        mask = os.umask(0)
        os.umask(mask)
        backups: list[tuple[str, str | None]] = []  # (target, backup of its old content or None)
        try:
            for temp, target in self._written:
                os.chmod(temp, 0o666 & ~mask)
                backup = None
                if os.path.lexists(target.final):
                    backup = f"{temp}.old"
                    os.link(target.final, backup)
                backups.append((target.final, backup))
                os.replace(temp, target.final)
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
        self._committed = True

    def discard(self) -> None:
        if self._committed:
            return
        for temp, _ in self._written:
            with suppress(OSError):
                os.unlink(temp)
        self._written.clear()


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
