"""Repair a host trace that holds several concatenated JSON objects: keep the last complete one.

Seen when two ranks write the same file, or when the observer saves twice: ``{...}{...}``, perhaps
with a torn object at the end. Readers refuse such files; ``repair`` finds the top-level object
boundaries in one streaming pass (strings skipped by a regular expression, only braces counted in
Python), then copies the bytes of the last complete object. Nothing is parsed into objects, so
memory stays at one chunk whatever the file size.
"""

from __future__ import annotations

import codecs
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import IO

from .errors import TraceFormatError
from .io import atomic_text_output, open_trace, refuse_overwriting_inputs

_CHUNK = 1 << 20
# Everything up to the next brace, strings included; stops before a string cut by the chunk end.
_SKIP = re.compile(rb'(?:[^{}"]+|"(?:[^"\\]+|\\.)*")*')


@dataclass(frozen=True)
class Span:
    start: int  # byte offsets in the (decompressed) text
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RepairResult:
    input_path: str
    output_path: str
    kept: Span
    dropped: list[Span] = field(default_factory=list)  # complete objects before the kept one
    trailing_bytes: int = 0  # an incomplete object (or garbage) after the kept one

    def describe(self) -> str:
        parts = [f"kept object {len(self.dropped) + 1} ({self.kept.size} bytes)"]
        if self.dropped:
            sizes = ", ".join(f"{s.size} bytes at {s.start}" for s in self.dropped)
            parts.append(f"dropped {len(self.dropped)} earlier complete object(s) ({sizes})")
        if self.trailing_bytes:
            parts.append(f"dropped {self.trailing_bytes} trailing bytes of an incomplete object")
        return "; ".join(parts)


def repair(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> RepairResult:
    """Write the last complete top-level object of ``input_path`` to ``output_path`` (gzip if .gz)."""
    source, target = os.fspath(input_path), os.fspath(output_path)
    refuse_overwriting_inputs(target, source)
    objects, end_of_last = _object_spans(source)
    if not objects:
        raise TraceFormatError(source, "holds no complete JSON object to keep")
    kept = objects[-1]
    with open_trace(source) as stream, atomic_text_output(target) as out:
        _copy_range(stream, out, kept)
    return RepairResult(source, target, kept, objects[:-1], end_of_last - kept.end)


def _object_spans(path: str) -> tuple[list[Span], int]:
    """Complete top-level objects, and the offset where non-blank content ends."""
    spans: list[Span] = []
    depth, start, base, last_content = 0, 0, 0, 0
    buf = b""
    with open_trace(path) as stream:
        while True:
            chunk = _read(stream, path)
            buf += chunk
            pos = 0
            while pos < len(buf):
                pos = _SKIP.match(buf, pos).end()  # type: ignore[union-attr]
                if pos >= len(buf) or buf[pos] == ord('"'):  # the end, or a string cut by it
                    break
                if buf[pos] == ord("{"):
                    if depth == 0:
                        start = base + pos
                    depth += 1
                elif depth:
                    depth -= 1
                    if depth == 0:
                        spans.append(Span(start, base + pos + 1))
                pos += 1
            if buf.strip():
                last_content = base + len(buf.rstrip())
            if not chunk:
                return spans, last_content
            base += pos
            buf = buf[pos:]


def _read(stream: IO[bytes], path: str) -> bytes:
    try:
        return stream.read(_CHUNK)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(path, f"cannot read (corrupt gzip data?): {exc}") from exc


def _copy_range(stream: IO[bytes], out: IO[str], span: Span) -> None:
    skipped = 0
    while skipped < span.start:
        skipped += len(stream.read(min(_CHUNK, span.start - skipped)))
    decoder = codecs.getincrementaldecoder("utf-8")()
    left = span.size
    while left > 0:
        data = stream.read(min(_CHUNK, left))
        if not data:
            break
        out.write(decoder.decode(data))
        left -= len(data)
    out.write(decoder.decode(b"", final=True))
