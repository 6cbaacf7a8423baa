"""Reading a Chakra ``.et`` file back: a GlobalMetadata record, then one Node record per op.

``read_et`` keeps a compact columnar trace (for checking); ``EtRecords`` streams full records
(every field, for jsonize and visualize).

Each record is a varint length and a protobuf message. Decoding uses the field numbers of
``schema.chakra`` and keeps, per node, what checking needs: id, name, type, dependencies, and
the communication attributes (``comm_type``, ``comm_size``, ``pg_name``, ``is_cpu_op``,
``comm_src``, ``comm_dst``, ``comm_tag``); inputs, outputs and other attributes are skipped by
length. Anything that does not decode is a ``TraceFormatError`` naming the record and byte.
"""

from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple, cast

from ..errors import TraceFormatError
from ..schema.chakra import (
    ATTRIBUTE_FIELDS,
    GLOBAL_METADATA_FIELDS,
    IO_FIELDS,
    NODE_FIELDS,
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_LEN,
    WIRE_VARINT,
    NodeType,
)

_CHUNK = 1 << 20
_MAX_RECORD = 1 << 30
COMM_ATTRS = ("comm_type", "comm_size", "pg_name", "is_cpu_op", "comm_src", "comm_dst", "comm_tag")
_COMM_NAMES = frozenset(COMM_ATTRS)
_F = {name: number for name, (number, _) in NODE_FIELDS.items()}
_A = {name: number for name, (number, _) in ATTRIBUTE_FIELDS.items()}
_META_ATTR = GLOBAL_METADATA_FIELDS["attr"][0]
SIGNED_64 = 1 << 63


class Malformed(Exception):
    """A record that does not decode; the caller names the file, record and byte."""


@dataclass
class EtTrace:
    """One ``.et`` file, columnar: row r is the r-th node record of the file."""

    path: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ids: array[int] = field(default_factory=lambda: array("Q"))
    types: bytearray = field(default_factory=bytearray)
    names: list[str] = field(default_factory=list)
    dep_start: array[int] = field(default_factory=lambda: array("Q", [0]))
    deps: array[int] = field(default_factory=lambda: array("Q"))  # ctrl_deps, then data_deps
    ctrl_count: bytearray = field(default_factory=bytearray)  # how many of a row's deps are ctrl_deps (<= 255)
    durations: array[int] = field(default_factory=lambda: array("Q"))
    comm: dict[int, dict[str, Any]] = field(default_factory=dict)  # row -> comm attrs, for comm nodes
    cpu_ops: bytearray = field(default_factory=bytearray)  # is_cpu_op: 0 false, 1 true, 2 absent
    int_attrs: dict[str, dict[int, int]] = field(default_factory=dict)  # name -> row -> value (asked for by name)

    def __len__(self) -> int:
        return len(self.ids)

    def dependencies(self, row: int) -> array[int]:
        return self.deps[self.dep_start[row] : self.dep_start[row + 1]]


CPU_OP_FALSE, CPU_OP_TRUE, CPU_OP_ABSENT = 0, 1, 2


def read_et(
    path: str | os.PathLike[str], int_attrs: tuple[str, ...] = (), *, records: list[bytes] | None = None
) -> EtTrace:
    """Decode every record of ``path``; raises ``TraceFormatError`` for anything that is not one.
    The integer attributes named in ``int_attrs`` are kept too (``EtTrace.int_attrs``).
    With ``records``, each record's message (GlobalMetadata first, then row r's node at r + 1) is
    appended to it as read, without its length prefix: the file is read once, for a caller that
    copies the records (``wire.delimited_message`` gives each record's bytes back)."""
    trace = EtTrace(os.fspath(path), int_attrs={name: {} for name in int_attrs})
    if not os.path.isfile(trace.path):
        problem = "no such file" if not os.path.exists(trace.path) else "is not a regular file"
        raise TraceFormatError(trace.path, problem)
    try:
        with open(trace.path, "rb") as fh:
            found = delimited_records(fh, trace.path)
            try:
                first = next(found, None)
            except TraceFormatError as exc:  # the first record does not even delimit
                raise TraceFormatError(trace.path, f"not a Chakra .et file ({exc.problem})") from None
            if first is None:
                raise TraceFormatError(trace.path, "file is empty: not a Chakra .et file")
            if records is not None:
                records.append(first[1])
            try:
                trace.metadata = _global_metadata(first[1])
            except Malformed as exc:
                raise TraceFormatError(trace.path, f"not a Chakra .et file (no GlobalMetadata record): {exc}") from None
            for number, (offset, message) in enumerate(found, 1):
                if records is not None:
                    records.append(message)
                try:
                    _add_node(trace, message)
                except Malformed as exc:
                    problem = f"record {number} at byte {offset} is not a Node: {exc}"
                    raise TraceFormatError(trace.path, problem) from None
    except OSError as exc:
        raise TraceFormatError(trace.path, f"cannot read: {exc.strerror or exc}") from None
    return trace


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """(byte offset, message) of every record of ``path``, the GlobalMetadata record first, read
    in chunks; raises ``TraceFormatError`` when the file cannot be read or does not delimit."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            yield from delimited_records(fh, name)
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read: {exc.strerror or exc}") from None


def field_spans(message: bytes) -> Iterator[tuple[int, int, int, Any]]:
    """(field number, start, end, value) of each field of a message, ``message[start:end]`` being
    the field's whole encoding (key included); raises ``TraceFormatError`` (path empty) when
    the message does not decode."""
    try:
        yield from _fields(message, spans=True)
    except Malformed as exc:
        raise TraceFormatError("", f"a record is not a Node: {exc}") from None


def delimited_records(fh: IO[bytes], path: str) -> Iterator[tuple[int, bytes]]:
    """(byte offset, message) of each length-delimited record."""
    buf, pos, base = b"", 0, 0  # base: file offset of buf[0]

    def ensure(count: int) -> bool:
        """At least ``count`` bytes buffered after ``pos`` (False: the file ends before)."""
        nonlocal buf, pos, base
        while len(buf) - pos < count:
            chunk = fh.read(max(_CHUNK, count))
            if not chunk:
                return False
            buf, base, pos = buf[pos:] + chunk, base + pos, 0
        return True

    while True:
        ensure(10)
        if pos == len(buf):
            return
        start = base + pos
        try:
            length, after = varint_at(buf, pos)
        except Malformed:
            raise TraceFormatError(path, f"truncated: the record length at byte {start} is cut") from None
        if length > _MAX_RECORD:
            raise TraceFormatError(path, f"not a Chakra .et file: a record of {length:,} bytes at byte {start}")
        pos = after
        if not ensure(length):
            raise TraceFormatError(path, f"truncated: the record at byte {start} ends past the end of the file")
        yield start, buf[pos : pos + length]
        pos += length


def attribute_spans(message: bytes) -> Iterator[tuple[str, int, int]]:
    """(name, start, end) of each ``attr`` field of a Node message (a message ``read_et`` has
    decoded): the bytes ``message[start:end]`` are the whole field, key included, so a caller can
    splice another encoding of the attribute in its place."""
    attr = _F["attr"]
    pos, end = 0, len(message)
    while pos < end:
        start = pos
        key, pos = varint_at(message, pos)
        number, wire = key >> 3, key & 7
        if wire == WIRE_VARINT:
            _, pos = varint_at(message, pos)
        elif wire == WIRE_LEN:
            length, pos = varint_at(message, pos)
            if number == attr:
                yield _attribute(message[pos : pos + length])[0], start, pos + length
            pos += length
        else:
            pos += 8 if wire == WIRE_FIXED64 else 4


def varint_at(data: bytes, pos: int) -> tuple[int, int]:
    if pos + 2 < len(data):  # one to three bytes: most lengths, ids and dependencies
        first = data[pos]
        if first < 0x80:
            return first, pos + 1
        second = data[pos + 1]
        if second < 0x80:
            return (first & 0x7F) | (second << 7), pos + 2
        third = data[pos + 2]
        if third < 0x80:
            return (first & 0x7F) | ((second & 0x7F) << 7) | (third << 14), pos + 3
    result = shift = 0
    while True:
        if pos >= len(data):
            raise Malformed("a varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise Malformed("a varint larger than 64 bits")
            return result, pos
        shift += 7
        if shift > 63:
            raise Malformed("a varint longer than 10 bytes")


def _fields(data: bytes, spans: bool = False) -> Iterator[Any]:
    """(field number, wire type, value) of a message: an int, or bytes for length-delimited fields;
    with ``spans``, (field number, start, end, value) instead."""
    if not isinstance(data, bytes):
        raise Malformed("a message field has the wrong wire type (not length-delimited)")
    pos, end = 0, len(data)
    while pos < end:
        start = pos
        key, pos = varint_at(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if number == 0:
            raise Malformed("field number 0")
        if wire == WIRE_VARINT:
            value, pos = varint_at(data, pos)
        elif wire == WIRE_LEN:
            length, pos = varint_at(data, pos)
            if pos + length > end:
                raise Malformed(f"field {number} runs past the end of its message")
            value, pos = data[pos : pos + length], pos + length
        elif wire == WIRE_FIXED64:
            if pos + 8 > end:
                raise Malformed(f"field {number} runs past the end of its message")
            value, pos = struct.unpack_from("<d", data, pos)[0], pos + 8
        elif wire == WIRE_FIXED32:
            if pos + 4 > end:
                raise Malformed(f"field {number} runs past the end of its message")
            value, pos = struct.unpack_from("<f", data, pos)[0], pos + 4
        else:
            raise Malformed(f"field {number} has wire type {wire}, which Chakra does not use")
        yield (number, start, pos, value) if spans else (number, wire, value)


def text_value(value: Any) -> str:
    if not isinstance(value, bytes):
        raise Malformed("a string field is not length-delimited")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("a string is not UTF-8") from None


def packed_ids(value: Any) -> list[int]:
    if isinstance(value, int):  # an unpacked repeated element
        return [value]
    if not isinstance(value, bytes):
        raise Malformed("a list of ids is neither varints nor packed varints (wrong wire type)")
    if value.isascii():  # every byte below 0x80: every value one byte
        return list(value)
    out, pos, end = [], 0, len(value)
    while pos < end:
        item, pos = varint_at(value, pos)
        out.append(item)
    return out


def _attribute(data: bytes) -> tuple[str, Any]:
    """(name, value) of an AttributeProto; ints of signed kinds come back signed."""
    name, value = "", cast(Any, None)
    for number, wire, raw in _fields(data):
        if number == _A["name"]:
            name = text_value(raw)
        elif number == _A["string_val"]:
            value = text_value(raw)
        elif number in (_A["int64_val"], _A["int32_val"]) and wire == WIRE_VARINT:
            value = raw - (1 << 64) if raw >= SIGNED_64 else raw
        elif number in (_A["uint64_val"], _A["uint32_val"]) and wire == WIRE_VARINT:
            value = raw
        elif number == _A["bool_val"] and wire == WIRE_VARINT:
            value = bool(raw)
        elif number in (_A["sint64_val"], _A["sint32_val"]) and wire == WIRE_VARINT:
            value = (raw >> 1) ^ -(raw & 1)
        elif number not in (_A["doc_string"],):
            value = raw
    return name, value


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The GlobalMetadata attributes of an ``.et`` file (its first record only); {} if it has
    none or they do not decode."""
    for _, message in iter_records(path):
        try:
            return _global_metadata(message)
        except Malformed:
            return {}
    return {}


def metadata_of(path: str, message: bytes) -> dict[str, Any]:
    """The attributes of a GlobalMetadata record (the first record of ``path``)."""
    try:
        return _global_metadata(message)
    except Malformed as exc:
        raise TraceFormatError(path, f"not a Chakra .et file (no GlobalMetadata record): {exc}") from None


def _global_metadata(message: bytes) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for number, _, raw in _fields(message):
        if number == _META_ATTR:
            name, value = _attribute(raw)
            metadata[name] = value
        elif number != GLOBAL_METADATA_FIELDS["version"][0]:
            raise Malformed(f"unexpected field {number}")
    return metadata


def _add_node(trace: EtTrace, message: bytes) -> None:
    node_id = node_type = duration = 0
    name = ""
    ctrl: list[int] = []
    data: list[int] = []
    comm: dict[str, Any] = {}
    cpu_op = CPU_OP_ABSENT
    wanted = trace.int_attrs
    found: dict[str, int] = {}
    for number, _, raw in _fields(message):
        if number == _F["id"]:
            node_id = raw
        elif number == _F["name"]:
            name = text_value(raw)
        elif number == _F["type"]:
            node_type = raw
        elif number == _F["ctrl_deps"]:
            ctrl.extend(packed_ids(raw))
        elif number == _F["data_deps"]:
            data.extend(packed_ids(raw))
        elif number == _F["duration_micros"]:
            duration = raw
        elif number == _F["attr"]:
            attr_name, value = _attribute(raw)
            if attr_name in _COMM_NAMES:
                comm[attr_name] = value
            if attr_name == "is_cpu_op":
                cpu_op = CPU_OP_TRUE if value is True else CPU_OP_FALSE if value is False else CPU_OP_ABSENT
            elif attr_name in wanted and type(value) is int:
                found[attr_name] = value
    if not isinstance(node_id, int) or not isinstance(node_type, int) or node_type > 255:
        raise Malformed("id or type is not an integer")
    trace.ids.append(node_id)
    trace.types.append(node_type)
    trace.names.append(name)
    trace.deps.extend(ctrl)
    trace.deps.extend(data)
    trace.dep_start.append(len(trace.deps))
    trace.ctrl_count.append(min(len(ctrl), 255))
    trace.durations.append(duration if isinstance(duration, int) else 0)
    trace.cpu_ops.append(cpu_op)
    row = len(trace.ids) - 1
    for attr_name, value in found.items():
        wanted[attr_name][row] = value
    if node_type in _COMM_TYPES or comm.get("comm_type") is not None:
        trace.comm[len(trace.ids) - 1] = comm


_COMM_TYPES = frozenset({NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE})


# -- a node's tail (duration, inputs, outputs), for passes over the converter's spilled tails --------
class TailIO(NamedTuple):
    """What a node's tail says of its work: duration and the ``str()`` of its shapes and types
    (UTF-8 bytes, as written)."""

    duration: int
    in_shapes: bytes
    in_types: bytes
    out_shapes: bytes
    out_types: bytes


_DURATION, _INPUTS, _OUTPUTS, _ATTR = _F["duration_micros"], _F["inputs"], _F["outputs"], _F["attr"]
_SHAPES, _TYPES = IO_FIELDS["shapes"][0], IO_FIELDS["types"][0]


def tail_io(tail: bytes, *, duration_only: bool = False) -> TailIO:
    """Duration, input and output shapes/types of an encoded node tail (or whole node message);
    the values (long) are skipped, the attrs after them not read. Raises ``ValueError`` if it
    does not decode."""
    duration = 0
    io = {_INPUTS: [b"", b""], _OUTPUTS: [b"", b""]}
    try:
        pos, end = 0, len(tail)
        while pos < end:
            key, pos = varint_at(tail, pos)
            number, wire = key >> 3, key & 7
            if wire == WIRE_VARINT:
                value, pos = varint_at(tail, pos)
                if number == _DURATION:
                    duration = value
                    if duration_only:
                        break
                continue
            if wire != WIRE_LEN or number == _ATTR or duration_only:
                break
            length, pos = varint_at(tail, pos)
            if pos + length > end:
                raise Malformed(f"field {number} runs past the end of its message")
            if number in io:
                parts = io[number]
                for sub, _, raw in _fields(tail[pos : pos + length]):
                    if sub == _SHAPES:
                        parts[0] = raw
                    elif sub == _TYPES:
                        parts[1] = raw
            pos += length
    except Malformed as exc:
        raise ValueError(str(exc)) from None
    (in_shapes, in_types), (out_shapes, out_types) = io[_INPUTS], io[_OUTPUTS]
    return TailIO(duration, in_shapes, in_types, out_shapes, out_types)


def count_nodes(path: str | os.PathLike[str]) -> int:
    """The number of Node records of a ``.et`` file (its records less the GlobalMetadata), without
    decoding them."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            return max(0, sum(1 for _ in delimited_records(fh, name)) - 1)
    except OSError as exc:
        raise TraceFormatError(name, f"cannot read: {exc.strerror or exc}") from None
