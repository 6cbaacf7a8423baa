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
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from ..errors import TraceFormatError
from ..et.decode import (
    EtRecords,
    Malformed,
    MetadataRecord,
    NodeRecord,
    attribute,
    decode_node,
    io_info,
    varint_at,
)
from ..et.wire import BoundedCache
from ..io import OutputTarget, atomic_output, check_input, check_output
from ..schema.chakra import NodeType

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
        fields = io_info(raw)
        items = [(k, _quote(v)) for k, v in zip(("values", "shapes", "types"), fields, strict=True) if v]
        return self._ios.remember(raw, self.layout.obj(items, 1))

    def node(self, node: NodeRecord) -> str:
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


def jsonize(input_path: str, output_path: str, layout: str = "document",
            progress: Callable[[str, int, int], None] | None = None) -> JsonizeResult:
    """Write ``input_path`` (a ``.et``, plain or gzipped) as JSON in ``layout`` (see the module)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    check_input(input_path)
    target = check_output(output_path, input_path)
    with EtRecords(input_path) as records:
        nodes = _write(records, target, layout, progress)
    return JsonizeResult(output_path, nodes, layout)


def _write(records: EtRecords, target: OutputTarget, layout: str,
           progress: Callable[[str, int, int], None] | None) -> int:
    printer = Printer(indent=layout == "chakra")
    try:
        head = printer.metadata(records.metadata)
    except Malformed as exc:
        raise TraceFormatError(records.path, f"the GlobalMetadata record does not decode: {exc}") from None
    if layout == "document":
        head, separator, tail = '{"globalMetadata": ' + head + ',\n"nodes": [', ",\n", "\n]}\n"
        first = "\n"
    elif layout == "lines":
        head, separator, tail, first = head + "\n", "\n", "\n", ""
    else:
        separator, tail, first = "", "", ""
    count = 0
    with atomic_output(target) as out:
        batch: list[str] = [head]
        size = 0
        for text in _node_texts(records, printer, layout == "chakra"):
            batch.append((first if count == 0 else separator) + text)
            count += 1
            size += len(text)
            if size >= _WRITE_BATCH:
                out.write("".join(batch).encode("ascii"))
                batch, size = [], 0
                if progress is not None:
                    progress("read", records.position, records.size)
        if count or layout != "document":
            batch.append(tail)
        else:
            batch.append("]}\n")
        out.write("".join(batch).encode("ascii"))
    if progress is not None:
        progress("read", records.size, records.size)
    return count


def _node_texts(records: EtRecords, printer: Printer, stop_at_empty: bool) -> Iterator[str]:
    node_text = printer.node
    for number, offset, message in records.raw_nodes():
        if stop_at_empty and not message:  # chakra_jsonizer's reader takes a 0-byte record for the end
            return
        try:
            yield node_text(decode_node(message))
        except Malformed as exc:
            raise records.malformed(number, offset, exc) from None
