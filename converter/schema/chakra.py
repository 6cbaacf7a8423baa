"""The Chakra execution-trace schema facts this package needs, declared once.

These are the field numbers, wire types and enum values of ``et_def.proto`` (mlc-chakra 1.0.0,
``chakra.schema.protobuf.et_def_pb2``). The package encodes and decodes ``.et`` files with them
directly, so it needs neither protobuf nor mlc-chakra at run time; the test suite checks every
number here against ``et_def_pb2``'s descriptors.
"""

from __future__ import annotations

from enum import IntEnum

#: Protobuf wire types used by the schema.
WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LEN = 2
WIRE_FIXED32 = 5


class NodeType(IntEnum):
    """``ChakraProtoMsg.NodeType``."""

    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    """``ChakraProtoMsg.CollectiveCommType``."""

    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


COMM_NODE_TYPES = frozenset({NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE})

#: ``Node`` fields: name -> (number, wire type). Repeated scalars are packed (length-delimited).
NODE_FIELDS: dict[str, tuple[int, int]] = {
    "id": (1, WIRE_VARINT),
    "name": (2, WIRE_LEN),
    "type": (3, WIRE_VARINT),
    "ctrl_deps": (4, WIRE_LEN),
    "data_deps": (5, WIRE_LEN),
    "start_time_micros": (6, WIRE_VARINT),
    "duration_micros": (7, WIRE_VARINT),
    "inputs": (8, WIRE_LEN),
    "outputs": (9, WIRE_LEN),
    "attr": (10, WIRE_LEN),
}

#: ``IOInfo`` fields (the ``str()`` of a node's values, shapes and types).
IO_FIELDS: dict[str, tuple[int, int]] = {
    "values": (1, WIRE_LEN),
    "shapes": (2, WIRE_LEN),
    "types": (3, WIRE_LEN),
}

#: ``GlobalMetadata`` fields.
GLOBAL_METADATA_FIELDS: dict[str, tuple[int, int]] = {
    "version": (1, WIRE_LEN),
    "attr": (2, WIRE_LEN),
}

#: The value kinds of ``AttributeProto``'s ``value`` oneof, in field order, with the wire type of
#: one element: ``<kind>_val`` is field 3 + 2i, ``<kind>_list`` (a ``<Kind>List`` message whose
#: field 1, ``values``, is packed for numbers) field 4 + 2i.
ATTRIBUTE_VALUE_KINDS: dict[str, int] = {
    "double": WIRE_FIXED64,
    "float": WIRE_FIXED32,
    "int32": WIRE_VARINT,
    "int64": WIRE_VARINT,
    "uint32": WIRE_VARINT,
    "uint64": WIRE_VARINT,
    "sint32": WIRE_VARINT,
    "sint64": WIRE_VARINT,
    "fixed32": WIRE_FIXED32,
    "fixed64": WIRE_FIXED64,
    "sfixed32": WIRE_FIXED32,
    "sfixed64": WIRE_FIXED64,
    "bool": WIRE_VARINT,
    "string": WIRE_LEN,
    "bytes": WIRE_LEN,
}

#: ``AttributeProto`` fields: name, doc_string, and every member of the ``value`` oneof.
ATTRIBUTE_FIELDS: dict[str, tuple[int, int]] = {"name": (1, WIRE_LEN), "doc_string": (2, WIRE_LEN)}
for _i, (_kind, _wire) in enumerate(ATTRIBUTE_VALUE_KINDS.items()):
    ATTRIBUTE_FIELDS[f"{_kind}_val"] = (3 + 2 * _i, _wire)
    ATTRIBUTE_FIELDS[f"{_kind}_list"] = (4 + 2 * _i, WIRE_LEN)


def tag(field: tuple[int, int]) -> int:
    """The key of a field on the wire: ``number << 3 | wire type``."""
    number, wire_type = field
    return number << 3 | wire_type
