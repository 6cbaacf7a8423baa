"""Repair a host trace: keep the last complete JSON object of several, or salvage a cut-off one.

Seen when two ranks write the same file, or when the observer saves twice: ``{...}{...}``, perhaps
with a torn object at the end. Readers refuse such files; ``repair`` finds the top-level object
boundaries in one streaming, linear pass (a state machine over the bytes: in a string or not,
braces counted, each run of ordinary bytes skipped by a simple character-class pattern, so no
input makes it backtrack), then copies the bytes of the last complete object. Nothing is parsed
into objects, so memory stays at one chunk whatever the file size.

The scan finds candidates: objects whose braces balance and that are made of JSON's characters
(outside strings only blanks, brackets, commas, colons, numbers and the letters of ``true``,
``false``, ``null``, ``NaN`` and ``Infinity``; inside strings no control character and only
JSON's escapes), which rules out binary data and other encodings (UTF-16) at once. The last
candidate that is a trace (valid JSON, read by the converter's streaming reader, with a top-level
``nodes`` or ``traceEvents`` array) is kept, so a repaired file always reads.

A file with no complete object whose last object is still open is a trace cut off before the
observer closed it (its job was killed): ``salvage.py`` keeps every complete node of it.
"""

from __future__ import annotations

import codecs
import os
import re
from collections import deque
from dataclasses import dataclass, field
from typing import IO, cast

from .errors import TraceFormatError
from .io.output import OutputTarget, atomic_text_output, check_output
from .io.read import TraceFile, check_input, open_trace
from .jsonstream import JsonObjectStream
from .salvage import Salvaged, salvage

_CHUNK = 1 << 20
#: The complete objects kept as candidates (the last ones: the kept object is the last that
#: reads as a trace), and listed in the summary (the first ones): memory and the message stay
#: bounded however many objects a file holds.
_CANDIDATES = 1024
_SHOWN = 5
_OUTSIDE = rb"[ \t\n\r\[\],:0-9+\-.aefilnrstuyEIN]"  # what JSON allows outside strings but braces
_PLAIN = rb'[^"\\\x00-\x1f]'  # in a string: anything but its end, an escape, a control character
#: What lies between braces: JSON's characters and whole, well-formed strings. Written so that
#: there is one way to match (a string's plain runs are separated by escapes), hence no
#: backtracking; it stops at a brace, at anything else, or at a string it cannot finish here
#: (cut by the chunk's end, or malformed), which ``_Scanner`` then walks through by hand.
_SKIP = re.compile(rb"(?:" + _OUTSIDE + rb'+|"' + _PLAIN + rb'*(?:\\["\\/bfnrtu]' + _PLAIN + rb'*)*")*')
_IN_STRING = re.compile(_PLAIN + rb"*")
_ESCAPED = frozenset(b'"\\/bfnrtu')
_TRACE_ARRAYS = frozenset({"nodes", "traceEvents"})  # a host/merged trace, a Kineto trace
_OPEN, _CLOSE, _QUOTE, _BACKSLASH = b'{}"\\'
#: Objects this deep in an open one are candidates for a complete trace saved after a cut one
#: (it starts one level into the cut trace, or a few, where the cut fell inside a node).
_NESTED = 16
#: Where the cut fell inside a string, the scan is restarted at this many braces after the cut
#: trace's last complete element, within this many bytes of it.
_RESTARTS = 8
_RESTART_WINDOW = 1 << 20


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
    dropped: list[Span] = field(default_factory=list)  # the first few complete objects before the kept one
    trailing_bytes: int = 0  # an incomplete object (or garbage) after the kept one
    malformed: int = 0  # balanced objects skipped because they are not JSON traces
    dropped_count: int = -1  # how many complete objects precede the kept one (-1: len(dropped))
    salvaged: Salvaged | None = None  # a cut-off trace: its complete nodes were kept
    gzip_cut: bool = False  # the file's gzip data was cut: what it held before the cut was read
    cut_before: Span | None = None  # a trace cut off before the kept one (which was saved after it)

    @property
    def dropped_objects(self) -> int:
        return len(self.dropped) if self.dropped_count < 0 else self.dropped_count

    def describe(self) -> str:
        cut = "; the gzip data was cut off too: what it held before the cut was read" if self.gzip_cut else ""
        return self._describe() + cut

    def _describe(self) -> str:
        if self.salvaged is not None:
            return self.salvaged.describe()
        count = self.dropped_objects
        if self.cut_before is not None:
            return (
                f"kept the complete trace saved after a cut-off one ({self.kept.size} bytes at {self.kept.start}); "
                f"dropped the cut-off trace before it ({self.cut_before.size} bytes at {self.cut_before.start})"
                + (f" and {count:,} complete object(s) before that" if count else "")
            )
        parts = [f"kept object {count + 1} ({self.kept.size} bytes)"]
        if count:
            sizes = ", ".join(f"{s.size} bytes at {s.start}" for s in self.dropped[:_SHOWN])
            more = f", and {count - _SHOWN:,} more" if count > _SHOWN else ""
            parts.append(f"dropped {count:,} earlier complete object(s) ({sizes}{more})")
        if self.trailing_bytes:
            parts.append(f"dropped {self.trailing_bytes} trailing bytes of an incomplete object")
        if self.malformed:
            parts.append(f"skipped {self.malformed} object(s) that are not JSON traces")
        return "; ".join(parts)


def repair(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> RepairResult:
    """Write the last complete top-level object of ``input_path`` to ``output_path`` (gzip if .gz)."""
    source = os.fspath(input_path)
    check_input(source)
    target = check_output(output_path, source)
    scanner = _Scanner()
    with open_trace(source, cut_ok=True) as stream:
        while chunk := stream.read(_CHUNK):
            scanner.feed(chunk)
        gzip_cut = stream.cut
    candidates, malformed = list(scanner.spans), scanner.malformed
    before = scanner.count - len(candidates)  # complete objects no longer listed (only counted)
    while candidates and not _is_trace(source, candidates[-1]):
        candidates.pop()
        malformed += 1
    nested = _after_cut(source, scanner)
    if nested is not None:  # a trace cut off, then a complete one: the complete one, as after a complete one
        assert scanner.open_start is not None
        with open_trace(source, cut_ok=True) as stream, atomic_text_output(target) as out:
            _copy_range(stream, out, nested)
        cut = Span(scanner.open_start, nested.start)
        shown = scanner.first[:_SHOWN]
        complete = before + len(candidates)
        return RepairResult(
            source, target.path, nested, shown, 0, malformed, complete, cut_before=cut, gzip_cut=gzip_cut
        )
    if not candidates and not before and scanner.open_start is not None:
        salvaged = _salvage_cut_off(source, target, scanner.open_start)
        if salvaged is not None:
            return RepairResult(
                source,
                target.path,
                Span(salvaged.start, salvaged.end),
                [],
                salvaged.bytes_dropped,
                malformed,
                0,
                salvaged,
                gzip_cut,
            )
    if not candidates:
        where = f" among the last {_CANDIDATES:,} objects" if before else ""
        raise TraceFormatError(
            source,
            f"holds no complete JSON object to keep{where} (a trace: an object with a 'nodes' or 'traceEvents' array)",
        )
    kept = candidates[-1]
    with open_trace(source, cut_ok=True) as stream, atomic_text_output(target) as out:
        _copy_range(stream, out, kept)
    shown = scanner.first[:_SHOWN] if before else candidates[:-1][:_SHOWN]
    return RepairResult(
        source,
        target.path,
        kept,
        shown,
        scanner.last_content - kept.end,
        malformed,
        before + len(candidates) - 1,
        gzip_cut=gzip_cut,
    )


def _after_cut(source: str, scanner: _Scanner) -> Span | None:
    """A complete trace that ends the file after a cut-off one (a save cut, then a whole save), or
    None. The scan reads it as nested in the cut one, unless the cut fell inside a string: then
    the scan is restarted at each of the first few braces after the cut one's last complete
    element (one of them starts the complete trace)."""
    start = scanner.open_start
    if start is None:
        return None
    nested = scanner.last_nested
    if nested is not None and nested.end == scanner.last_content and _is_trace(source, nested):
        return nested
    element = scanner.last_element if scanner.last_element > start else start + 1
    found = _restarted(source, element, scanner.last_content)
    return found if found is not None and _is_trace(source, found) else None


def _restarted(source: str, offset: int, end: int) -> Span | None:
    """The first object that ends at ``end`` among those the first ``_RESTARTS`` braces after
    ``offset`` start (within ``_RESTART_WINDOW`` bytes), each scanned as a file of its own. A scan
    stops as soon as its object ends elsewhere: only those still open cost a pass over the rest."""
    scanners: list[_Scanner] = []
    started = 0
    with open_trace(source, cut_ok=True) as stream:
        stream.seek(offset)
        base = offset
        while chunk := stream.read(_CHUNK):
            for scanner in scanners:
                scanner.feed(chunk)
            at = 0
            while started < _RESTARTS and (at := chunk.find(b"{", at)) >= 0 and base + at < offset + _RESTART_WINDOW:
                scanner = _Scanner()
                scanner._base = base + at
                scanner.feed(chunk[at:])
                scanners.append(scanner)
                started += 1
                at += 1
            scanners = [s for s in scanners if not s.malformed and (not s.count or s.first[0].end == end)]
            if not scanners and started >= _RESTARTS:
                return None
            base += len(chunk)
    return next((s.first[0] for s in scanners if s.count), None)


class _NothingToSalvage(Exception):
    """Raised inside the output's block so that nothing is written."""


def _salvage_cut_off(source: str, target: OutputTarget, start: int) -> Salvaged | None:
    """The complete nodes of the open object at ``start``, written to ``target``; None (and nothing
    written) when it holds none."""
    try:
        with open_trace(source, cut_ok=True) as stream, atomic_text_output(target) as out:
            result = salvage(stream, start, out)
            if result is None:
                raise _NothingToSalvage
    except _NothingToSalvage:
        return None
    except UnicodeDecodeError:
        return None
    return result


def _is_trace(path: str, span: Span) -> bool:
    """Whether the bytes of ``span`` are one JSON object with a ``nodes`` or ``traceEvents``
    array: read as the converter reads a file, array elements one at a time."""
    try:
        part = cast(IO[bytes], open_trace(path, (span.start, span.end), cut_ok=True))
        with JsonObjectStream(path, _TRACE_ARRAYS, source=part) as stream:
            found = False
            for key, value in stream.items():
                if key in _TRACE_ARRAYS:
                    found = True
                    for _ in value:  # every element must decode
                        pass
            return found
    except TraceFormatError:
        return False


class _Scanner:
    """The top-level objects of a byte stream fed chunk by chunk; every state carries over the
    chunks' boundaries (a string, an escape, an object may be cut anywhere)."""

    def __init__(self) -> None:
        self.spans: deque[Span] = deque(maxlen=_CANDIDATES)  # the last complete, well-formed objects
        self.first: list[Span] = []  # the first few of them (for the summary)
        self.count = 0  # how many there were
        self.malformed = 0
        self.last_content = 0  # where non-blank content ends
        self.open_start: int | None = None  # where the object still open at the end starts
        self._base = 0  # offset of the current chunk
        self._depth = 0
        self._start = 0
        self._well_formed = True
        self._in_string = False
        self._escape = False  # the chunk ended right after a backslash
        self._starts: list[int] = []  # where the open objects start, for the first _NESTED levels
        #: the last object closed inside one still open: a complete trace saved after a cut one
        #: reads as nested in it
        self.last_nested: Span | None = None
        self.last_element = 0  # where the last object closed one level into a top-level one ends

    def feed(self, chunk: bytes) -> None:
        pos, size = 0, len(chunk)
        if self._escape:
            self._escape = False
            self._well_formed &= chunk[0] in _ESCAPED
            pos = 1
        while pos < size:
            if self._in_string:
                pos = _IN_STRING.match(chunk, pos).end()  # type: ignore[union-attr]
                if pos == size:
                    break
                byte = chunk[pos]
                if byte == _QUOTE:
                    self._in_string = False
                elif byte == _BACKSLASH:
                    if pos + 1 == size:
                        self._escape = True
                    else:
                        self._well_formed &= chunk[pos + 1] in _ESCAPED
                        pos += 1
                else:  # a control character: not allowed in a JSON string
                    self._well_formed = False
            else:
                pos = _SKIP.match(chunk, pos).end()  # type: ignore[union-attr]
                if pos == size:
                    break
                self._structural(chunk[pos], pos)
            pos += 1
        if chunk.strip():
            self.last_content = self._base + len(chunk.rstrip())
        self._base += size

    def _structural(self, byte: int, pos: int) -> None:
        if byte == _QUOTE:
            self._in_string = True
        elif byte == _OPEN:
            if self._depth == 0:
                self._start, self._well_formed = self._base + pos, True
                self.open_start = self._start
            if self._depth < _NESTED:
                self._starts.append(self._base + pos)
            self._depth += 1
        elif byte == _CLOSE and self._depth:
            self._depth -= 1
            if self._depth < _NESTED:
                start = self._starts.pop()
                if self._depth:
                    self.last_nested = Span(start, self._base + pos + 1)
                if self._depth == 1:
                    self.last_element = self._base + pos + 1
            if self._depth == 0:
                self.open_start = None
                if self._well_formed:
                    span = Span(self._start, self._base + pos + 1)
                    self.spans.append(span)
                    self.count += 1
                    if len(self.first) < _SHOWN:
                        self.first.append(span)
                else:
                    self.malformed += 1
        else:  # not JSON text (or a stray '}' between objects)
            self._well_formed = False


def _copy_range(stream: TraceFile, out: IO[str], span: Span) -> None:
    """Copy the bytes of ``span``, which must be UTF-8 text, as found in the first pass."""
    skipped = 0
    while skipped < span.start:
        data = stream.read(min(_CHUNK, span.start - skipped))
        if not data:
            raise TraceFormatError(stream.path, "changed while it was repaired (it is shorter now)")
        skipped += len(data)
    decoder = codecs.getincrementaldecoder("utf-8")()
    left = span.size
    try:
        while left > 0:
            data = stream.read(min(_CHUNK, left))
            if not data:
                raise TraceFormatError(stream.path, "changed while it was repaired (it is shorter now)")
            out.write(decoder.decode(data))
            left -= len(data)
        out.write(decoder.decode(b"", final=True))
    except UnicodeDecodeError:
        raise TraceFormatError(stream.path, "the object to keep is not UTF-8 text (binary data?)") from None
