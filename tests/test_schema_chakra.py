"""The Chakra schema facts the package declares (converter/schema/chakra.py) are et_def.proto's."""

from __future__ import annotations

from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor

from chakra_convert_fast.converter.schema import chakra

WIRE = {
    FieldDescriptor.TYPE_STRING: chakra.WIRE_LEN,
    FieldDescriptor.TYPE_BYTES: chakra.WIRE_LEN,
    FieldDescriptor.TYPE_MESSAGE: chakra.WIRE_LEN,
    FieldDescriptor.TYPE_DOUBLE: chakra.WIRE_FIXED64,
    FieldDescriptor.TYPE_FLOAT: chakra.WIRE_FIXED32,
    FieldDescriptor.TYPE_FIXED32: chakra.WIRE_FIXED32,
    FieldDescriptor.TYPE_SFIXED32: chakra.WIRE_FIXED32,
    FieldDescriptor.TYPE_FIXED64: chakra.WIRE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64: chakra.WIRE_FIXED64,
}


def wire_type(field: FieldDescriptor) -> int:
    if field.is_repeated and field.type != FieldDescriptor.TYPE_MESSAGE:
        return chakra.WIRE_LEN  # proto3 packs repeated scalars
    if field.is_repeated:
        return chakra.WIRE_LEN
    return WIRE.get(field.type, chakra.WIRE_VARINT)


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (chakra.NODE_FIELDS, pb.Node),
        (chakra.IO_FIELDS, pb.IOInfo),
        (chakra.GLOBAL_METADATA_FIELDS, pb.GlobalMetadata),
        (chakra.ATTRIBUTE_FIELDS, pb.AttributeProto),
    ],
)
def test_field_numbers_and_wire_types(declared: dict[str, tuple[int, int]], message: Any) -> None:
    fields = message.DESCRIPTOR.fields_by_name
    for name, (number, wire) in declared.items():
        assert fields[name].number == number, name
        assert wire_type(fields[name]) == wire, name
    assert set(declared) == set(fields)


@pytest.mark.parametrize(
    ("declared", "enum"), [(chakra.NodeType, "NodeType"), (chakra.CollectiveCommType, "CollectiveCommType")]
)
def test_enum_values(declared: type, enum: str) -> None:
    values = {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name[enum].values}
    assert {m.name: m.value for m in declared} == values  # type: ignore[attr-defined]
