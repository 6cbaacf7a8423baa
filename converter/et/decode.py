"""Reading a Chakra ``.et`` file back: a GlobalMetadata record, then one Node record per op.

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
from typing import IO, Any, cast

from ..errors import TraceFormatError
from ..schema.chakra import (
    ATTRIBUTE_FIELDS,
    GLOBAL_METADATA_FIELDS,
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
_SIGNED_64 = 1 << 63


class _Malformed(Exception):
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

    def __len__(self) -> int:
        return len(self.ids)

    def dependencies(self, row: int) -> array[int]:
        return self.deps[self.dep_start[row] : self.dep_start[row + 1]]


def read_et(path: str | os.PathLike[str]) -> EtTrace:
    """Decode every record of ``path``; raises ``TraceFormatError`` for anything that is not one."""
    trace = EtTrace(os.fspath(path))
    if not os.path.isfile(trace.path):
        problem = "no such file" if not os.path.exists(trace.path) else "is not a regular file"
        raise TraceFormatError(trace.path, problem)
    try:
        with open(trace.path, "rb") as fh:
            records = _records(fh, trace.path)
            try:
                first = next(records, None)
            except TraceFormatError as exc:  # the first record does not even delimit
                raise TraceFormatError(trace.path, f"not a Chakra .et file ({exc.problem})") from None
            if first is None:
                raise TraceFormatError(trace.path, "file is empty: not a Chakra .et file")
            try:
                trace.metadata = _global_metadata(first[1])
            except _Malformed as exc:
                raise TraceFormatError(trace.path, f"not a Chakra .et file (no GlobalMetadata record): {exc}") from None
            for number, (offset, message) in enumerate(records, 1):
                try:
                    _add_node(trace, message)
                except _Malformed as exc:
                    problem = f"record {number} at byte {offset} is not a Node: {exc}"
                    raise TraceFormatError(trace.path, problem) from None
    except OSError as exc:
        raise TraceFormatError(trace.path, f"cannot read: {exc.strerror or exc}") from None
    return trace


def _records(fh: IO[bytes], path: str) -> Iterator[tuple[int, bytes]]:
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
            length, after = _varint(buf, pos)
        except _Malformed:
            raise TraceFormatError(path, f"truncated: the record length at byte {start} is cut") from None
        if length > _MAX_RECORD:
            raise TraceFormatError(path, f"not a Chakra .et file: a record of {length:,} bytes at byte {start}")
        pos = after
        if not ensure(length):
            raise TraceFormatError(path, f"truncated: the record at byte {start} ends past the end of the file")
        yield start, buf[pos : pos + length]
        pos += length


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Malformed("a varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise _Malformed("a varint larger than 64 bits")
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("a varint longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: an int, or bytes for length-delimited fields."""
    if not isinstance(data, bytes):
        raise _Malformed("a message field has the wrong wire type (not length-delimited)")
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if number == 0:
            raise _Malformed("field number 0")
        if wire == WIRE_VARINT:
            value, pos = _varint(data, pos)
        elif wire == WIRE_LEN:
            length, pos = _varint(data, pos)
            if pos + length > end:
                raise _Malformed(f"field {number} runs past the end of its message")
            value, pos = data[pos : pos + length], pos + length
        elif wire == WIRE_FIXED64:
            if pos + 8 > end:
                raise _Malformed(f"field {number} runs past the end of its message")
            value, pos = struct.unpack_from("<d", data, pos)[0], pos + 8
        elif wire == WIRE_FIXED32:
            if pos + 4 > end:
                raise _Malformed(f"field {number} runs past the end of its message")
            value, pos = struct.unpack_from("<f", data, pos)[0], pos + 4
        else:
            raise _Malformed(f"field {number} has wire type {wire}, which Chakra does not use")
        yield number, wire, value


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise _Malformed("a string field is not length-delimited")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed("a string is not UTF-8") from None


def _packed(value: Any) -> list[int]:
    if isinstance(value, int):  # an unpacked repeated element
        return [value]
    if not isinstance(value, bytes):
        raise _Malformed("a list of ids is neither varints nor packed varints (wrong wire type)")
    out, pos = [], 0
    while pos < len(value):
        item, pos = _varint(value, pos)
        out.append(item)
    return out


def _attribute(data: bytes) -> tuple[str, Any]:
    """(name, value) of an AttributeProto; ints of signed kinds come back signed."""
    name, value = "", cast(Any, None)
    for number, wire, raw in _fields(data):
        if number == _A["name"]:
            name = _text(raw)
        elif number == _A["string_val"]:
            value = _text(raw)
        elif number in (_A["int64_val"], _A["int32_val"]) and wire == WIRE_VARINT:
            value = raw - (1 << 64) if raw >= _SIGNED_64 else raw
        elif number in (_A["uint64_val"], _A["uint32_val"]) and wire == WIRE_VARINT:
            value = raw
        elif number == _A["bool_val"] and wire == WIRE_VARINT:
            value = bool(raw)
        elif number in (_A["sint64_val"], _A["sint32_val"]) and wire == WIRE_VARINT:
            value = (raw >> 1) ^ -(raw & 1)
        elif number not in (_A["doc_string"],):
            value = raw
    return name, value


def _global_metadata(message: bytes) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for number, _, raw in _fields(message):
        if number == _META_ATTR:
            name, value = _attribute(raw)
            metadata[name] = value
        elif number != GLOBAL_METADATA_FIELDS["version"][0]:
            raise _Malformed(f"unexpected field {number}")
    return metadata


def _add_node(trace: EtTrace, message: bytes) -> None:
    node_id = node_type = duration = 0
    name = ""
    ctrl: list[int] = []
    data: list[int] = []
    comm: dict[str, Any] = {}
    for number, _, raw in _fields(message):
        if number == _F["id"]:
            node_id = raw
        elif number == _F["name"]:
            name = _text(raw)
        elif number == _F["type"]:
            node_type = raw
        elif number == _F["ctrl_deps"]:
            ctrl.extend(_packed(raw))
        elif number == _F["data_deps"]:
            data.extend(_packed(raw))
        elif number == _F["duration_micros"]:
            duration = raw
        elif number == _F["attr"]:
            attr_name, value = _attribute(raw)
            if attr_name in _COMM_NAMES:
                comm[attr_name] = value
    if not isinstance(node_id, int) or not isinstance(node_type, int) or node_type > 255:
        raise _Malformed("id or type is not an integer")
    trace.ids.append(node_id)
    trace.types.append(node_type)
    trace.names.append(name)
    trace.deps.extend(ctrl)
    trace.deps.extend(data)
    trace.dep_start.append(len(trace.deps))
    trace.ctrl_count.append(min(len(ctrl), 255))
    trace.durations.append(duration if isinstance(duration, int) else 0)
    if node_type in _COMM_TYPES or comm.get("comm_type") is not None:
        trace.comm[len(trace.ids) - 1] = comm


_COMM_TYPES = frozenset({NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE})
