"""Protobuf wire encoding of Chakra ``Node`` messages, in pieces that can be spliced.

Building a ``Node`` message per operator costs ~12 us (most of the reference's time); a node's
bytes are the concatenation of its fields' encodings in field-number order, so we encode the
fields we know while reading (the *tail*: duration, inputs, outputs, attrs) once, and prepend the
*head* (id, name, type, ctrl_deps, data_deps) when the graph is done.

Field numbers and wire types come from the real schema (``chakra.schema.protobuf.et_def_pb2``),
and type/range checks follow the protobuf runtime (int fields take only ``int``, never ``bool`` or
``float``; ``None`` leaves a oneof unset), so a value the reference cannot encode fails here too,
with a readable message. Tests compare every piece with ``SerializeToString``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chakra.schema.protobuf import et_def_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor

_VARINT, _LEN = 0, 2
_U64 = 1 << 64
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_SMALL = [bytes([v]) for v in range(0x80)] + [bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(0x80, 1 << 14)]


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int below 2**64."""
    if value < 16384:
        return _SMALL[value]
    if value < 2097152:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 268435456:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, ((value >> 14) & 0x7F) | 0x80, value >> 21))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: FieldDescriptor) -> bytes:
    packed_or_len = field.is_repeated or field.type in (field.TYPE_STRING, field.TYPE_MESSAGE, field.TYPE_BYTES)
    return varint(field.number << 3 | (_LEN if packed_or_len else _VARINT))


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def check_uint64(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ValueError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    if not 0 <= value < _U64:
        raise ValueError(f"{what} is out of the uint64 range: {value}")
    return value


def check_int64(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ValueError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    if not _I64_MIN <= value <= _I64_MAX:
        raise ValueError(f"{what} is out of the int64 range: {value}")
    return value


def utf8(value: str, what: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not valid Unicode (lone surrogate escape?)") from exc


_NODE = pb.Node.DESCRIPTOR.fields_by_name
_IO = pb.IOInfo.DESCRIPTOR.fields_by_name
_ATTR = pb.AttributeProto.DESCRIPTOR.fields_by_name
_HEAD = ("id", "name", "type", "ctrl_deps", "data_deps")
_TAIL = ("duration_micros", "inputs", "outputs", "attr")
assert [_NODE[f].number for f in _HEAD + _TAIL] == sorted(_NODE[f].number for f in _HEAD + _TAIL), (
    "et_def.proto changed its Node field order; head/tail splicing is no longer valid"
)

TAG_ID, TAG_NAME, TAG_TYPE, TAG_CTRL, TAG_DATA = (_tag(_NODE[f]) for f in _HEAD)
TAG_DURATION, TAG_INPUTS, TAG_OUTPUTS, TAG_ATTR = (_tag(_NODE[f]) for f in _TAIL)
_TAG_IO = tuple(_tag(_IO[f]) for f in ("values", "shapes", "types"))
_TAG_ATTR_NAME = _tag(_ATTR["name"])
_TAG_INT64 = _tag(_ATTR["int64_val"])
_TAG_STRING = _tag(_ATTR["string_val"])
_TAG_BOOL = _tag(_ATTR["bool_val"])


# -- attributes ---------------------------------------------------------------------------------
def attr_name(name: str) -> bytes:
    return length_delimited(_TAG_ATTR_NAME, name.encode("utf-8"))


class Int64Attr:
    """Encoder of one named int64 attribute; values below 2**14 come from a table (most of them)."""

    __slots__ = ("_name_part", "_prefix", "_table", "what")

    def __init__(self, name: str) -> None:
        self.what = name
        self._name_part = attr_name(name)
        self._prefix = self._name_part + _TAG_INT64
        self._table = [_attr(self._name_part, _TAG_INT64 + _SMALL[v]) for v in range(1 << 14)]

    def __call__(self, value: Any) -> bytes:
        if type(value) is int and 0 <= value < 268435456:
            if value < 16384:
                return self._table[value]
            body = self._prefix + varint(value)
            return TAG_ATTR + _SMALL[len(body)] + body
        return int64_attr(self._name_part, value, self.what)


class BoundedCache(dict):  # type: ignore[type-arg]
    """A dict that forgets everything past ``limit`` entries: a memo for repeated strings that
    must not grow with adversarial input."""

    def __init__(self, limit: int = 1 << 16) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: Any, value: bytes) -> bytes:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


def _attr(name_part: bytes, value_part: bytes) -> bytes:
    return length_delimited(TAG_ATTR, name_part + value_part)


def int64_attr(name_part: bytes, value: Any, what: str) -> bytes:
    if value is None:
        return _attr(name_part, b"")
    value = check_int64(value, what)
    return _attr(name_part, _TAG_INT64 + varint(value % _U64))


def string_attr(name_part: bytes, value: Any, what: str) -> bytes:
    if value is None:
        return _attr(name_part, b"")
    if type(value) is not str:
        raise ValueError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    return _attr(name_part, length_delimited(_TAG_STRING, utf8(value, what)))


def bool_attr(name_part: bytes, value: bool) -> bytes:
    return _attr(name_part, _TAG_BOOL + (b"\x01" if value else b"\x00"))


# -- node pieces --------------------------------------------------------------------------------
_IO_FIELD_CACHE = BoundedCache()  # (io tag, text) -> encoded field; shapes and types repeat a lot


def _io_field(io_tag: bytes, text: str, what: str) -> bytes:
    if not text:
        return b""
    if len(text) < 256:
        cached = _IO_FIELD_CACHE.get((io_tag, text))
        if cached is not None:
            return cached
        return _IO_FIELD_CACHE.remember((io_tag, text), length_delimited(io_tag, utf8(text, what)))
    return length_delimited(io_tag, utf8(text, what))


def io_info(tag: bytes, io: Any, what: str) -> bytes:
    """The ``inputs``/``outputs`` field: ``str()`` of values, shapes and types, as the reference."""
    try:
        values, shapes, types = io["values"], io["shapes"], io["types"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{what} lacks 'values', 'shapes' or 'types'") from exc
    tag_values, tag_shapes, tag_types = _TAG_IO
    text = str(values)  # tensor ids make these unique: not worth caching
    encoded = utf8(text, what) if text else b""
    payload = (
        (tag_values + varint(len(encoded)) + encoded if text else b"")
        + _io_field(tag_shapes, str(shapes), what)
        + _io_field(tag_types, str(types), what)
    )
    return tag + varint(len(payload)) + payload


def duration(value: int) -> bytes:
    return TAG_DURATION + varint(check_uint64(value, "duration")) if value else b""


_TYPE_FIELDS = [TAG_TYPE + varint(v) for v in range(128)]


def head(node_id: int, name_field: bytes, node_type: int, ctrl_deps: Sequence[int], data_deps: Sequence[int]) -> bytes:
    """id, name, type, ctrl_deps and data_deps (packed), as ``Node.SerializeToString`` orders them."""
    out = (TAG_ID + varint(node_id) if node_id else b"") + name_field + _TYPE_FIELDS[node_type]
    if ctrl_deps:
        ctrl = b"".join(map(varint, ctrl_deps))
        out += TAG_CTRL + varint(len(ctrl)) + ctrl
    if data_deps:
        data = b"".join(map(varint, data_deps))
        out += TAG_DATA + varint(len(data)) + data
    return out


def name_field(name: str, what: str) -> bytes:
    return length_delimited(TAG_NAME, utf8(name, what)) if name else b""


def delimited_message(message: bytes) -> bytes:
    """Length prefix + message, as the reference's ``encodeMessage`` writes each record."""
    return varint(len(message)) + message
