"""Output: the spill file for pre-encoded node tails, and the ``.et`` file written atomically.

The tails of a large trace are about the size of the output (hundreds of MB), so they go to an
unnamed temporary file next to the output as they are made, and are read back by offset when
the nodes are written in id order. The output is written to a temporary file in the target
directory and renamed over the target only when complete: a failed run leaves no partial file
and never damages an existing one.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from chakra.schema.protobuf import et_def_pb2 as pb

from . import encoding as enc
from .errors import ConverterError, TraceContentError

_BUFFER = 1 << 20


class TailSpill:
    """Append-only store of byte strings, addressed by the order they were added.

    With ``path``, the store is that (existing, named) file, so another process can take it
    (``export``); the caller owns and removes it.
    """

    def __init__(self, directory: str, path: str = "") -> None:
        directory = directory or "."
        self.directory = directory
        self.path = path
        if path:
            self._file: IO[bytes] = open(path, "w+b")  # noqa: SIM115 - closed by close()
        else:
                self._file = tempfile.TemporaryFile(dir=directory, prefix=".chakra-tails-")  # noqa: SIM115
        self._writer = open(self._file.fileno(), "wb", buffering=_BUFFER, closefd=False)  # noqa: SIM115
        self._offsets = array("Q", [0])
        self._size = 0
        self._window = b""  # read-ahead: nodes are mostly requested in the order they were added
        self._window_start = 0

    def append(self, data: bytes) -> None:
        self._writer.write(data)
        self._size += len(data)
        self._offsets.append(self._size)

    def finish_writing(self) -> None:
        self._writer.flush()

    def export(self) -> array:
        """Flush a named spill and return its offsets, for ``append_exported`` in another process."""
        self._writer.flush()
        return self._offsets

    def append_exported(self, path: str, offsets: array) -> None:
        """Append another process's exported tails, in their order, and delete its file."""
        with open(path, "rb") as source:
            shutil.copyfileobj(source, self._writer, _BUFFER)
        base = self._size
        self._offsets.extend(base + offset for offset in offsets[1:])
        self._size = base + offsets[-1]

    def read(self, index: int) -> bytes:
        start, end = self._offsets[index], self._offsets[index + 1]
        window_start = self._window_start
        if window_start <= start and end <= window_start + len(self._window):
            return self._window[start - window_start : end - window_start]
        if start == window_start + len(self._window):  # sequential: read ahead
            self._window = os.pread(self._file.fileno(), max(end - start, _BUFFER), start)
            self._window_start = start
            return self._window[: end - start]
        return os.pread(self._file.fileno(), end - start, start)

    def close(self) -> None:
        self._writer.close()
        self._file.close()


def refuse_overwriting_inputs(output: str, *inputs: str) -> None:
    """Raise if ``output`` is one of the input files: a conversion never replaces its input."""
    if not os.path.exists(output):
        return
    for source in inputs:
        if os.path.exists(source) and os.path.samefile(source, output):
            raise ConverterError(f"{output}: the output would overwrite the input {source}; choose another path")


@contextmanager
def atomic_output(path: str, compress: bool = False) -> Iterator[IO[bytes]]:
    """A buffered file that replaces ``path`` only if the block completes without error.

    It is written in the target directory (so the final rename is atomic) and removed on any
    error: a failed run never leaves a partial output nor damages an existing one. With
    ``compress`` the content is gzipped.
    """
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConverterError(f"{path}: output directory {directory} does not exist")
    fd, temp_path = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with open(fd, "wb", buffering=_BUFFER) as raw:
            if compress:
                with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as packed:
                    yield packed  # type: ignore[misc]
            else:
                yield raw
        os.chmod(temp_path, 0o666 & ~_umask())
        os.replace(temp_path, path)
    except BaseException:
        if os.path.exists(temp_path):
            os.unlink(temp_path)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def global_metadata(path: str, metadata: dict[str, Any]) -> bytes:
    """The GlobalMetadata record, built with the schema's own message class as the reference does."""
    try:
        message = pb.GlobalMetadata(
            attr=[
                pb.AttributeProto(name="schema", string_val=metadata["schema"]),
                pb.AttributeProto(name="pid", uint64_val=metadata["pid"]),
                pb.AttributeProto(name="time", string_val=metadata["time"]),
                pb.AttributeProto(name="start_ts", uint64_val=metadata["start_ts"]),
                pb.AttributeProto(name="finish_ts", uint64_val=metadata["finish_ts"]),
            ]
        )
    except (TypeError, ValueError) as exc:
        raise TraceContentError(path, f"top-level metadata cannot be encoded: {exc}") from None
    return enc.delimited_message(message.SerializeToString())
