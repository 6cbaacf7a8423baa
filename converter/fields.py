"""What a Chakra node carries, field by field, as the reference's ``convert_json_to_protobuf_node``.

``encode_tail`` returns the bytes of duration, inputs, outputs and attrs; ``comm_attrs`` the
communication attributes the reference appends to NCCL kernels. Both raise ValueError with a
readable reason when a value cannot be encoded (the reference would crash on it).
"""

from __future__ import annotations

from typing import Any

from chakra.schema.protobuf import et_def_pb2 as pb

from . import encoding as enc

#: (attribute, encoder) in the order the reference appends them.
_INT_ATTRS = tuple(enc.Int64Attr(name) for name in ("rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid"))
_RF_ID = _INT_ATTRS[0]
_OP_SCHEMA = enc.attr_name("op_schema")
_OP_SCHEMA_CACHE = enc.BoundedCache()  # op_schema value -> encoded attr; a few hundred distinct ones
_IS_CPU_OP = enc.attr_name("is_cpu_op")
_STREAM_ATTR = enc.Int64Attr("stream")
_COMM_TYPE = enc.attr_name("comm_type")
_COMM_SIZE = enc.attr_name("comm_size")
_PG_NAME = enc.attr_name("pg_name")
_IS_CPU = enc.bool_attr(_IS_CPU_OP, True)
_IS_GPU = enc.bool_attr(_IS_CPU_OP, False)


def duration_micros(name: str, exclusive_dur: Any) -> int:
    """``int(exclusive_dur)``, forced to 0 for ``Optimizer.step`` (it spans most of the step)."""
    try:
        value = int(exclusive_dur)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"exclusive_dur {exclusive_dur!r} is not a number") from exc
    return 0 if "Optimizer.step" in name else value


def encode_tail(fields: dict[str, Any], name: str, is_gpu: bool, duration: int) -> bytes:
    """duration, inputs, outputs and the attrs every node gets (not the comm ones)."""
    try:
        rf_id = fields["rf_id"]
        rest_key = (fields["fw_parent"], fields["seq_id"], fields["scope"], fields["tid"], fields["fw_tid"],
                    fields["op_schema"], is_gpu, fields["stream"])
    except KeyError as exc:
        raise ValueError(f"lacks the attribute {exc} (expected in 'attrs')") from None
    if _cacheable(rest_key):
        rest = _ATTR_BLOCKS.get(rest_key)
        if rest is None:
            rest = _ATTR_BLOCKS.remember(rest_key, _encode_attrs_after_rf_id(rest_key))
    else:
        rest = _encode_attrs_after_rf_id(rest_key)  # raises for values protobuf would refuse
    return b"".join(
        (
            enc.duration(duration),
            enc.io_info(enc.TAG_INPUTS, fields["inputs"], "inputs"),
            enc.io_info(enc.TAG_OUTPUTS, fields["outputs"], "outputs"),
            _RF_ID(rf_id),
            rest,
        )
    )


#: The attrs after rf_id repeat from node to node (same thread, scope, schema): encode them once.
_ATTR_BLOCKS = enc.BoundedCache()


def _cacheable(key: tuple[Any, ...]) -> bool:
    """Only exact types may share a cache entry: ``True == 1 == 1.0`` as dict keys, but protobuf
    takes the int and refuses the bool and the float."""
    fw_parent, seq_id, scope, tid, fw_tid, op_schema, _, stream = key
    return (
        type(fw_parent) is int and type(seq_id) is int and type(scope) is int and type(tid) is int
        and type(fw_tid) is int and type(op_schema) is str and (stream is None or type(stream) is int)
    )


def _encode_attrs_after_rf_id(values: tuple[Any, ...]) -> bytes:
    *ints, op_schema, is_gpu, stream = values
    parts = [encode(value) for encode, value in zip(_INT_ATTRS[1:], ints, strict=True)]
    parts.append(_op_schema(op_schema))
    parts.append(_IS_GPU if is_gpu else _IS_CPU)
    if stream is not None:
        parts.append(_STREAM_ATTR(stream))
    return b"".join(parts)


def _op_schema(value: Any) -> bytes:
    if type(value) is str:
        cached = _OP_SCHEMA_CACHE.get(value)
        if cached is not None:
            return cached
        return _OP_SCHEMA_CACHE.remember(value, enc.string_attr(_OP_SCHEMA, value, "op_schema"))
    return enc.string_attr(_OP_SCHEMA, value, "op_schema")


def comm_attrs(node_type: int, comm_type: int | None, comm_size: int, pg_name: Any) -> bytes:
    """comm_type (collectives), comm_size and pg_name (when not empty) of a communication node."""
    parts = []
    if node_type == pb.COMM_COLL_NODE:
        parts.append(enc.int64_attr(_COMM_TYPE, comm_type, "comm_type"))
    parts.append(enc.int64_attr(_COMM_SIZE, comm_size, "comm_size"))
    if pg_name != "":
        parts.append(enc.string_attr(_PG_NAME, pg_name, "pg_name"))
    return b"".join(parts)
