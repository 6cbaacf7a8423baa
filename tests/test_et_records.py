"""The full-record decoder (``et.decode``: every field, every attribute kind) and the attribute
encoder (``et.wire.attribute_message``) against protobuf's own parse and SerializeToString."""

from __future__ import annotations

import math
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from google.protobuf.json_format import MessageToJson
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from chakra_convert_fast.converter.errors import TraceFormatError
from chakra_convert_fast.converter.et import wire
from chakra_convert_fast.converter.et.decode import Malformed
from chakra_convert_fast.converter.et.records import EtRecords, attribute, decode_node, io_info
from chakra_convert_fast.converter.schema.chakra import ATTRIBUTE_VALUE_KINDS
from chakra_convert_fast.converter.tools.jsonize import Printer

U64, I64, U32, I32 = (0, 2**64 - 1), (-(2**63), 2**63 - 1), (0, 2**32 - 1), (-(2**31), 2**31 - 1)
VALUES: dict[str, st.SearchStrategy[Any]] = {
    "double": st.floats(),
    "float": st.floats(width=32),
    "int32": st.integers(*I32),
    "int64": st.integers(*I64),
    "uint32": st.integers(*U32),
    "uint64": st.integers(*U64),
    "sint32": st.integers(*I32),
    "sint64": st.integers(*I64),
    "fixed32": st.integers(*U32),
    "fixed64": st.integers(*U64),
    "sfixed32": st.integers(*I32),
    "sfixed64": st.integers(*I64),
    "bool": st.booleans(),
    "string": st.text(max_size=8),
    "bytes": st.binary(max_size=8),
}
assert set(VALUES) == set(ATTRIBUTE_VALUE_KINDS)


@st.composite
def attribute_args(draw: st.DrawFn) -> tuple[str, str | None, Any, str]:
    base = draw(st.sampled_from(sorted(VALUES)))
    if draw(st.booleans()):
        kind: str | None
        kind, value = f"{base}_val", draw(VALUES[base])
    else:
        kind, value = f"{base}_list", draw(st.lists(VALUES[base], max_size=4))
    if draw(st.integers(0, 9)) == 0:
        kind, value = None, None
    return draw(st.text(max_size=6)), kind, value, draw(st.sampled_from(["", "doc"]))


def _proto(name: str, kind: str | None, value: Any, doc: str) -> pb.AttributeProto:
    attr = pb.AttributeProto(name=name, doc_string=doc)
    if kind is not None and kind.endswith("_val"):
        setattr(attr, kind, value)
    elif kind is not None:
        getattr(attr, kind).SetInParent()
        getattr(attr, kind).values.extend(value)
    return attr


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, float) and math.isnan(ours):
        return isinstance(theirs, float) and math.isnan(theirs)
    if isinstance(ours, list):
        return len(ours) == len(theirs) and all(_same(a, b) for a, b in zip(ours, theirs, strict=True))
    return bool(ours == theirs and type(ours) is type(theirs))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(attribute_args())
def test_attributes_encode_and_decode_as_protobuf(args: tuple[str, str | None, Any, str]) -> None:
    name, kind, value, doc = args
    proto = _proto(name, kind, value, doc)
    encoded = wire.attribute_message(name, kind, value, doc)
    assert encoded == proto.SerializeToString()
    decoded = attribute(encoded)
    assert (decoded.name, decoded.doc_string, decoded.kind) == (name, doc, proto.WhichOneof("value"))
    if kind is not None:
        theirs = getattr(proto, kind)
        assert _same(decoded.value, list(theirs.values) if kind.endswith("_list") else theirs)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(*U64),
    st.text(max_size=8),
    st.integers(0, 7),
    st.lists(st.integers(*U64), max_size=4),
    st.lists(st.integers(*U64), max_size=4),
    st.integers(*U64),
    st.integers(*U64),
    st.lists(attribute_args(), max_size=3),
    st.booleans(),
)
def test_nodes_decode_as_protobuf_parses_them(
    node_id: int,
    name: str,
    node_type: int,
    ctrl: list[int],
    data: list[int],
    start: int,
    duration: int,
    attrs: list[tuple[str, str | None, Any, str]],
    io: bool,
) -> None:
    node = pb.Node(
        id=node_id,
        name=name,
        type=node_type,
        ctrl_deps=ctrl,
        data_deps=data,
        start_time_micros=start,
        duration_micros=duration,
        attr=[_proto(*a) for a in attrs],
    )
    if io:
        node.inputs.values, node.outputs.types = "v", "t"
    decoded = decode_node(node.SerializeToString())
    assert (
        decoded.id,
        decoded.name,
        decoded.type,
        decoded.ctrl_deps,
        decoded.data_deps,
        decoded.start_time_micros,
        decoded.duration_micros,
    ) == (node_id, name, node_type, ctrl, data, start, duration)
    assert decoded.attr == [a.SerializeToString() for a in node.attr]
    if io:
        assert decoded.inputs is not None and decoded.outputs is not None
        assert io_info(decoded.inputs) == ("v", "", "") and io_info(decoded.outputs) == ("", "", "t")
    else:
        assert decoded.inputs is None and decoded.outputs is None


def test_records_stream_and_name_what_does_not_decode(tmp_path: Any) -> None:
    meta = wire.delimited_message(pb.GlobalMetadata(version="2").SerializeToString())
    nodes = [wire.delimited_message(pb.Node(id=i, name=f"n{i}").SerializeToString()) for i in range(1, 4)]
    path = tmp_path / "t.et"
    path.write_bytes(meta + b"".join(nodes))
    with EtRecords(path) as records:
        assert records.metadata.version == "2"
        assert [n.name for n in records.nodes()] == ["n1", "n2", "n3"]
    path.write_bytes(meta + nodes[0] + b"\x05\x0a\xff")  # a record of 5 bytes with 2 left
    with EtRecords(path) as records, pytest.raises(TraceFormatError, match="record 2: truncated"):
        list(records.nodes())


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_decode_as_protobuf_or_are_malformed(data: bytes) -> None:
    """Any byte string that protobuf parses as a Node prints as MessageToJson prints it; the rest
    raise ``Malformed``, never another exception."""
    try:
        parsed = pb.Node.FromString(data)
    except DecodeError:
        parsed = None
    try:
        node = decode_node(data)
        ours = Printer(indent=True).node(node)
        Printer(indent=False).node(node)
    except Malformed:
        ours = None
    if parsed is not None and ours is not None:
        assert ours == MessageToJson(parsed)
    assert (ours is None) == (parsed is None), "one side refuses what the other reads"


@pytest.mark.parametrize(
    "data",
    [
        b"\x5b\x5c",
        b"\x0b\x0c",
        b"\x08\x01\xfb\x07\x0b\x08\x05\x0c\xfc\x07\x12\x01a",
        b"\x0c",
        b"\x0b\x08\x01",
        b"\x0b\x14",
    ],
)
def test_groups_are_unknown_fields_as_protobuf_reads_them(data: bytes) -> None:
    try:
        expected: str | None = MessageToJson(pb.Node.FromString(data))
    except DecodeError:
        expected = None
    try:
        ours: str | None = Printer(indent=True).node(decode_node(data))
    except Malformed:
        ours = None
    assert ours == expected
