"""A Chakra ``Node``, encoded in pieces that can be spliced, and the ``GlobalMetadata`` record.

Building a ``Node`` message per operator costs ~12 us (most of the reference's time); a node's
bytes are the concatenation of its fields' encodings in field-number order, so the fields known
while reading (the *tail*: duration, inputs, outputs, attrs) are encoded once, as the node is
read, and the *head* (id, name, type, ctrl_deps, data_deps) is prepended when the graph is done;
communication attributes that depend on other nodes go after the tail. Every value follows the
reference's ``convert_json_to_protobuf_node``; a value it could not encode raises ValueError with
a readable reason. Tests compare every piece with ``SerializeToString``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..schema.chakra import GLOBAL_METADATA_FIELDS, IO_FIELDS, NODE_FIELDS, NodeType
from . import wire
from .wire import SMALL, BoundedCache, varint

_HEAD = ("id", "name", "type", "ctrl_deps", "data_deps")
_TAIL = ("duration_micros", "inputs", "outputs", "attr")
assert [NODE_FIELDS[f][0] for f in _HEAD + _TAIL] == sorted(NODE_FIELDS[f][0] for f in _HEAD + _TAIL), (
    "Node field order changed; head/tail splicing is no longer valid"
)
TAG_ID, TAG_NAME, TAG_TYPE, TAG_CTRL, TAG_DATA = (wire.key(NODE_FIELDS[f]) for f in _HEAD)
TAG_DURATION, TAG_INPUTS, TAG_OUTPUTS, _ = (wire.key(NODE_FIELDS[f]) for f in _TAIL)
_TAG_IO_VALUES, _TAG_IO_SHAPES, _TAG_IO_TYPES = (wire.key(IO_FIELDS[f]) for f in ("values", "shapes", "types"))
_TAG_METADATA_ATTR = wire.key(GLOBAL_METADATA_FIELDS["attr"])


# -- head -----------------------------------------------------------------------------------------
_TYPE_FIELDS = [b""] + [TAG_TYPE + varint(v) for v in range(1, 128)]  # proto3 omits the zero enum


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
    return wire.length_delimited(TAG_NAME, wire.utf8(name, what)) if name else b""


def name_and_type(name: str, node_type: int) -> bytes:
    """The name and type fields, which many nodes share (raises ValueError for a bad name)."""
    return name_field(name, "name") + _TYPE_FIELDS[node_type]


def delimited_node(
    node_id: int, name_and_type_fields: bytes, ctrl_dep: int, data_deps: Sequence[int], rest: bytes
) -> bytes:
    """A whole length-delimited ``Node`` record: ``head`` (with at most one ctrl_dep, none if
    ``ctrl_dep`` < 0) and the ``rest`` of the node (tail and communication attrs)."""
    message = (TAG_ID + varint(node_id) if node_id else b"") + name_and_type_fields
    if ctrl_dep >= 0:
        ctrl = varint(ctrl_dep)
        message += TAG_CTRL + SMALL[len(ctrl)] + ctrl
    if data_deps:
        data = varint(data_deps[0]) if len(data_deps) == 1 else b"".join(map(varint, data_deps))
        message = b"".join((message, TAG_DATA, varint(len(data)), data, rest))
    else:
        message += rest
    size = len(message)
    return (SMALL[size] if size < 16384 else varint(size)) + message


# -- tail: duration, inputs, outputs, attrs ------------------------------------------------------
def duration_micros(name: str, exclusive_dur: Any) -> int:
    """``int(exclusive_dur)``, forced to 0 for ``Optimizer.step`` (it spans most of the step)."""
    try:
        value = int(exclusive_dur)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"exclusive_dur {exclusive_dur!r} is not a number") from exc
    return 0 if "Optimizer.step" in name else value


def duration(value: int) -> bytes:
    return TAG_DURATION + varint(wire.check_uint64(value, "duration")) if value else b""


def duration_of(tail_bytes: bytes) -> int:
    """The duration a tail holds (its first field, if any), else 0."""
    if not tail_bytes.startswith(TAG_DURATION):
        return 0
    value, shift, at = 0, 0, len(TAG_DURATION)
    while True:
        byte = tail_bytes[at]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift, at = shift + 7, at + 1


def without_duration(tail_bytes: bytes) -> bytes:
    """A tail with its duration (its first field, if any) taken out."""
    if not tail_bytes.startswith(TAG_DURATION):
        return tail_bytes
    end = len(TAG_DURATION)
    while tail_bytes[end] & 0x80:
        end += 1
    return tail_bytes[end + 1 :]


_IO_FIELD_CACHE: BoundedCache[bytes] = BoundedCache()  # (io tag, text) -> encoded field; shapes and types repeat a lot


def _io_field(io_tag: bytes, text: str, what: str) -> bytes:
    if not text:
        return b""
    if len(text) < 256:
        cached = _IO_FIELD_CACHE.get((io_tag, text))
        if cached is not None:
            return cached
        return _IO_FIELD_CACHE.remember((io_tag, text), wire.length_delimited(io_tag, wire.utf8(text, what)))
    return wire.length_delimited(io_tag, wire.utf8(text, what))


def io_info(field_tag: bytes, io: Any, what: str) -> bytes:
    """The ``inputs``/``outputs`` field: ``str()`` of values, shapes and types, as the reference."""
    try:
        values, shapes, types = io["values"], io["shapes"], io["types"]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{what} lacks 'values', 'shapes' or 'types'") from exc
    return io_field(field_tag, str(values), str(shapes), str(types), what)


def io_field(field_tag: bytes, values: str, shapes: str, types: str, what: str) -> bytes:
    """The ``inputs``/``outputs`` field from the ``str()`` of its three lists."""
    return io_field_with(field_tag, values, shapes_and_types(shapes, types, what), what)


def shapes_and_types(shapes: str, types: str, what: str) -> bytes:
    """The shapes and types parts of an ``inputs``/``outputs`` field (they repeat a lot)."""
    return _io_field(_TAG_IO_SHAPES, shapes, what) + _io_field(_TAG_IO_TYPES, types, what)


def io_field_with(field_tag: bytes, values: str, shapes_and_types_part: bytes, what: str) -> bytes:
    """The ``inputs``/``outputs`` field from the ``str()`` of its values and its encoded rest."""
    if values:
        encoded = wire.utf8(values, what)  # tensor ids make these unique: not cached
        payload = _TAG_IO_VALUES + varint(len(encoded)) + encoded + shapes_and_types_part
    else:
        payload = shapes_and_types_part
    return field_tag + varint(len(payload)) + payload


#: (attribute, encoder) in the order the reference appends them.
_INT_ATTRS = tuple(wire.Int64Attr(name) for name in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid"))
_RF_ID, _FW_PARENT, _SEQ_ID, _SCOPE, _TID, _FW_TID = _INT_ATTRS
#: Encoders of rf_id, fw_parent and seq_id, the attrs that change from node to node.
LEADING_ATTRS = (_RF_ID, _FW_PARENT, _SEQ_ID)
_OP_SCHEMA = wire.attr_name("op_schema")
_OP_SCHEMA_CACHE: BoundedCache[bytes] = BoundedCache()  # op_schema value -> encoded attr; a few hundred distinct ones
_IS_CPU_OP = wire.attr_name("is_cpu_op")
_STREAM_ATTR = wire.Int64Attr("stream")
_IS_CPU = wire.bool_attr(_IS_CPU_OP, True)
_IS_GPU = wire.bool_attr(_IS_CPU_OP, False)
#: The attrs after rf_id repeat from node to node (same thread, scope, schema): encode them once.
_ATTR_BLOCKS: BoundedCache[bytes] = BoundedCache()


def tail(fields: dict[str, Any], name: str, is_gpu: bool, duration_value: int) -> bytes:
    """duration, inputs, outputs and the attrs every node gets (not the comm ones)."""
    try:
        rf_id = fields["rf_id"]
        rest_key = (
            fields["fw_parent"],
            fields["seq_id"],
            fields["scope"],
            fields["tid"],
            fields["fw_tid"],
            fields["op_schema"],
            is_gpu,
            fields["stream"],
        )
    except KeyError as exc:
        raise ValueError(f"lacks the attribute {exc} (expected in 'attrs')") from None
    if _cacheable(rest_key):
        rest = _ATTR_BLOCKS.get(rest_key)
        if rest is None:
            rest = _ATTR_BLOCKS.remember(rest_key, _attrs_after_rf_id(rest_key))
    else:
        rest = _attrs_after_rf_id(rest_key)  # raises for values protobuf would refuse
    return b"".join(
        (
            duration(duration_value),
            io_info(TAG_INPUTS, fields["inputs"], "inputs"),
            io_info(TAG_OUTPUTS, fields["outputs"], "outputs"),
            _RF_ID(rf_id),
            rest,
        )
    )


def _cacheable(key: tuple[Any, ...]) -> bool:
    """Only exact types may share a cache entry: ``True == 1 == 1.0`` as dict keys, but protobuf
    takes the int and refuses the bool and the float."""
    fw_parent, seq_id, scope, tid, fw_tid, op_schema, _, stream = key
    return (
        type(fw_parent) is int
        and type(seq_id) is int
        and type(scope) is int
        and type(tid) is int
        and type(fw_tid) is int
        and type(op_schema) is str
        and (stream is None or type(stream) is int)
    )


def _attrs_after_rf_id(values: tuple[Any, ...]) -> bytes:
    fw_parent, seq_id, *rest = values
    return _FW_PARENT(fw_parent) + _SEQ_ID(seq_id) + attrs_after_seq_id(*rest)


def attrs_after_seq_id(scope: Any, tid: Any, fw_tid: Any, op_schema: Any, is_gpu: bool, stream: Any) -> bytes:
    """scope, tid, fw_tid, op_schema, is_cpu_op and stream (when not None): they repeat."""
    parts = [_SCOPE(scope), _TID(tid), _FW_TID(fw_tid), _op_schema(op_schema), _IS_GPU if is_gpu else _IS_CPU]
    if stream is not None:
        parts.append(_STREAM_ATTR(stream))
    return b"".join(parts)


def _op_schema(value: Any) -> bytes:
    if type(value) is str:
        cached = _OP_SCHEMA_CACHE.get(value)
        if cached is not None:
            return cached
        return _OP_SCHEMA_CACHE.remember(value, wire.string_attr(_OP_SCHEMA, value, "op_schema"))
    return wire.string_attr(_OP_SCHEMA, value, "op_schema")


# -- communication attributes (after the tail) ---------------------------------------------------
_COMM_TYPE = wire.attr_name("comm_type")
_COMM_SIZE = wire.attr_name("comm_size")
_PG_NAME = wire.attr_name("pg_name")


def comm_attrs(node_type: int, comm_type: int | None, comm_size: int, pg_name: Any) -> bytes:
    """comm_type (collectives), comm_size and pg_name (when not empty) of a communication node."""
    parts = []
    if node_type == NodeType.COMM_COLL_NODE:
        parts.append(wire.int64_attr(_COMM_TYPE, comm_type, "comm_type"))
    parts.append(wire.int64_attr(_COMM_SIZE, comm_size, "comm_size"))
    if pg_name != "":
        parts.append(wire.string_attr(_PG_NAME, pg_name, "pg_name"))
    return b"".join(parts)


_P2P_ATTRS = tuple((name, wire.attr_name(name)) for name in ("comm_src", "comm_dst", "comm_tag"))


def p2p_attrs(src: int | None, dst: int | None, tag: int | None) -> bytes:
    """comm_src, comm_dst and comm_tag of a send or receive, each where it is known."""
    return b"".join(
        wire.int64_attr(name_part, value, name)
        for (name, name_part), value in zip(_P2P_ATTRS, (src, dst, tag), strict=True)
        if value is not None
    )


# -- records --------------------------------------------------------------------------------------
_METADATA_ATTRS = (
    ("schema", wire.string_attr),
    ("pid", wire.uint64_attr),
    ("time", wire.string_attr),
    ("start_ts", wire.uint64_attr),
    ("finish_ts", wire.uint64_attr),
)


#: The job's rank count, after the reference's attributes where it is known (``--astra-sim``).
WORLD_SIZE = "world_size"
#: The trace's own rank in that job (its ``distributedInfo.rank``, or the rank asked for).
RANK = "rank"
#: The job's process groups as the trace lists them: JSON ``{pg_name: [ranks]}``.
PROCESS_GROUPS = "process_groups"
_JOB_ATTRS = ((WORLD_SIZE, wire.uint64_attr), (RANK, wire.uint64_attr), (PROCESS_GROUPS, wire.string_attr))


#: GlobalMetadata notes a rewrite keeps (``scale`` re-encodes the record): a Kineto conversion's
#: what-if and kernels left as CPU ops (``kineto/write.py``), and what a replay is judged against
#: (``baseline.py``: both front ends, with the profiler's time handled).
NOTE_ATTRS = ("whatif", "gpu_as_cpu", "replay_baseline")


def global_metadata(metadata: dict[str, Any], notes: dict[str, str] | None = None) -> bytes:
    """The GlobalMetadata record the reference writes: schema, pid, time, start_ts, finish_ts (then
    ``world_size``, ``rank`` and ``process_groups``, each where ``metadata`` holds it: what the
    trace records of its job, written outside the reference's bytes only); ``notes``: string
    attributes after them (a Kineto conversion's what-if and kernels left as CPU ops, read by
    ``simulate``)."""
    message = b"".join(
        encode(wire.attr_name(name), metadata[name], name, _TAG_METADATA_ATTR) for name, encode in _METADATA_ATTRS
    )
    for name, encode in _JOB_ATTRS:
        if metadata.get(name) is not None:
            message += encode(wire.attr_name(name), metadata[name], name, _TAG_METADATA_ATTR)
    kept = {name: metadata[name] for name in NOTE_ATTRS if isinstance(metadata.get(name), str)}
    for name, value in {**kept, **(notes or {})}.items():
        message += wire.string_attr(wire.attr_name(name), value, name, _TAG_METADATA_ATTR)
    return wire.delimited_message(message)


def node_record(head_bytes: bytes, tail_bytes: bytes, comm_bytes: bytes = b"") -> bytes:
    """One length-delimited ``Node`` record from its spliced pieces."""
    return wire.delimited_message(head_bytes + tail_bytes + comm_bytes)


# -- roofline attributes (ASTRA-sim's compute model) and the accelerator target -------------------
_NUM_OPS = wire.attr_name("num_ops")
_TENSOR_SIZE = wire.attr_name("tensor_size")


_ROOFLINE_CACHE: BoundedCache[bytes] = BoundedCache()  # (num_ops, tensor_size) -> attrs; (1, 1) most of all


def roofline_attrs(num_ops: int, tensor_size: int) -> bytes:
    """``num_ops`` (int64, FLOPs) and ``tensor_size`` (uint64, bytes), read by ASTRA-sim's roofline."""
    key = (num_ops, tensor_size)
    found = _ROOFLINE_CACHE.get(key)
    if found is None:
        found = _ROOFLINE_CACHE.remember(
            key,
            wire.int64_attr(_NUM_OPS, num_ops, "num_ops") + wire.uint64_attr(_TENSOR_SIZE, tensor_size, "tensor_size"),
        )
    return found


def as_accelerator_op(rest: bytes) -> bytes:
    """A tail with its ``is_cpu_op`` true made false (the last such attribute: the one every tail
    ends its attrs block with, before ``stream``); the same length."""
    at = rest.rfind(_IS_CPU)
    if at < 0:
        return rest
    return rest[:at] + _IS_GPU + rest[at + len(_IS_CPU) :]


def as_cpu_op(rest: bytes) -> bytes:
    """A tail with its ``is_cpu_op`` false made true (``as_accelerator_op`` the other way)."""
    at = rest.rfind(_IS_GPU)
    if at < 0:
        return rest
    return rest[:at] + _IS_CPU + rest[at + len(_IS_GPU) :]
