"""Full ``.et`` records, streamed: every field of GlobalMetadata and Node, one record at a time.

``decode.read_et`` keeps what checking, scaling and compaction need, in columns; the tools that
show a whole trace (jsonize, visualize) and the passes that re-encode an attribute need every
field, record by record, in flat memory. The wire primitives (record framing, varints, fields)
are ``decode``'s: one codec.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar, cast

from ..errors import OutputError, TraceFormatError
from ..io.read import open_trace, reason_of
from ..schema.chakra import (
    ATTRIBUTE_FIELDS,
    ATTRIBUTE_VALUE_KINDS,
    WIRE_FIXED32,
    WIRE_FIXED64,
    WIRE_LEN,
    WIRE_VARINT,
)
from .decode import SIGNED_64, Malformed, delimited_records, packed_ids, read_et, text_value, varint_at
from .wire import delimited_message

# ``read_et`` keeps what checking needs, in columns; the tools that show a whole trace (jsonize,
# visualize) need every field, record by record, in flat memory. The semantics are protobuf's
# (proto3, as ``et_def_pb2`` parses): a scalar's last occurrence wins, repeated fields concatenate
# (packed or not), a message field met twice is merged (parsing the concatenation of its pieces is
# the merge, so sub-messages are kept as bytes and decoded when asked), a ``oneof`` keeps its last
# member, a field of an unexpected wire type is an unknown field and skipped like one.

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


def _int32(value: int) -> int:
    value &= _M32
    return value - (1 << 32) if value >= 1 << 31 else value


def _int64(value: int) -> int:
    value &= _M64
    return value - (1 << 64) if value >= SIGNED_64 else value


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


_U32: Any = lambda v: v & _M32  # noqa: E731
_U64: Any = lambda v: v & _M64  # noqa: E731
#: AttributeProto value kinds: the converter of one raw element (an int, or bytes for LEN and fixed fields).
_CONVERTERS: dict[str, Any] = {
    "double": float,
    "float": float,
    "int32": _int32,
    "int64": _int64,
    "uint32": _U32,
    "uint64": _U64,
    "sint32": lambda v: _int32(_zigzag(v & _M32)),
    "sint64": lambda v: _zigzag(v & _M64),
    "fixed32": int,
    "fixed64": int,
    "sfixed32": int,
    "sfixed64": int,
    "bool": bool,
    "string": str,
    "bytes": bytes,
}
_SCALARS: dict[str, tuple[int, Any]] = {k: (w, _CONVERTERS[k]) for k, w in ATTRIBUTE_VALUE_KINDS.items()}
_VALUE_FIELDS: dict[int, tuple[str, str, bool]] = {
    number: (name, name.rsplit("_", 1)[0], name.endswith("_list"))
    for name, (number, _) in ATTRIBUTE_FIELDS.items()
    if number >= 3
}
_FIXED_FORMATS = {
    ("fixed32", 4): "<I",
    ("sfixed32", 4): "<i",
    ("fixed64", 8): "<Q",
    ("sfixed64", 8): "<q",
    ("float", 4): "<f",
    ("double", 8): "<d",
}


@dataclass(slots=True)
class Attribute:
    """One ``AttributeProto``: ``kind`` is the set member of its ``value`` oneof (``"int64_val"``,
    ``"bool_list"``, ...) or None; ``value`` a Python value (a list for ``*_list`` kinds)."""

    name: str = ""
    doc_string: str = ""
    kind: str | None = None
    value: Any = None


@dataclass(slots=True)
class EtNode:
    """Every field of one ``.et`` ``Node`` record; ``inputs``/``outputs`` (IOInfo) and ``attr`` stay encoded until
    asked (``io_info``, ``attribute``): None means the message field is not set."""

    id: int = 0
    name: str = ""
    type: int = 0
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: bytes | None = None
    outputs: bytes | None = None
    attr: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class MetadataRecord:
    """The ``GlobalMetadata`` record: ``attr`` encoded, as in ``EtNode``."""

    version: str = ""
    attr: list[bytes] = field(default_factory=list)


def _skip_or_value(data: bytes, pos: int, wire: int, number: int) -> tuple[Any, int]:
    """The raw value of a field at ``pos`` (int, or bytes for LEN and fixed fields)."""
    if wire == WIRE_VARINT:
        return varint_at(data, pos)
    if wire == WIRE_LEN:
        length, pos = varint_at(data, pos)
        if pos + length > len(data):
            raise Malformed(f"field {number} runs past the end of its message")
        return data[pos : pos + length], pos + length
    if wire == _WIRE_START_GROUP:
        return None, _skip_group(data, pos, number)
    size = 8 if wire == WIRE_FIXED64 else 4 if wire == WIRE_FIXED32 else 0
    if not size:
        raise Malformed(
            f"field {number} has wire type {wire}"
            + (" (an end of group with no start)" if wire == _WIRE_END_GROUP else "")
        )
    if pos + size > len(data):
        raise Malformed(f"field {number} runs past the end of its message")
    return data[pos : pos + size], pos + size


_WIRE_START_GROUP, _WIRE_END_GROUP = 3, 4


def _skip_group(data: bytes, pos: int, number: int) -> int:
    """Past the end of a (deprecated) group started at ``pos``: protobuf keeps it as an unknown
    field; nested groups are followed with a stack, not recursion."""
    open_groups = [number]
    end = len(data)
    while open_groups:
        if pos >= end:
            raise Malformed(f"group {open_groups[-1]} is not closed")
        key, pos = varint_at(data, pos)
        inner, wire = key >> 3, key & 7
        if inner == 0 or key > _M32:
            raise Malformed("field number 0" if inner == 0 else "a field number above 2**29")
        if wire == _WIRE_END_GROUP:
            if inner != open_groups.pop():
                raise Malformed(f"group {number} closed by the end of group {inner}")
        elif wire == _WIRE_START_GROUP:
            open_groups.append(inner)
        else:
            _, pos = _skip_or_value(data, pos, wire, inner)
    return pos


def _raw_fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    pos, end = 0, len(data)
    while pos < end:
        key, pos = varint_at(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0 or key > _M32:
            raise Malformed("field number 0" if number == 0 else "a field number above 2**29")
        value, pos = _skip_or_value(data, pos, wire, number)
        yield number, wire, value


def decode_node(message: bytes) -> EtNode:
    """Every field of a ``Node`` record; raises ``Malformed`` (``EtRecords`` names the record) when
    it does not decode. Inlined for speed: keys of fields 1-15 are one byte, most values too."""
    node_id = node_type = start_time = duration = 0
    name = ""
    ctrl: list[int] = []
    data: list[int] = []
    inputs: bytes | None = None
    outputs: bytes | None = None
    attrs: list[bytes] = []
    add_attr = attrs.append
    pos, end = 0, len(message)
    while pos < end:
        key = message[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = varint_at(message, pos)
            if key > _M32:
                raise Malformed("a field number above 2**29")
        wire = key & 7
        if wire == WIRE_LEN:
            if pos >= end:
                raise Malformed("a varint runs past the end")
            length = message[pos]
            if length < 0x80:
                pos += 1
            else:
                length, pos = varint_at(message, pos)
            stop = pos + length
            if stop > end:
                raise Malformed(f"field {key >> 3} runs past the end of its message")
            if key == 0x52:  # attr, and the attrs right after it (one-byte lengths: most of them)
                add_attr(message[pos:stop])
                while stop + 1 < end and message[stop] == 0x52 and message[stop + 1] < 0x80:
                    pos = stop + 2
                    stop = pos + message[stop + 1]
                    if stop > end:
                        raise Malformed("field 10 runs past the end of its message")
                    add_attr(message[pos:stop])
            elif key == 0x12:  # name
                name = text_value(message[pos:stop])
            elif key == 0x22 or key == 0x2A:  # ctrl_deps, data_deps (packed)
                values = packed_ids(message[pos:stop])
                if values and max(values) > _M64:
                    values = [v & _M64 for v in values]
                (ctrl if key == 0x22 else data).extend(values)
            elif key == 0x42:  # inputs: a second occurrence merges
                inputs = message[pos:stop] if inputs is None else inputs + message[pos:stop]
            elif key == 0x4A:  # outputs
                outputs = message[pos:stop] if outputs is None else outputs + message[pos:stop]
            elif key >> 3 == 0:
                raise Malformed("field number 0")
            pos = stop
        elif wire == WIRE_VARINT:
            if pos >= end:
                raise Malformed("a varint runs past the end")
            value = message[pos]
            if value < 0x80:
                pos += 1
            else:
                value, pos = varint_at(message, pos)
                value &= _M64
            if key == 0x08:
                node_id = value
            elif key == 0x18:
                node_type = _int32(value)
            elif key == 0x38:
                duration = value
            elif key == 0x30:
                start_time = value
            elif key == 0x20 or key == 0x28:  # an unpacked dependency
                (ctrl if key == 0x20 else data).append(value)
            elif key >> 3 == 0:
                raise Malformed("field number 0")
        else:
            if key >> 3 == 0:
                raise Malformed("field number 0")
            _, pos = _skip_or_value(message, pos, wire, key >> 3)
    return EtNode(node_id, name, node_type, ctrl, data, start_time, duration, inputs, outputs, attrs)


def decode_global_metadata(message: bytes) -> MetadataRecord:
    record = MetadataRecord()
    for number, wire, raw in _raw_fields(message):
        if number == 1 and wire == WIRE_LEN:
            record.version = text_value(raw)
        elif number == 2 and wire == WIRE_LEN:
            record.attr.append(raw)
    return record


def io_info(data: bytes) -> tuple[str, str, str]:
    """(values, shapes, types) of an encoded ``IOInfo``."""
    out = ["", "", ""]
    for number, wire, raw in _raw_fields(data):
        if 1 <= number <= 3 and wire == WIRE_LEN:
            out[number - 1] = text_value(raw)
    return out[0], out[1], out[2]


def attribute(data: bytes) -> Attribute:
    """An encoded ``AttributeProto``, every value kind of its oneof."""
    attr = Attribute()
    for number, wire, raw in _raw_fields(data):
        if number == 1 and wire == WIRE_LEN:
            attr.name = text_value(raw)
        elif number == 2 and wire == WIRE_LEN:
            attr.doc_string = text_value(raw)
        elif number in _VALUE_FIELDS:
            kind, base, is_list = _VALUE_FIELDS[number]
            element_wire, convert = _SCALARS[base]
            if is_list:
                if wire != WIRE_LEN:
                    continue
                values = _list_values(raw, base, element_wire, convert)
                if attr.kind == kind:  # the same message field again: merged
                    attr.value.extend(values)
                else:
                    attr.kind, attr.value = kind, values
            elif wire == element_wire:
                attr.kind, attr.value = kind, _scalar(raw, base, convert)
    return attr


def _scalar(raw: Any, base: str, convert: Any) -> Any:
    if base == "string":
        return text_value(raw)
    if isinstance(raw, bytes) and base != "bytes":
        return struct.unpack(_FIXED_FORMATS[base, len(raw)], raw)[0]
    return convert(raw)


def _list_values(data: bytes, base: str, element_wire: int, convert: Any) -> list[Any]:
    """``values`` (field 1) of a ``<Kind>List`` message, packed or not."""
    out: list[Any] = []
    for number, wire, raw in _raw_fields(data):
        if number != 1:
            continue
        if wire == element_wire:
            out.append(_scalar(raw, base, convert))
        elif wire == WIRE_LEN and element_wire != WIRE_LEN:  # packed
            if element_wire == WIRE_VARINT:
                out.extend(convert(v) for v in packed_ids(raw))
            else:
                size = 8 if element_wire == WIRE_FIXED64 else 4
                if len(raw) % size:
                    raise Malformed("a packed fixed-size list does not divide into its elements")
                fmt = _FIXED_FORMATS[base, size]
                out.extend(v for (v,) in struct.iter_unpack(fmt, raw))
    return out


class EtRecords:
    """A ``.et`` file read record by record (plain or gzipped, as the reference reads it):
    ``metadata`` is its GlobalMetadata, ``raw_nodes()`` yields (record number, byte offset, encoded
    Node), ``nodes()`` decoded ``EtNode``s. Use it in a ``with``. Every problem is a
    ``TraceFormatError`` naming the file, the record and its byte offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file = open_trace(self.path)
        self._records = delimited_records(cast(IO[bytes], self._file), self.path)
        try:
            first = next(self._records, None)
        except TraceFormatError as exc:
            self._file.close()
            raise TraceFormatError(self.path, f"not a Chakra .et file ({exc.problem})") from None
        if first is None:
            self._file.close()
            raise TraceFormatError(self.path, "file is empty: not a Chakra .et file")
        try:
            self.metadata = decode_global_metadata(first[1])
        except Malformed as exc:
            self._file.close()
            raise TraceFormatError(self.path, f"not a Chakra .et file (no GlobalMetadata record): {exc}") from None

    def __enter__(self) -> EtRecords:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    @property
    def position(self) -> int:
        """Bytes of the file read so far (for progress)."""
        return self._file.position

    @property
    def size(self) -> int:
        return self._file.size

    def raw_nodes(self) -> Iterator[tuple[int, int, bytes]]:
        number = 0
        try:
            for number, (offset, message) in enumerate(self._records, 1):
                yield number, offset, message
        except TraceFormatError as exc:
            if exc.path != self.path:
                raise
            raise TraceFormatError(self.path, f"record {number + 1}: {exc.problem}") from None

    def nodes(self) -> Iterator[EtNode]:
        for number, offset, message in self.raw_nodes():
            try:
                yield decode_node(message)
            except Malformed as exc:
                raise self.malformed(number, offset, exc) from None

    def malformed(self, number: int, offset: int, exc: Exception) -> TraceFormatError:
        """The error for record ``number`` (at byte ``offset``) that does not decode as a Node."""
        return TraceFormatError(self.path, f"record {number} at byte {offset} is not a Node: {exc}")


int64_value = _int64


_Edit = TypeVar("_Edit")


def rewrite_nodes(path: str, edits: dict[int, _Edit], apply: Callable[[bytes, _Edit], bytes], suffix: str) -> None:
    """``path`` with the node at each row of ``edits`` re-encoded by ``apply(message, edit)``,
    written beside it (``path`` + ``suffix``) and renamed over it; an error or a signal leaves no
    partial file behind."""
    records: list[bytes] = []
    read_et(path, records=records)
    temporary = f"{path}{suffix}"
    try:
        with open(temporary, "wb") as fh:
            for number, message in enumerate(records):
                edit = edits.get(number - 1)  # record 0 is the metadata
                fh.write(delimited_message(message if edit is None else apply(message, edit)))
        os.replace(temporary, path)
    except OSError as exc:
        raise OutputError(path, f"cannot rewrite: {reason_of(exc)}") from None
    finally:
        with suppress(OSError):
            os.unlink(temporary)
