"""Streaming reader for one top-level JSON object whose big arrays must not be held in memory.

Why not ``json.load``: it holds the whole document (a 3.4 GB trace needs ~11 GB). Why not ijson's
C backend: it rejects ``NaN``/``Infinity``, integers >= 2**63 and floats that overflow, all of which
``json.load`` (and so the reference converter) accepts. It also cannot report where an array ends,
so metadata that follows ``nodes`` would need a second full pass, and on a 252k-node trace it parses
nodes 15% slower than this reader. Here the standard library's C scanner
(``JSONDecoder.raw_decode``) decodes one array element at a time out of a sliding text buffer. The
grammar is exactly ``json.load``'s, so values (and their ``str()``) match the reference bit for bit.

Only top-level keys named in ``stream_keys`` are streamed; every other top-level value is decoded
whole (they are small: schema, pid, timestamps, distributed info).

A streamed array's elements may also be decoded many at a time by a ``batch`` decoder (the
converter's ``nodesource``): from an element start this reader knows (the array's first element,
or the end of the previous batch or element), it takes the text up to a likely element boundary
(``}, {"id":`` for trace nodes, the same guess as ``convert.parallel``'s split) and hands ``[`` + text + ``]`` to
the decoder, which returns the elements (yielded together, as a ``DecodedRun``) or None. A batch
is accepted only if that text is a sequence of complete values, so its end is a real boundary;
if the decoder refuses, those elements are decoded here one by one, exactly as without it.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import sys
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from .errors import TraceFormatError
from .io.read import TraceFile, open_trace

#: False where Python's json C accelerator is missing (some alternative builds): the pure-Python
#: scanner then parses several times slower, and the CLI says so.
C_SCANNER = json.decoder.c_scanstring is not None  # type: ignore[attr-defined]
#: Where a file ends too early: the trace of a job killed before its observer closed the file.
_CUT_OFF_HINT = " (cut off before its end? the repair command keeps its complete nodes)"
#: A Kineto trace (``traceEvents``) is written whole when the profiler exports it: repair, which
#: salvages a host trace node by node, cannot help one cut off.
_KINETO_CUT_OFF_HINT = (
    " (cut off before its end? the profiler writes a Kineto trace whole at its export: export or copy it again)"
)
_WS = re.compile(r"[ \t\n\r]*")
_CHUNK_BYTES = 1 << 20
#: Refill before decoding when less than this is buffered: a value cut by the buffer's end makes
#: the scanner fail, and building its JSONDecodeError counts the newlines of the whole buffer.
_LOOKAHEAD = 1 << 16
#: A value that fails to decode, or that ends, this close to the buffer's end may go on in the
#: next chunk (``-Infinit`` fails 8 characters before the end; ``1e+`` decodes as ``1``): the
#: buffer is refilled and the value decoded again. An error further from the end is an error in
#: the file, reported without reading any more.
_CUT_MARGIN = 16
#: A batch ends at the first likely element boundary this many characters after its start.
BATCH_CHARS = 1 << 18
#: Likely boundaries between two trace nodes (writers put "id" first) and two Kineto events ("ph").
NODE_BOUNDARY = re.compile(r'\}\s*,\s*\{\s*"id"\s*:')
EVENT_BOUNDARY = re.compile(r'\}\s*,\s*\{\s*"ph"\s*:')
#: After refused batches the next one waits (BATCH_CHARS << refusals in a row) / 4, up to this many.
_BATCH_BACKOFF_LIMIT = 7
_BLANK = " \t\n\r"
#: Decodes ``[`` + a run of elements + ``]``, or returns None (then the elements are decoded here).
BatchDecoder = Callable[[str], "list[Any] | None"]
_CONCATENATED_HINT = (
    "the file holds several concatenated JSON documents (seen when two ranks, or two saves of the "
    "execution trace observer, write the same file); `chakra-convert-fast repair INPUT OUTPUT` keeps the "
    "last complete object"
)


class DecodedRun(list[Any]):
    """Elements of a streamed array decoded together by the batch decoder, yielded as one item."""


class JsonObjectStream:
    """Iterate ``(key, value)`` over a file's top-level JSON object, streaming selected arrays.

    For a key in ``stream_keys`` the value is an iterator over the array's elements (and over
    ``DecodedRun`` lists of them, with a batch decoder); it must be consumed before the next pair is
    requested (whatever is left is skipped).
    ``bytes_read``/``total_bytes`` follow the underlying file, for progress bars.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        stream_keys: frozenset[str] | set[str] = frozenset(),
        *,
        stops: Sequence[int] = (),
        batch: BatchDecoder | None = None,
        boundary: re.Pattern[str] = NODE_BOUNDARY,
        source: IO[bytes] | None = None,
        byte_range: tuple[int, int] | None = None,
    ):
        """``stops``: byte offsets in the file's content where a streamed array is cut off if an
        element starts exactly there (split points handed to other processes); ``stopped_at``
        tells which one, if any. ``batch``: decodes runs of elements of streamed arrays (see the
        module docstring), which end where ``boundary`` matches. ``source``: read this content (a
        part of the file, already open; it is closed with the stream) instead of opening ``path``,
        which then only names it. ``byte_range``: read only those bytes of the file's content
        (one object among several)."""
        self.path = os.fspath(path)
        self.stream_keys = frozenset(stream_keys)
        self.stopped_at: int | None = None
        self._byte_stops = deque(sorted(stops))  # not yet reached by the buffer
        self._stops: deque[tuple[int, int]] = deque()  # (character, byte) of those the buffer reached
        self._fed = 0  # bytes of content handed to the UTF-8 decoder
        #: The file (the project's opener: gzip and OS errors are TraceFormatErrors), or a source.
        self._file: TraceFile | None = None if source is not None else open_trace(self.path, byte_range)
        self._source: IO[bytes] | None = source
        self.total_bytes = self._file.size if self._file is not None else 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._decode = json.JSONDecoder().raw_decode
        self._buf = ""
        self._pos = 0
        self._base = 0  # characters discarded before _buf[0], for absolute positions in errors
        self._eof = False
        self._read_size = _CHUNK_BYTES
        self._batch = batch
        self._boundary = boundary
        self._batch_from = 0  # no batch before this character (after refusals)
        self._batch_refusals = 0

    # -- context management ---------------------------------------------------------------
    def __enter__(self) -> JsonObjectStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._source is not None:
            self._source.close()

    @property
    def bytes_read(self) -> int:
        """Bytes of the file read (of its content, with a source given)."""
        return self._file.position if self._file is not None else self._fed

    @property
    def position(self) -> int:
        """Characters before the cursor (an element's start, after ``stopped_at``)."""
        return self._base + self._pos

    @property
    def _cut_off_hint(self) -> str:
        kineto = "traceEvents" in self.stream_keys and "nodes" not in self.stream_keys
        return _KINETO_CUT_OFF_HINT if kineto else _CUT_OFF_HINT

    # -- opening and buffering ------------------------------------------------------------
    def _fail(self, problem: str) -> TraceFormatError:
        return TraceFormatError(self.path, problem)

    def _read_bytes(self, size: int) -> bytes:
        if self._file is not None:
            return self._file.read(size)
        assert self._source is not None
        try:
            return self._source.read(size)
        except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise self._fail(f"cannot read (corrupt or truncated gzip data?): {exc}") from exc

    def _fill(self) -> None:
        """Append the next chunk of text to the buffer, dropping what has been consumed."""
        pending = self._decoder.getstate()[0] if self._byte_stops else b""
        data = self._read_bytes(self._read_size)
        final = not data
        try:
            text = self._decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise self._fail("is not UTF-8 text (binary data?)") from exc
        if self._byte_stops:
            self._locate_stops(pending, data)
        self._fed += len(data)
        self._base += self._pos
        self._buf = self._buf[self._pos :] + text
        self._pos = 0
        self._eof = final

    def _locate_stops(self, pending: bytes, data: bytes) -> None:
        """The characters where the stops in ``data`` (just read) are: what precedes a stop in
        the text is the decoder's pending bytes and ``data`` up to the stop (a stop is a '{',
        never inside a character)."""
        chars = self._base + len(self._buf)  # characters before this chunk's text
        ascii_only = not pending and data.isascii()
        while self._byte_stops and self._byte_stops[0] < self._fed + len(data):
            stop = self._byte_stops.popleft()
            if stop < self._fed:
                continue  # before this chunk: passed over already
            head = data[: stop - self._fed]
            try:
                at = chars + (len(head) if ascii_only else len((pending + head).decode("utf-8")))
            except UnicodeDecodeError:
                continue  # not where a character starts: no element starts there
            self._stops.append((at, stop))

    def _at(self, what: str) -> str:
        return f"{what} at character {self._base + self._pos}"

    def _skip_ws(self) -> None:
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or self._eof:
                return
            self._fill()

    def _peek(self) -> str:
        """The next non-blank character, or '' at the end of the file."""
        self._skip_ws()
        return self._buf[self._pos] if self._pos < len(self._buf) else ""

    def _expect(self, char: str, context: str) -> None:
        found = self._peek()
        if found != char:
            raise self._fail(self._unexpected(found, f"expected '{char}' {context}"))
        self._pos += 1

    def _unexpected(self, found: str, expectation: str) -> str:
        if not found:
            return f"truncated JSON: the file ends where {expectation}{self._cut_off_hint}"
        return self._at(f"invalid JSON: {expectation}, found {found!r}")

    # -- values ---------------------------------------------------------------------------
    def _value(self) -> Any:
        """Decode one complete JSON value at the cursor, refilling the buffer only while the value
        runs into the buffer's end."""
        failures = 0
        self._skip_ws()
        if len(self._buf) - self._pos < _LOOKAHEAD and not self._eof:
            self._fill()
        while True:
            try:
                value, end = self._decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._eof or not self._may_be_cut(exc):
                    raise self._decode_error(exc) from None
                failures += 1
                self._read_size = _CHUNK_BYTES << min(failures, 10)  # a huge value: read faster
                self._fill()
                continue
            except RecursionError:  # the scanner recurses once per level of nesting
                raise self._fail(
                    self._at("JSON nested too deeply to read (arrays or objects inside each other, hundreds of levels)")
                ) from None
            except ValueError:  # int(): Python's limit on the digits of a number it converts
                raise self._fail(
                    self._at(
                        f"a number too long to read (an integer of more than {sys.get_int_max_str_digits():,} digits)"
                    )
                ) from None
            if end > len(self._buf) - _CUT_MARGIN and not self._eof:  # a number may go on ("1" of "1e+5")
                self._fill()
                continue
            self._pos = end
            self._read_size = _CHUNK_BYTES
            return value

    def _may_be_cut(self, exc: json.JSONDecodeError) -> bool:
        """Whether the scanner failed only because the value goes on after the buffer's end: a
        string open until the end, or a failure right at the end."""
        return exc.msg.startswith("Unterminated") or exc.pos >= len(self._buf) - _CUT_MARGIN

    def _decode_error(self, exc: json.JSONDecodeError) -> TraceFormatError:
        if exc.pos >= len(self._buf) - 1 or exc.msg.startswith("Unterminated"):
            return self._fail(f"truncated JSON: the file ends in the middle of a value{self._cut_off_hint}")
        return self._fail(f"invalid JSON at character {self._base + exc.pos}: {exc.msg}")

    def _array(self) -> Iterator[Any]:
        """Yield the elements of the array whose '[' was just consumed (or from an element on)."""
        if self._peek() == "]":
            self._pos += 1
            return
        stops = self._stops
        while True:
            if stops or self._byte_stops:
                self._skip_ws()
                here = self._base + self._pos
                while stops and stops[0][0] < here:
                    stops.popleft()  # the split point was inside a value: not a boundary
                if stops and stops[0][0] == here:
                    self.stopped_at = stops[0][1]
                    return
            batch = self._next_batch() if self._batch is not None else None
            yield self._value() if batch is None else batch
            found = self._peek()
            self._pos += 1
            if found == "]":
                return
            if found != ",":
                self._pos -= 1
                raise self._fail(self._unexpected(found, "expected ',' or ']' in an array"))

    def _next_batch(self) -> DecodedRun | None:
        """The elements from the cursor (an element start) to a likely boundary, decoded by the
        batch decoder, with the cursor moved past them; None to decode one element here."""
        self._skip_ws()
        if self._base + self._pos < self._batch_from:
            return None
        if len(self._buf) - self._pos < 2 * BATCH_CHARS and not self._eof:
            self._fill()
        end = self._batch_end()
        if end < 0:  # no boundary in the buffer: not before more text comes (each search scans it all)
            self._batch_from = self._base + len(self._buf)
            return None
        decoded = self._batch("[" + self._buf[self._pos : end] + "]")  # type: ignore[misc]
        if decoded is None:  # decode these here; refused again and again, batch less and less
            self._batch_refusals = min(self._batch_refusals + 1, _BATCH_BACKOFF_LIMIT)
            self._batch_from = self._base + end + ((BATCH_CHARS << self._batch_refusals) >> 2)
            return None
        self._batch_refusals = 0
        self._pos = end
        return DecodedRun(decoded)

    def _batch_end(self) -> int:
        """Where a batch from the cursor should end (just after an element's '}'), or -1: at
        the first likely boundary ``BATCH_CHARS`` on (the last one, near the end of the text),
        or at the next stop if that comes first."""
        buf, pos = self._buf, self._pos
        found = self._boundary.search(buf, pos + BATCH_CHARS)
        if found is None and self._eof:  # near the end: every element but the last
            for found in self._boundary.finditer(buf, pos + 1):  # noqa: B007 - the last one is kept
                pass
        if self._stops:
            stop = self._stops[0][0] - self._base
            if found is None or found.start() >= stop:
                return self._element_end_before(stop)
        return -1 if found is None else found.start() + 1

    def _element_end_before(self, stop: int) -> int:
        """Just after the '}' that precedes ``stop`` across a comma (and blank space), or -1."""
        start = max(self._pos, stop - 256)
        head = self._buf[start:stop].rstrip(_BLANK)
        if not head.endswith(","):
            return -1
        head = head[:-1].rstrip(_BLANK)
        if not head.endswith("}"):
            return -1
        return start + len(head)

    # -- the top-level object -------------------------------------------------------------
    def items(self) -> Iterator[tuple[str, Any]]:
        """Yield the top-level ``(key, value)`` pairs in file order, then check nothing follows."""
        first = self._peek()
        if not first:
            raise self._fail("file is empty" if self.total_bytes == 0 else "file holds only blank space")
        if first != "{":
            raise self._fail(self._at(f"expected a JSON object at the top level, found {first!r}"))
        self._pos += 1
        if self._peek() == "}":
            self._pos += 1
        else:
            yield from self._members(set())
        if self.stopped_at is None:
            self._check_end()

    def items_from(
        self, byte_offset: int | None, key: str, char_offset: int = 0, seen: frozenset[str] = frozenset()
    ) -> Iterator[tuple[str, Any]]:
        """Like ``items``, starting at ``byte_offset`` (None: where the source is) at an element
        of the streamed array ``key``, ``char_offset`` characters into the text (for positions
        in errors); ``seen``: the top-level keys before ``key``, if known. The first pair is
        ``(key, rest of the array)``; the members after it follow. Used to read a large file in
        parts, each in its own process.
        """
        if byte_offset is not None:
            if self._file is not None:
                self._file.seek(byte_offset)
            elif self._source is not None:
                self._source.seek(byte_offset)
            self._fed = byte_offset
        self._base = char_offset
        yield key, self._array()
        if self.stopped_at is not None:
            return
        if self._close_member():
            yield from self._members({key, *seen})
        self._check_end()

    def detach(self) -> tuple[bytes, TraceFile | IO[bytes], int]:
        """Hand over what follows the cursor, instead of reading on: call it when a streamed
        array's iterator has just been received, unstarted. Returns the content already read but
        not consumed, the source to read the rest from (the stream no longer does), and how many
        characters precede the cursor. Only ``close`` may follow."""
        read_ahead = self._buf[self._pos :].encode("utf-8") + self._decoder.getstate()[0]
        position = self._base + self._pos
        source: TraceFile | IO[bytes] | None = self._file if self._file is not None else self._source
        assert source is not None
        self._file, self._source = None, io.BytesIO()
        self._buf, self._pos, self._eof = "", 0, True
        return read_ahead, source, position

    def _check_end(self) -> None:
        if self._peek():
            raise self._fail(self._at(f"extra data after the top-level JSON object: {_CONCATENATED_HINT}"))

    def _members(self, seen: set[str]) -> Iterator[tuple[str, Any]]:
        while True:
            if self._peek() != '"':
                raise self._fail(self._unexpected(self._peek(), "expected a key string"))
            key = self._value()
            if key in seen:
                raise self._fail(f"duplicate top-level key {key!r}")
            seen.add(key)
            self._expect(":", f"after key {key!r}")
            if key in self.stream_keys:
                self._expect("[", f"to open the array {key!r}")
                elements = self._array()
                yield key, elements
                for _ in elements:  # skip whatever the consumer left
                    pass
                if self.stopped_at is not None:
                    return
            else:
                yield key, self._value()
            if not self._close_member():
                return

    def _close_member(self) -> bool:
        """Consume the ',' (True: another member follows) or '}' (False) after a member."""
        found = self._peek()
        self._pos += 1
        if found == "}":
            return False
        if found != ",":
            self._pos -= 1
            raise self._fail(self._unexpected(found, "expected ',' or '}' after a top-level value"))
        return True
