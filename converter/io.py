"""Files in and out: the one opener of trace files and the one atomic-output helper.

* ``open_trace`` opens a trace for reading; its content is decompressed when the file starts with
  gzip's magic bytes, whatever its name. Problems opening it are ``TraceFormatError``\\ s.
* ``atomic_output`` writes a file in the target's directory and renames it over the target only
  when the block completes, so a failed run never leaves a partial output nor damages an
  existing file; ``atomic_text_output`` is the same for UTF-8 text.
* ``refuse_overwriting_inputs``: no command ever writes over one of its inputs.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, cast

from .errors import ConverterError, TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"
_BUFFER = 1 << 20


def is_gzip(path: str) -> bool:
    """True if the file starts with gzip's magic bytes (False if it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == GZIP_MAGIC
    except OSError:
        return False


def open_raw_and_content(path: str) -> tuple[IO[bytes], IO[bytes]]:
    """(the file, its content): the content is decompressed if the file starts with gzip's magic
    bytes. The caller closes both (they are one object for plain files)."""
    if not os.path.exists(path):
        raise TraceFormatError(path, "no such file")
    if os.path.isdir(path):
        raise TraceFormatError(path, "is a directory, not a trace file")
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        raise TraceFormatError(path, f"cannot open: {exc.strerror}") from exc
    gzipped = raw.read(2) == GZIP_MAGIC
    raw.seek(0)
    return raw, (cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="rb")) if gzipped else raw)


@contextmanager
def open_trace(path: str) -> Iterator[IO[bytes]]:
    """The file's content as bytes (gzip or not)."""
    raw, content = open_raw_and_content(path)
    try:
        yield content
    finally:
        if content is not raw:
            content.close()
        raw.close()


def refuse_overwriting_inputs(output: str, *inputs: str) -> None:
    """Raise if ``output`` is one of the input files: a command never replaces its input."""
    if not os.path.exists(output):
        return
    for source in inputs:
        if os.path.exists(source) and os.path.samefile(source, output):
            raise ConverterError(f"{output}: the output would overwrite the input {source}; choose another path")


@contextmanager
def atomic_output(path: str, compress: bool = False) -> Iterator[IO[bytes]]:
    """A buffered file that replaces ``path`` only if the block completes without error.

    It is written in the target directory (so the final rename is atomic) and removed on any
    error. With ``compress`` the content is gzipped.
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


@contextmanager
def atomic_text_output(path: str) -> Iterator[IO[str]]:
    """UTF-8 text through ``atomic_output`` (gzip-compressed for ``.gz`` paths)."""
    with atomic_output(path, compress=path.endswith(".gz")) as binary:
        wrapper = io.TextIOWrapper(binary, encoding="utf-8")
        try:
            yield wrapper
            wrapper.flush()
        finally:
            wrapper.detach()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
