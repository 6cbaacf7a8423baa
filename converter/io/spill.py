"""``SpillFile``: temporary data of a command, in an unnamed file the kernel frees on any exit."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from contextlib import suppress

from ..errors import OutputError
from .output import Sink
from .read import BUFFER_SIZE, reason_of


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
            raise OutputError(self.directory, f"cannot create temporary data: {reason_of(exc)}") from None
        sink = Sink(self._file.fileno(), self.directory, owns_fd=False, what="temporary data")
        self._writer = io.BufferedWriter(sink, BUFFER_SIZE)
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
            raise OutputError(self.directory, f"cannot read temporary data: {reason_of(exc)}") from None

    def close(self) -> None:
        with suppress(OutputError):  # data nobody will read is not worth an error
            self._writer.close()
        self._file.close()
