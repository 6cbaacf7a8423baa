"""Trace input: stream the nodes of a (gzipped) JSON trace as compact records, collect metadata.

Each node is classified and its tail pre-encoded as soon as it is parsed, and only a record is
kept, so memory follows the node count and not the JSON text. Problems the reference
would hit for every node (missing keys, bad ids) raise at once. Problems it would hit only when
it converts the node (an attribute missing on a GPU kernel it later drops, say) are stored on
the record and raised by the graph if the node is converted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import TraceContentError, TraceFormatError, UnsupportedSchemaError
from ..jsonstream import JsonObjectStream
from ..schema.chakra import NodeType
from ..schema.compat import is_old_schema_node, map_old_schema_node
from ..schema.host import (
    ACCEPTED_SCHEMAS,
    METADATA_KEYS,
    OLD_SCHEMA,
    REQUIRED_NODE_KEYS,
    effective_fields,
    unsupported_schema_message,
)
from . import encode, nodes
from .collectives import host_collective, is_host_op
from .records import HostOp, NodeRecord

ProgressHook = Callable[[int, int], None]  # (bytes read, total bytes)
_PROGRESS_EVERY = 2048
_U64 = 1 << 64


class TraceReader:
    """Reads one trace file; iterate ``records()``, then ``check_complete()`` and ``metadata``."""

    def __init__(
        self, path: str | os.PathLike[str], progress: ProgressHook | None = None, *, astra_sim: bool = False
    ) -> None:
        """``astra_sim``: also read host-side collectives for ASTRA-sim (``HostOp.collective``)."""
        self.path = os.fspath(path)
        self.astra_sim = astra_sim
        self.metadata: dict[str, Any] = {}
        self.seen_nodes = False
        self.stopped = False  # records(stop_at=...) ended at the split point
        self.first_old_layout_node: int | None = None  # position of the first 1.0.1-layout node
        self._progress = progress

    def records(self, stop_at: int | None = None) -> Iterator[NodeRecord]:
        """All node records (then the metadata is complete), or those before character ``stop_at``
        when a node starts exactly there (``stopped`` is then True)."""
        with JsonObjectStream(self.path, stream_keys={"nodes"}, stop_at=stop_at) as stream:
            yield from self._consume(stream.items(), stream, 0)
            self.stopped = stream.stopped

    def records_from(self, byte_offset: int, char_offset: int, first_position: int = 0) -> Iterator[NodeRecord]:
        """Records of the nodes from ``byte_offset`` (a node's first byte, ``char_offset`` characters
        into the file) on, then the metadata after the array; ``first_position`` numbers them in
        error messages."""
        with JsonObjectStream(self.path, stream_keys={"nodes"}) as stream:
            yield from self._consume(stream.items_from(byte_offset, "nodes", char_offset), stream, first_position)

    def records_from_items(self, items: Iterator[tuple[str, Any]]) -> Iterator[NodeRecord]:
        """Records from top-level ``(key, value)`` pairs made in memory (``nodes``: an iterator of
        node dicts), e.g. the linker's merged trace, without writing it to a file."""
        yield from self._consume(items, None, 0)

    def _consume(
        self, items: Iterator[tuple[str, Any]], stream: JsonObjectStream | None, first: int
    ) -> Iterator[NodeRecord]:
        for key, value in items:
            if key == "nodes":
                self.seen_nodes = True
                yield from self._node_records(value, stream, first)
            elif key in METADATA_KEYS:
                self.metadata[key] = value
                if key == "schema":
                    self._check_schema(value)

    def _node_records(
        self, elements: Iterator[Any], stream: JsonObjectStream | None, first: int
    ) -> Iterator[NodeRecord]:
        progress = self._progress if stream is not None else None
        for position, node in enumerate(elements, first):
            yield self._record(position, node)
            if progress is not None and position % _PROGRESS_EVERY == 0:
                progress(stream.bytes_read, stream.total_bytes)  # type: ignore[union-attr]
        if progress is not None:
            progress(stream.bytes_read, stream.total_bytes)  # type: ignore[union-attr]

    def _check_schema(self, schema: Any) -> None:
        if schema not in ACCEPTED_SCHEMAS:
            raise UnsupportedSchemaError(self.path, unsupported_schema_message(schema))

    def merge_second_half(self, metadata: dict[str, Any], first_old_layout_node: int | None, offset: int) -> None:
        """Take what another reader found after the split point: its top-level metadata and where
        (counted from the split, which is node ``offset``) its first 1.0.1-layout node was."""
        clash = set(metadata) & set(self.metadata)
        if clash:
            raise TraceFormatError(self.path, f"duplicate top-level key {sorted(clash)[0]!r}")
        if self.first_old_layout_node is None and first_old_layout_node is not None:
            self.first_old_layout_node = offset + first_old_layout_node
        self.metadata.update(metadata)
        self.seen_nodes = True

    def check_complete(self) -> None:
        """Every top-level key the output needs was present, and old-layout nodes (``parent``
        instead of ``ctrl_deps``) only appear in a 1.0.1 trace."""
        if self.first_old_layout_node is not None and self.metadata.get("schema") != OLD_SCHEMA:
            raise TraceContentError(
                self.path, f"node #{self.first_old_layout_node}: missing required field 'ctrl_deps'"
            )
        missing = [key for key in METADATA_KEYS if key not in self.metadata]
        if not self.seen_nodes:
            missing.insert(0, "nodes")
        if missing:
            raise TraceFormatError(self.path, f"not a Chakra host/merged trace: top-level {missing} missing")

    def _fail(self, position: int, node: Any, problem: str) -> TraceContentError:
        node_id = node.get("id", "?") if isinstance(node, dict) else "?"
        return TraceContentError(self.path, f"node #{position} (id {node_id}): {problem}")

    def _record(self, position: int, node: Any) -> NodeRecord:
        if not isinstance(node, dict):
            raise self._fail(position, node, f"is a {type(node).__name__}, not a JSON object")
        if is_old_schema_node(node):
            if self.first_old_layout_node is None:
                self.first_old_layout_node = position
            node = map_old_schema_node(node)
        for key in REQUIRED_NODE_KEYS:
            if key not in node:
                raise self._fail(position, node, f"missing required field '{key}'")
        try:
            fields = effective_fields(node)
        except ValueError as exc:
            raise self._fail(position, node, str(exc)) from None
        node_id, name = node["id"], fields["name"]
        if type(node_id) is not int or not 0 <= node_id < _U64:
            raise self._fail(position, node, f"id must be a non-negative integer, got {node_id!r}")
        if not isinstance(name, str):
            raise self._fail(position, node, f"name must be a string, got {name!r}")
        return self._classify(position, node, node_id, name, fields)

    def _classify(
        self, position: int, node: dict[str, Any], node_id: int, name: str, fields: dict[str, Any]
    ) -> NodeRecord:
        cat = fields["cat"]
        kind = nodes.op_kind(name, cat)
        is_gpu = cat is not None
        node_type = nodes.chakra_type(name, cat, kind)
        itd = fields["inter_thread_dep"]
        if itd and (type(itd) is not int or not 0 < itd < _U64):
            raise self._fail(position, node, f"inter_thread_dep must be a node id, got {itd!r}")
        parent = fields["parent"]
        record = NodeRecord(
            id=node_id,
            parent=parent if type(parent) is int and 0 <= parent < _U64 else -1,
            name=name,
            kind=kind,
            is_gpu=is_gpu,
            node_type=node_type or 0,
            inter_thread_dep=itd or 0,
            pg_name=fields["pg_name"],
            tail=b"",
            error=None,
            comm_size=0,
            duration=0,
            stream=fields["stream"],
        )
        try:
            self._encode(record, fields)
            if is_host_op(name):
                record.host_op = self._host_op(record, fields)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            record.error = str(exc) if isinstance(exc, ValueError) else f"malformed inputs: {exc!r}"
        return record

    def _host_op(self, record: NodeRecord, fields: dict[str, Any]) -> HostOp:
        collective = host_collective(record.name, fields["inputs"]) if self.astra_sim and not record.is_gpu else None
        if collective is None:
            return HostOp(fields["rf_id"], record.duration)
        comm_tail = encode.tail(fields, record.name, True, 0)  # as a device op: is_cpu_op false
        return HostOp(fields["rf_id"], record.duration, collective, comm_tail)

    @staticmethod
    def _encode(record: NodeRecord, fields: dict[str, Any]) -> None:
        record.duration = encode.duration_micros(record.name, fields["exclusive_dur"])
        tail = encode.tail(fields, record.name, record.is_gpu, record.duration)
        if record.node_type == NodeType.COMM_COLL_NODE:
            comm_type = nodes.collective_comm_type(record.name)
            size = nodes.comm_size(fields["inputs"])
            tail += encode.comm_attrs(record.node_type, comm_type, size, record.pg_name)
        elif record.node_type == 0:
            record.comm_size = nodes.comm_size(fields["inputs"])
        record.tail = tail
