"""``jsonize``: a ``.et`` file as JSON, streamed record by record in flat memory.

Every record is printed with protobuf's JSON mapping, as ``google.protobuf.json_format`` does it
(``MessageToJson``, which ``chakra_jsonizer`` calls): lowerCamelCase field names in field-number
order, fields at their default value left out (but a set ``oneof`` member or message field always
printed), 64-bit integers as strings, enums by name, bytes in base64, float32 values in their
shortest round-tripping form, ``NaN``/``Infinity`` as strings, non-ASCII escaped. Three layouts:

* ``document`` (default): one JSON document, ``{"globalMetadata": {...}, "nodes": [...]}``, one
  node a line;
* ``lines``: the GlobalMetadata object on the first line, then one node object a line;
* ``chakra``: exactly ``chakra_jsonizer``'s bytes: every record indented by 2, concatenated
  (``}{``: not one JSON document), no final newline.

Attributes and IOInfo messages repeat across nodes (the same bytes in most nodes): their text is
remembered by their encoded bytes in a bounded memo, so most of a node is one dictionary lookup.
"""

from __future__ import annotations

import base64
import math
import os
import struct
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote
from typing import IO, Any, cast

from .._types import Progress
from ..errors import ConverterError, TraceFormatError
from ..et.decode import Malformed, delimited_records, varint_at
from ..et.records import EtNode, EtRecords, MetadataRecord, attribute, decode_node, io_info
from ..et.wire import BoundedCache
from ..io.output import atomic_output, check_output
from ..io.read import GZIP_MAGIC, check_input, open_trace
from ..io.spill import SpillFile
from ..schema.chakra import NodeType
from ..workers import default_jobs, fork_available, run_all

LAYOUTS = ("document", "lines", "chakra")
_NODE_TYPES = {t.value: t.name for t in NodeType}
_INT64_KINDS = frozenset({"int64", "uint64", "sint64", "fixed64", "sfixed64"})
_WRITE_BATCH = 1 << 18  # characters gathered before a write


@dataclass(frozen=True, slots=True)
class JsonizeResult:
    output_path: str
    nodes: int
    layout: str


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _shortest_float32(value: float) -> float:
    """protobuf's ``ToShortestFloat``: the fewest significant digits that give the same float32."""
    precision = 6
    rounded = float(f"{value:.{precision}g}")
    while struct.unpack("<f", struct.pack("<f", rounded))[0] != value:
        precision += 1
        rounded = float(f"{value:.{precision}g}")
    return rounded


def _number(value: float, float32: bool) -> str:
    if math.isinf(value):
        return '"-Infinity"' if value < 0 else '"Infinity"'
    if math.isnan(value):
        return '"NaN"'
    return float.__repr__(_shortest_float32(value) if float32 else value)


def _scalar_text(base: str, value: Any) -> str:
    if base in _INT64_KINDS:
        return f'"{value}"'
    if base == "bool":
        return "true" if value else "false"
    if base == "string":
        return _quote(value)
    if base == "bytes":
        return f'"{base64.b64encode(value).decode("ascii")}"'
    if base in ("double", "float"):
        return _number(value, base == "float")
    return str(value)


def _io_fields(raw: bytes) -> tuple[str, str, str] | None:
    """An IOInfo of the usual shape (values, shapes, types in field order, each at most once,
    lengths below 16,384), or None: ``io_info`` then decodes it in full."""
    out = ["", "", ""]
    pos, end, want = 0, len(raw), 0x0A
    try:
        while pos < end:
            key = raw[pos]
            if key < want or key not in (0x0A, 0x12, 0x1A):
                return None
            length = raw[pos + 1]
            if length < 0x80:
                pos += 2
            else:
                second = raw[pos + 2]
                if second >= 0x80:
                    return None
                length = (length & 0x7F) | (second << 7)
                pos += 3
            stop = pos + length
            if stop > end:
                return None
            out[(key >> 3) - 1] = raw[pos:stop].decode("utf-8")
            pos, want = stop, key + 8
    except (IndexError, UnicodeDecodeError):
        return None
    return out[0], out[1], out[2]


class Layout:
    """How objects and arrays are laid out: ``indent`` 2 (``chakra_jsonizer``'s) or compact."""

    def __init__(self, indent: bool) -> None:
        self.indent = indent

    def obj(self, items: list[tuple[str, str]], level: int) -> str:
        """An object of (key, value text) at nesting ``level``; values already laid out for ``level + 1``."""
        if not items:
            return "{}"
        if not self.indent:
            return "{" + ", ".join(f'"{k}": {v}' for k, v in items) + "}"
        pad = "\n" + "  " * (level + 1)
        return "{" + pad + ("," + pad).join(f'"{k}": {v}' for k, v in items) + "\n" + "  " * level + "}"

    def arr(self, values: list[str], level: int) -> str:
        if not values:
            return "[]"
        if not self.indent:
            return "[" + ", ".join(values) + "]"
        pad = "\n" + "  " * (level + 1)
        return "[" + pad + ("," + pad).join(values) + "\n" + "  " * level + "]"


class Printer:
    """Records to JSON text in one layout; attribute and IOInfo texts memoized by their bytes."""

    def __init__(self, indent: bool) -> None:
        self.layout = Layout(indent)
        self._attrs: BoundedCache[str] = BoundedCache(1 << 16)
        self._ios: BoundedCache[str] = BoundedCache(1 << 14)
        self._int64_prefixes: BoundedCache[str] = BoundedCache(1 << 12)
        self._int64_close = "\n    }" if indent else "}"
        self._types = {value: f'"type": "{name}"' for value, name in _NODE_TYPES.items()}
        if indent:
            self._node_open, self._node_sep, self._node_close = "{\n  ", ",\n  ", "\n}"
            self._deps_open, self._deps_sep, self._deps_close = '[\n    "', '",\n    "', '"\n  ]'
            self._attr_open, self._attr_sep, self._attr_close = "[\n    ", ",\n    ", "\n  ]"
        else:
            self._node_open, self._node_sep, self._node_close = "{", ", ", "}"
            self._deps_open, self._deps_sep, self._deps_close = '["', '", "', '"]'
            self._attr_open, self._attr_sep, self._attr_close = "[", ", ", "]"

    def attr(self, raw: bytes) -> str:
        found = self._attrs.get(raw)
        if found is not None:
            return found
        # a named int64 value (rf_id, seq_id, ...: unique per node, so not worth remembering):
        # the name part's text is remembered, the value printed
        size = len(raw)
        if size > 3 and raw[0] == 0x0A and raw[1] < 0x80 and raw[1] + 3 < size and raw[raw[1] + 2] == 0x48:
            start = raw[1] + 3
            value, end = varint_at(raw, start)
            if end == size and 2 <= end - start <= 9:  # from 128 to 2**63: ids and the like
                name_part = raw[:start]
                prefix = self._int64_prefixes.get(name_part)
                if prefix is None:
                    prefix = self._int64_prefixes.remember(name_part, self._int64_prefix(name_part))
                if prefix:
                    return f'{prefix}"{value}"{self._int64_close}'
        return self._attrs.remember(raw, self._attr_text(raw))

    def _int64_prefix(self, name_part: bytes) -> str:
        """The text of an int64 attribute named by ``name_part`` up to its value ("" if the name
        does not decode: the general path then says why)."""
        try:
            text = self._attr_text(name_part + b"\x00")
        except Malformed:
            return ""
        return text[: text.rindex('"0"')]

    def _attr_text(self, raw: bytes) -> str:
        a = attribute(raw)
        items: list[tuple[str, str]] = []
        if a.name:
            items.append(("name", _quote(a.name)))
        if a.doc_string:
            items.append(("docString", _quote(a.doc_string)))
        if a.kind is not None:
            base, _, shape = a.kind.rpartition("_")
            if shape == "val":
                items.append((_camel(a.kind), _scalar_text(base, a.value)))
            else:
                values = [_scalar_text(base, v) for v in a.value]
                inner = [("values", self.layout.arr(values, 4))] if values else []
                items.append((_camel(a.kind), self.layout.obj(inner, 3)))
        return self.layout.obj(items, 2)

    def io(self, raw: bytes) -> str:
        found = self._ios.get(raw)
        if found is not None:
            return found
        fields = _io_fields(raw) or io_info(raw)
        items = [(k, _quote(v)) for k, v in zip(("values", "shapes", "types"), fields, strict=True) if v]
        return self._ios.remember(raw, self.layout.obj(items, 1))

    def node(self, node: EtNode) -> str:
        # the object of Layout.obj, written out: this runs once per node
        items: list[str] = []
        add = items.append
        if node.id:
            add(f'"id": "{node.id}"')
        if node.name:
            add('"name": ' + _quote(node.name))
        if node.type:
            add(self._types.get(node.type) or f'"type": {node.type}')
        if node.ctrl_deps:
            add('"ctrlDeps": ' + self._deps_open + self._deps_sep.join(map(str, node.ctrl_deps)) + self._deps_close)
        if node.data_deps:
            add('"dataDeps": ' + self._deps_open + self._deps_sep.join(map(str, node.data_deps)) + self._deps_close)
        if node.start_time_micros:
            add(f'"startTimeMicros": "{node.start_time_micros}"')
        if node.duration_micros:
            add(f'"durationMicros": "{node.duration_micros}"')
        if node.inputs is not None:
            add('"inputs": ' + self.io(node.inputs))
        if node.outputs is not None:
            add('"outputs": ' + self.io(node.outputs))
        if node.attr:
            attrs = self._attrs
            texts = [attrs.get(raw) or self.attr(raw) for raw in node.attr]
            add('"attr": ' + self._attr_open + self._attr_sep.join(texts) + self._attr_close)
        if not items:
            return "{}"
        return self._node_open + self._node_sep.join(items) + self._node_close

    def metadata(self, record: MetadataRecord) -> str:
        items: list[tuple[str, str]] = []
        if record.version:
            items.append(("version", _quote(record.version)))
        if record.attr:
            items.append(("attr", self.layout.arr([self.attr(raw) for raw in record.attr], 1)))
        return self.layout.obj(items, 0)


def jsonize(
    input_path: str,
    output_path: str,
    layout: str = "document",
    progress: Progress | None = None,
    jobs: int | None = None,
) -> JsonizeResult:
    """Write ``input_path`` (a ``.et``, plain or gzipped) as JSON in ``layout`` (see the module);
    a large plain file is printed by ``jobs`` processes (default: the CPUs), a byte range each."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    check_input(input_path)
    target = check_output(output_path, input_path)
    with EtRecords(input_path) as records:
        printer = Printer(indent=layout == "chakra")
        try:
            head = printer.metadata(records.metadata)
        except Malformed as exc:
            raise TraceFormatError(records.path, f"the GlobalMetadata record does not decode: {exc}") from None
        parts = split_records(input_path, default_jobs() if jobs is None else jobs)
        frame = _Frame(layout, head)
        with atomic_output(target) as out:
            if parts:
                nodes = _write_parts(input_path, parts, frame, out, target.work_dir, progress)
            else:
                nodes = _write(records, printer, frame, out, progress)
    return JsonizeResult(output_path, nodes, layout)


class _Frame:
    """What goes around and between the node texts of a layout."""

    def __init__(self, layout: str, head: str) -> None:
        self.layout = layout
        if layout == "document":
            self.head, self.separator, self.first, self.tail = (
                '{"globalMetadata": ' + head + ',\n"nodes": [',
                ",\n",
                "\n",
                "\n]}\n",
            )
        elif layout == "lines":
            self.head, self.separator, self.first, self.tail = head + "\n", "\n", "", "\n"
        else:
            self.head, self.separator, self.first, self.tail = head, "", "", ""

    def end(self, count: int) -> str:
        return "]}\n" if count == 0 and self.layout == "document" else self.tail


def _write(records: EtRecords, printer: Printer, frame: _Frame, out: IO[bytes], progress: Progress | None) -> int:
    out.write(frame.head.encode("ascii"))
    count = _print_nodes(
        records.raw_nodes(),
        printer,
        frame,
        out.write,
        records.malformed,
        lambda: progress("read", records.position, records.size) if progress else None,
    )[0]
    out.write(frame.end(count).encode("ascii"))
    if progress is not None:
        progress("read", records.size, records.size)
    return count


def _print_nodes(
    raw: Iterator[tuple[int, int, bytes]],
    printer: Printer,
    frame: _Frame,
    write: Callable[[bytes], object],
    malformed: Callable[[int, int, Exception], Exception],
    tick: Callable[[], object],
) -> tuple[int, bool]:
    """Print every node of ``raw``, the first preceded by ``frame.first``, the others by the
    separator; returns (nodes, whether a 0-byte record ended the trace in the chakra layout)."""
    node_text, stop_at_empty = printer.node, frame.layout == "chakra"
    batch: list[str] = []
    count = size = 0
    for number, offset, message in raw:
        if stop_at_empty and not message:  # chakra_jsonizer's reader takes a 0-byte record for the end
            write("".join(batch).encode("ascii"))
            return count, True
        try:
            text = node_text(decode_node(message))
        except Malformed as exc:
            raise malformed(number, offset, exc) from None
        batch.append((frame.separator if count else frame.first) + text)
        count += 1
        size += len(text)
        if size >= _WRITE_BATCH:
            write("".join(batch).encode("ascii"))
            batch, size = [], 0
            tick()
    write("".join(batch).encode("ascii"))
    return count, False


# -- a large file: byte ranges printed by worker processes ---------------------------------------------
MIN_PART_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class Part:
    """A run of node records: the byte offsets of its first record and past its last, the record
    number of its first."""

    start: int
    end: int
    first: int


def split_records(path: str, jobs: int) -> list[Part]:
    """Cut a large plain ``.et`` into up to ``jobs`` runs of records of similar size (none: print it
    in this process: a small or gzipped file, one job, no fork, or a file that does not walk: the
    single-process path then names the problem)."""
    if jobs < 2 or not fork_available():
        return []
    try:
        size = os.path.getsize(path)
        if size < 2 * MIN_PART_BYTES:
            return []
        with open(path, "rb") as fh:
            if fh.read(2) == GZIP_MAGIC:
                return []
            return _walk(fh, size, max(2, min(jobs, size // MIN_PART_BYTES)))
    except (OSError, Malformed):
        return []


def _walk(fh: IO[bytes], size: int, count: int) -> list[Part]:
    """Walk the record lengths (reading the file in chunks, skipping the messages)."""
    targets = [size * k // count for k in range(1, count)]
    fh.seek(0)
    buf, base = fh.read(_WALK_CHUNK), 0
    pos, number = 0, -1  # record -1 ... : the GlobalMetadata is record 0
    starts: list[tuple[int, int]] = []  # (byte, record number) of each part's first node
    while base + pos < size:
        if pos + 10 > len(buf) and base + len(buf) < size:
            fh.seek(base + pos)
            base, buf, pos = base + pos, fh.read(_WALK_CHUNK), 0
        length, after = varint_at(buf, pos)
        number += 1
        if number == 1 or (targets and base + pos >= targets[0]):
            if number >= 1:
                starts.append((base + pos, number))
            while targets and base + pos >= targets[0]:
                targets.pop(0)
        pos = after + length
    if base + pos != size:
        raise Malformed("the last record ends past the end of the file")
    ends = [start for start, _ in starts[1:]] + [size]
    return [Part(start, end, first) for (start, first), end in zip(starts, ends, strict=True)]


_WALK_CHUNK = 1 << 22


def _work(task: tuple[str, Part, str, SpillFile]) -> tuple[int, bool, str | None]:
    """A worker: print the nodes of one part into its spill file -> (nodes, stopped, error)."""
    path, part, layout, spill = task
    printer, frame = Printer(indent=layout == "chakra"), _Frame(layout, "")
    frame.first = ""  # the parent writes what goes before the part
    try:
        with open_trace(path, (part.start, part.end)) as fh:
            raw = (
                (part.first + i, part.start + offset, message)
                for i, (offset, message) in enumerate(delimited_records(cast(IO[bytes], fh), path))
            )

            def malformed(number: int, offset: int, exc: Exception) -> Exception:
                return TraceFormatError(path, f"record {number} at byte {offset} is not a Node: {exc}")

            count, stopped = _print_nodes(raw, printer, frame, spill.write, malformed, lambda: None)
        spill.flush()
        return count, stopped, None
    except ConverterError as exc:
        return 0, False, str(exc)


def _write_parts(
    path: str, parts: list[Part], frame: _Frame, out: IO[bytes], work_dir: str, progress: Progress | None
) -> int:
    spills = [SpillFile(work_dir) for _ in parts]
    try:
        results: dict[int, tuple[int, bool, str | None]] = {}
        tasks = [(path, part, frame.layout, spill) for part, spill in zip(parts, spills, strict=True)]
        with closing(run_all(_work, tasks, len(tasks))) as running:
            for task, outcome in running:
                if outcome is None:
                    raise ConverterError(f"{path}: a worker process died (out of memory?)", hint="try `jobs` 1")
                results[tasks.index(task)] = outcome
                if progress is not None:
                    progress("parts", len(results), len(parts))
        out.write(frame.head.encode("ascii"))
        count = 0
        for index, spill in enumerate(spills):
            nodes, stopped, error = results[index]
            if error is not None:
                raise ConverterError(error)
            if nodes:
                out.write((frame.separator if count else frame.first).encode("ascii"))
                _copy(spill, out)
            count += nodes
            if stopped:
                break
        out.write(frame.end(count).encode("ascii"))
        return count
    finally:
        for spill in spills:
            spill.close()


def _copy(spill: SpillFile, out: IO[bytes]) -> None:
    offset = 0
    while True:
        chunk = spill.pread(1 << 22, offset)
        if not chunk:
            return
        out.write(chunk)
        offset += len(chunk)
