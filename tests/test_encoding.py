"""Our spliced wire encoding against protobuf's own SerializeToString, piece by piece."""

from __future__ import annotations

import random
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter.et import encode, wire

INT_EDGES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**62, 2**63 - 1, -1, -128, -(2**63)]
INT_ATTRS = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
STRINGS = ["", "a", "aten::mm", "é中😀", "x" * 300, "quote ' \" and \\ backslash"]


def reference_node(fields: dict, name: str, is_gpu: bool, duration: int) -> pb.Node:
    node = pb.Node()
    node.duration_micros = duration
    for io_name in ("inputs", "outputs"):
        io = getattr(node, io_name)
        io.values = str(fields[io_name]["values"])
        io.shapes = str(fields[io_name]["shapes"])
        io.types = str(fields[io_name]["types"])
    node.attr.extend(
        [pb.AttributeProto(name=a, int64_val=fields[a]) for a in INT_ATTRS]
        + [
            pb.AttributeProto(name="op_schema", string_val=fields["op_schema"]),
            pb.AttributeProto(name="is_cpu_op", bool_val=not is_gpu),
        ]
    )
    if fields["stream"] is not None:
        node.attr.append(pb.AttributeProto(name="stream", int64_val=fields["stream"]))
    return node


def random_fields(rng: random.Random) -> dict:
    def io() -> dict:
        values = rng.choice([[], [[1, 2, 0, 64, 4, "cuda:0"]], [1.5, float("nan"), "s", None, True], "plain"])
        shapes = rng.choice([[], [[2, 3]], [[]]])
        return {"values": values, "shapes": shapes, "types": rng.choice([[], ["Tensor(float)"], ""])}

    names = ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid")
    fields: dict[str, Any] = {a: rng.choice(INT_EDGES) for a in names}
    fields.update(inputs=io(), outputs=io(), op_schema=rng.choice(STRINGS), stream=rng.choice([0, 7, None, 2**40]))
    return fields


@pytest.mark.parametrize("seed", range(200))
def test_tail_matches_protobuf(seed: int) -> None:
    rng = random.Random(seed)
    fields = random_fields(rng)
    is_gpu = rng.random() < 0.5
    duration = rng.choice([0, 1, 300, 2**40])
    expected = reference_node(fields, "op", is_gpu, duration).SerializeToString()
    assert encode.tail(fields, "op", is_gpu, duration) == expected


@pytest.mark.parametrize("node_id", [0, 1, 300, 2**40, 2**64 - 1])
@pytest.mark.parametrize("name", STRINGS)
def test_head_matches_protobuf(node_id: int, name: str) -> None:
    ctrl, data = [node_id // 2], [0, 5, 2**33]
    node = pb.Node(id=node_id, name=name, type=pb.COMM_COLL_NODE, ctrl_deps=ctrl, data_deps=data)
    name_field = encode.name_field(name, "name")
    assert encode.head(node_id, name_field, pb.COMM_COLL_NODE, ctrl, data) == node.SerializeToString()
    bare = pb.Node(id=node_id, name=name, type=pb.COMP_NODE)
    assert encode.head(node_id, encode.name_field(name, "name"), pb.COMP_NODE, (), ()) == bare.SerializeToString()


@pytest.mark.parametrize("comm_type", [pb.ALL_REDUCE, pb.ALL_TO_ALL])
@pytest.mark.parametrize("pg_name", ["", "0", None])
def test_comm_attrs_match_protobuf(comm_type: int, pg_name: object) -> None:
    for node_type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE):
        attrs = []
        if node_type == pb.COMM_COLL_NODE:
            attrs.append(pb.AttributeProto(name="comm_type", int64_val=comm_type))
        attrs.append(pb.AttributeProto(name="comm_size", int64_val=4096))
        if pg_name != "":
            attrs.append(pb.AttributeProto(name="pg_name", string_val=pg_name))
        expected = pb.Node(attr=attrs).SerializeToString()
        assert encode.comm_attrs(node_type, comm_type, 4096, pg_name) == expected


@pytest.mark.parametrize(
    ("attr", "value", "problem"),
    [
        ("rf_id", True, "must be an integer"),
        ("tid", 1.5, "must be an integer"),
        ("scope", 2**63, "int64 range"),
        ("op_schema", 5, "must be a string"),
    ],
)
def test_values_protobuf_rejects_are_rejected(attr: str, value: object, problem: str) -> None:
    fields = random_fields(random.Random(1))
    fields[attr] = value
    with pytest.raises(ValueError, match=problem):
        encode.tail(fields, "op", False, 0)
    with pytest.raises((TypeError, ValueError)):
        reference_node(fields, "op", False, 0).SerializeToString()


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16384, 2**21, 2**28, 2**35, 2**64 - 1])
def test_varint(value: int) -> None:
    assert wire.varint(value) == pb.Node(id=value).SerializeToString()[1:] or value == 0


def test_delimited_message_is_what_protolib_writes() -> None:
    import io

    from chakra.src.third_party.utils.protolib import encodeMessage

    message = pb.Node(id=5, name="x" * 200)
    buffer = io.BytesIO()
    encodeMessage(buffer, message)
    assert wire.delimited_message(message.SerializeToString()) == buffer.getvalue()


@pytest.mark.parametrize("impostor", [True, 1.0])
def test_cached_attr_blocks_do_not_accept_equal_values_of_other_types(impostor: object) -> None:
    """``True == 1 == 1.0`` as dict keys; protobuf refuses the bool and the float."""
    fields = random_fields(random.Random(3))
    fields.update(fw_parent=1, seq_id=1, scope=1, tid=1, fw_tid=1, op_schema="s", stream=1)
    encode.tail(fields, "op", False, 0)  # caches the block of these ints
    with pytest.raises(ValueError, match="must be an integer"):
        encode.tail({**fields, "tid": impostor}, "op", False, 0)


METADATA = {
    "schema": "1.1.1-chakra.0.0.4",
    "pid": 4321,
    "time": "2026-01-01 00:00:00",
    "start_ts": 0,
    "finish_ts": 2**40,
}


@pytest.mark.parametrize(
    "metadata",
    [METADATA, {**METADATA, "pid": None, "time": ""}, {**METADATA, "schema": "é中😀", "start_ts": 2**64 - 1}],
)
def test_global_metadata_matches_protobuf(metadata: dict) -> None:
    message = pb.GlobalMetadata(
        attr=[
            pb.AttributeProto(name="schema", string_val=metadata["schema"]),
            pb.AttributeProto(name="pid", uint64_val=metadata["pid"]),
            pb.AttributeProto(name="time", string_val=metadata["time"]),
            pb.AttributeProto(name="start_ts", uint64_val=metadata["start_ts"]),
            pb.AttributeProto(name="finish_ts", uint64_val=metadata["finish_ts"]),
        ]
    )
    assert encode.global_metadata(metadata) == wire.delimited_message(message.SerializeToString())


@pytest.mark.parametrize(("key", "value"), [("pid", -1), ("pid", True), ("start_ts", 1.5), ("time", 5)])
def test_global_metadata_protobuf_rejects_is_rejected(key: str, value: object) -> None:
    with pytest.raises(ValueError, match=key):
        encode.global_metadata({**METADATA, key: value})
    with pytest.raises((TypeError, ValueError)):
        pb.AttributeProto(name=key, **{"string_val" if key == "time" else "uint64_val": value})
