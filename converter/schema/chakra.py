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

#: ``AttributeProto`` fields this package writes or reads back (the ``value`` oneof holds many
#: more; a reader skips those by wire type).
ATTRIBUTE_FIELDS: dict[str, tuple[int, int]] = {
    "name": (1, WIRE_LEN),
    "doc_string": (2, WIRE_LEN),
    "double_val": (3, WIRE_FIXED64),
    "float_val": (5, WIRE_FIXED32),
    "int32_val": (7, WIRE_VARINT),
    "int64_val": (9, WIRE_VARINT),
    "uint32_val": (11, WIRE_VARINT),
    "uint64_val": (13, WIRE_VARINT),
    "sint32_val": (15, WIRE_VARINT),
    "sint64_val": (17, WIRE_VARINT),
    "bool_val": (27, WIRE_VARINT),
    "string_val": (29, WIRE_LEN),
    "bytes_val": (31, WIRE_LEN),
}


def tag(field: tuple[int, int]) -> int:
    """The key of a field on the wire: ``number << 3 | wire type``."""
    number, wire_type = field
    return number << 3 | wire_type
