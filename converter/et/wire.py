"""Protobuf wire primitives: varints, field keys, and the ``AttributeProto`` values we write.

Field numbers and wire types come from ``schema.chakra``. Type and range checks follow the
protobuf runtime (int fields take only ``int``, never ``bool`` or ``float``; ``None`` leaves a
oneof unset), so a value the reference cannot encode fails here too, with a readable message.
"""

from __future__ import annotations

import struct
from typing import Any, TypeVar

from ..schema.chakra import ATTRIBUTE_FIELDS, ATTRIBUTE_VALUE_KINDS, NODE_FIELDS, WIRE_LEN, tag

_U64 = 1 << 64
_V = TypeVar("_V")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
SMALL = [bytes([v]) for v in range(0x80)] + [bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(0x80, 1 << 14)]


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int below 2**64."""
    if value < 16384:
        return SMALL[value]
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


def key(field: tuple[int, int]) -> bytes:
    """The encoded key (tag) of a field."""
    return varint(tag(field))


def length_delimited(field_key: bytes, payload: bytes) -> bytes:
    return field_key + varint(len(payload)) + payload


def delimited_message(message: bytes) -> bytes:
    """Length prefix + message, as the reference's ``encodeMessage`` writes each record."""
    return varint(len(message)) + message


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


class BoundedCache(dict[Any, _V]):
    """A dict that forgets everything past ``limit`` entries: a memo for repeated strings that
    must not grow with adversarial input."""

    def __init__(self, limit: int = 1 << 16) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: Any, value: _V) -> _V:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


# -- attributes (Node.attr / GlobalMetadata.attr entries) ------------------------------------
TAG_ATTR = key(NODE_FIELDS["attr"])
_TAG_ATTR_NAME = key(ATTRIBUTE_FIELDS["name"])
_TAG_INT64 = key(ATTRIBUTE_FIELDS["int64_val"])
_TAG_UINT64 = key(ATTRIBUTE_FIELDS["uint64_val"])
_TAG_STRING = key(ATTRIBUTE_FIELDS["string_val"])
_TAG_BOOL = key(ATTRIBUTE_FIELDS["bool_val"])


def attr_name(name: str) -> bytes:
    """The ``name`` part of an attribute, shared by every value of that attribute."""
    return length_delimited(_TAG_ATTR_NAME, name.encode("utf-8"))


def attribute(name_part: bytes, value_part: bytes, field_key: bytes = TAG_ATTR) -> bytes:
    """One attribute entry (a length-delimited ``AttributeProto``) under ``field_key``."""
    return length_delimited(field_key, name_part + value_part)


class Int64Attr:
    """Encoder of one named int64 attribute; values below 2**14 come from a table filled as they
    come (most of them), negative and huge ones are remembered (``seq_id`` is often -1, which
    takes ten bytes)."""

    __slots__ = ("_name_part", "_others", "_prefix", "_table", "what")

    def __init__(self, name: str) -> None:
        self.what = name
        self._name_part = attr_name(name)
        self._prefix = self._name_part + _TAG_INT64
        self._table: list[bytes | None] = [None] * (1 << 14)  # filled as values come (1 MB full)
        self._others: BoundedCache[bytes] = BoundedCache(1 << 12)

    def __call__(self, value: Any) -> bytes:
        if type(value) is int:
            if 0 <= value < 268435456:
                if value < 16384:
                    found = self._table[value]
                    if found is None:
                        found = self._table[value] = attribute(self._name_part, _TAG_INT64 + SMALL[value])
                    return found
                body = self._prefix + varint(value)
                return TAG_ATTR + SMALL[len(body)] + body
            found = self._others.get(value)
            if found is not None:
                return found
            return self._others.remember(value, int64_attr(self._name_part, value, self.what))
        return int64_attr(self._name_part, value, self.what)


def int64_attr(name_part: bytes, value: Any, what: str) -> bytes:
    if value is None:
        return attribute(name_part, b"")
    value = check_int64(value, what)
    return attribute(name_part, _TAG_INT64 + varint(value % _U64))


def uint64_attr(name_part: bytes, value: Any, what: str, field_key: bytes = TAG_ATTR) -> bytes:
    if value is None:
        return attribute(name_part, b"", field_key)
    value = check_uint64(value, what)
    return attribute(name_part, _TAG_UINT64 + varint(value), field_key)


def string_attr(name_part: bytes, value: Any, what: str, field_key: bytes = TAG_ATTR) -> bytes:
    if value is None:
        return attribute(name_part, b"", field_key)
    if type(value) is not str:
        raise ValueError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    return attribute(name_part, length_delimited(_TAG_STRING, utf8(value, what)), field_key)


def bool_attr(name_part: bytes, value: bool) -> bytes:
    return attribute(name_part, _TAG_BOOL + (b"\x01" if value else b"\x00"))


# -- any AttributeProto value kind (the generator's all-types node) ---------------------------
_FIXED = {"double": "<d", "float": "<f", "fixed32": "<I", "sfixed32": "<i", "fixed64": "<Q", "sfixed64": "<q"}
_TAG_LIST_VALUES = varint(tag((1, WIRE_LEN)))


def _element(base: str, value: Any) -> bytes:
    """One value of kind ``base`` as protobuf writes it (without a key)."""
    if base in _FIXED:
        return struct.pack(_FIXED[base], value)
    if base == "string":
        return utf8(value, "a string attribute")
    if base == "bytes":
        return bytes(value)
    if base == "bool":
        return b"\x01" if value else b"\x00"
    if base == "sint32":
        return varint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)
    if base == "sint64":
        return varint(((value << 1) ^ (value >> 63)) % _U64)
    return varint(value % _U64)  # int32 (sign-extended to 64 bits), int64, uint32, uint64


def attribute_message(name: str, kind: str | None = None, value: Any = None, doc_string: str = "") -> bytes:
    """An ``AttributeProto`` (without its outer key) as ``SerializeToString`` writes it: name,
    doc_string, then the ``kind`` member of the value oneof (``"double_val"``, ``"int64_list"``...;
    a list kind takes a sequence)."""
    out = length_delimited(_TAG_ATTR_NAME, utf8(name, "an attribute name")) if name else b""
    if doc_string:
        out += length_delimited(key(ATTRIBUTE_FIELDS["doc_string"]), utf8(doc_string, "a doc_string"))
    if kind is None:
        return out
    base, _, shape = kind.rpartition("_")
    if base not in ATTRIBUTE_VALUE_KINDS or shape not in ("val", "list"):
        raise ValueError(f"no such attribute value kind: {kind}")
    field_key = key(ATTRIBUTE_FIELDS[kind])
    if shape == "val":
        encoded = _element(base, value)
        return (
            out + field_key + (varint(len(encoded)) + encoded if ATTRIBUTE_VALUE_KINDS[base] == WIRE_LEN else encoded)
        )
    if ATTRIBUTE_VALUE_KINDS[base] == WIRE_LEN:  # strings and bytes: one field 1 per value
        body = b"".join(length_delimited(_TAG_LIST_VALUES, _element(base, v)) for v in value)
    else:
        packed = b"".join(_element(base, v) for v in value)
        body = length_delimited(_TAG_LIST_VALUES, packed) if packed else b""
    return out + length_delimited(field_key, body)
