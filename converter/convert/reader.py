"""Trace input: stream the nodes of a (gzipped) JSON trace as compact records, collect metadata.

Each node is classified and its tail pre-encoded as soon as it is parsed, and only a record is
kept, so memory follows the node count and not the JSON text. Problems the reference
would hit for every node (missing keys, bad ids) raise at once. Problems it would hit only when
it converts the node (an attribute missing on a GPU kernel it later drops, say) are stored on
the record and raised by the graph if the node is converted.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NamedTuple

import msgspec

from ..errors import TraceContentError, TraceFormatError, UnsupportedSchemaError
from ..et import encode
from ..et.wire import BoundedCache, varint
from ..jsonstream import DecodedRun, JsonObjectStream
from ..schema.chakra import NodeType
from ..schema.compat import is_old_schema_node, map_old_schema_node
from ..schema.host import (
    ACCEPTED_SCHEMAS,
    METADATA_KEYS,
    OLD_SCHEMA,
    REQUIRED_NODE_KEYS,
    attrs_touch_node_fields,
    effective_fields,
    unsupported_schema_message,
)
from . import groups, nodes, nodesource
from .collectives import host_collective, is_host_op
from .nodesource import FastNode
from .records import HostOp, ReadNode, RowBatch

ProgressHook = Callable[[int, int], None]  # (bytes read, total bytes)
Row = ReadNode | RowBatch  # what the reader yields: one node, or many plain ones
_PROGRESS_EVERY = 2048
_U64 = 1 << 64
_COMP, _METADATA = int(NodeType.COMP_NODE), int(NodeType.METADATA_NODE)
_RF_ID, _FW_PARENT, _SEQ_ID = encode.LEADING_ATTRS


class TraceReader:
    """Reads one trace file; iterate ``records()``, then ``check_complete()`` and ``metadata``,
    and ``forget_memos()`` once nothing more is read."""

    def __init__(
        self, path: str | os.PathLike[str], progress: ProgressHook | None = None, *, astra_sim: bool = False
    ) -> None:
        """``astra_sim``: also read host-side collectives for ASTRA-sim (``HostOp.collective``)."""
        self.path = os.fspath(path)
        self.astra_sim = astra_sim
        self.metadata: dict[str, Any] = {}
        self.seen_nodes = False
        self.keys: set[str] = set()  # the top-level keys read
        self.stopped_at: int | None = None  # the stop (a byte offset) where reading ended, if any
        self.chars_read = 0  # characters from the start of reading to where it ended
        self.first_old_layout_node: int | None = None  # position of the first 1.0.1-layout node
        self._progress = progress
        self._fast = FastRecords()

    def records(self, stops: Sequence[int] = ()) -> Iterator[Row]:
        """All node records (then the metadata is complete), or those before the first of
        ``stops`` (byte offsets) where a node starts exactly (``stopped_at`` is then that one)."""
        yield from self.records_from(0, 0, 0, stops)

    def records_from(
        self, byte_offset: int, first_position: int = 0, char_offset: int = 0, stops: Sequence[int] = ()
    ) -> Iterator[Row]:
        """Records of the nodes from ``byte_offset`` (0: the file's start; else a node's first
        byte, ``char_offset`` characters into the text), then the metadata after the array, or up
        to a stop as ``records``; ``first_position`` numbers the nodes in error messages."""
        with JsonObjectStream(self.path, stream_keys={"nodes"}, stops=stops, batch=nodesource.decode_nodes) as stream:
            items = stream.items_from(byte_offset, "nodes", char_offset) if byte_offset else stream.items()
            yield from self._consume(items, stream, first_position)
            self.stopped_at = stream.stopped_at
            self.chars_read = stream.position - char_offset

    def records_from_source(self, source: IO[bytes], first_position: int = 0, char_offset: int = 0) -> Iterator[Row]:
        """As ``records_from``, reading ``source`` (the file's content from a node's first byte,
        or from blank space before one or before the array's end; closed here)."""
        with JsonObjectStream(self.path, stream_keys={"nodes"}, batch=nodesource.decode_nodes, source=source) as stream:
            items = stream.items_from(None, "nodes", char_offset, frozenset(self.keys))
            yield from self._consume(items, stream, first_position)
            self.chars_read = stream.position - char_offset

    def head(self, stream: JsonObjectStream) -> bool:
        """Read the top-level members before ``nodes`` (metadata; the schema is checked): True if
        the node array follows (the stream's cursor is then inside it, at its first element)."""
        for key, value in stream.items():
            self.keys.add(key)
            if key == "nodes":
                self.seen_nodes = True
                return True
            if key in METADATA_KEYS:
                self.metadata[key] = value
                if key == "schema":
                    self._check_schema(value)
        return False

    def records_from_document(self, source: IO[bytes]) -> Iterator[Row]:
        """As ``records``, reading the trace's JSON from ``source`` (closed here), e.g. the linker's
        merged trace as it is made, without writing it to a file."""
        with JsonObjectStream(self.path, stream_keys={"nodes"}, batch=nodesource.decode_nodes, source=source) as stream:
            yield from self._consume(stream.items(), stream, 0)

    def _consume(self, items: Iterator[tuple[str, Any]], stream: JsonObjectStream | None, first: int) -> Iterator[Row]:
        for key, value in items:
            self.keys.add(key)
            if key == "nodes":
                self.seen_nodes = True
                yield from self._node_records(value, stream, first)
            elif key in METADATA_KEYS:
                self.metadata[key] = value
                if key == "schema":
                    self._check_schema(value)

    def _node_records(self, elements: Iterator[Any], stream: JsonObjectStream | None, first: int) -> Iterator[Row]:
        progress = self._progress if stream is not None else None
        position = report_at = first
        for element in elements:
            if type(element) is DecodedRun:
                yield from self._fast_rows(element, position)
                position += len(element)
            else:
                yield self._record(position, element)
                position += 1
            if progress is not None and position >= report_at:
                report_at = position + _PROGRESS_EVERY
                progress(stream.bytes_read, stream.total_bytes)  # type: ignore[union-attr]
        if progress is not None:
            progress(stream.bytes_read, stream.total_bytes)  # type: ignore[union-attr]

    def _fast_rows(self, run: list[FastNode], first: int) -> Iterator[Row]:
        """Rows of nodes the fast decoder read: batches of plain ones, and a record made on the
        exact path for any other (the batch before it is yielded first, so that errors come in
        file order)."""
        rows: list[tuple[Any, ...]] = []
        plain_row = self._fast.row
        for position, node in enumerate(run, first):
            row = plain_row(node)
            if row is not None:
                rows.append(row)
                continue
            if rows:
                yield _batch(rows)
                rows = []
            yield self._record(position, nodesource.as_dict(node))
        if rows:
            yield _batch(rows)

    def _check_schema(self, schema: Any) -> None:
        if schema not in ACCEPTED_SCHEMAS:
            raise UnsupportedSchemaError(self.path, unsupported_schema_message(schema))

    def merge_range(
        self, metadata: dict[str, Any], keys: set[str], first_old_layout_node: int | None, offset: int
    ) -> None:
        """Take what another reader found after a split point: the top-level keys and metadata
        after the nodes, and where (counted from the split, which is node ``offset``) its first
        1.0.1-layout node was."""
        clash = (keys - {"nodes"}) & self.keys
        if clash:
            raise TraceFormatError(self.path, f"duplicate top-level key {sorted(clash)[0]!r}")
        if self.first_old_layout_node is None and first_old_layout_node is not None:
            self.first_old_layout_node = offset + first_old_layout_node
        self.metadata.update(metadata)
        self.keys |= keys
        self.seen_nodes = True

    def forget_memos(self) -> None:
        """Let the fast path's memos go (a few MB that the stages after reading do not use)."""
        self._fast = FastRecords()

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

    def _record(self, position: int, node: Any) -> ReadNode:
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
    ) -> ReadNode:
        cat = fields["cat"]
        kind = nodes.op_kind(name, cat)
        is_gpu = cat is not None
        node_type = nodes.chakra_type(name, cat, kind)
        itd = fields["inter_thread_dep"]
        if itd and (type(itd) is not int or not 0 < itd < _U64):
            raise self._fail(position, node, f"inter_thread_dep must be a node id, got {itd!r}")
        parent = fields["parent"]
        record = ReadNode(
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
            elif self.astra_sim and groups.names_groups(name):
                record.group_info = groups.group_info(name, fields["inputs"])
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            record.error = str(exc) if isinstance(exc, ValueError) else f"malformed inputs: {exc!r}"
        return record

    def _host_op(self, record: ReadNode, fields: dict[str, Any]) -> HostOp:
        collective = host_collective(record.name, fields["inputs"]) if self.astra_sim and not record.is_gpu else None
        if collective is None:
            return HostOp(fields["rf_id"], record.duration)
        comm_tail = encode.tail(fields, record.name, True, 0)  # as a device op: is_cpu_op false
        return HostOp(fields["rf_id"], record.duration, collective, comm_tail)

    @staticmethod
    def _encode(record: ReadNode, fields: dict[str, Any]) -> None:
        record.duration = encode.duration_micros(record.name, fields["exclusive_dur"])
        tail = encode.tail(fields, record.name, record.is_gpu, record.duration)
        if record.node_type == NodeType.COMM_COLL_NODE:
            comm_type = nodes.collective_comm_type(record.name)
            size = nodes.comm_size(fields["inputs"])
            tail += encode.comm_attrs(record.node_type, comm_type, size, record.pg_name)
        elif record.node_type == 0:
            record.comm_size = nodes.comm_size(fields["inputs"])
        record.tail = tail


class _Rest(NamedTuple):
    """The attrs after seq_id, decoded once per distinct text: scope, tid, fw_tid, op_schema."""

    scope: int
    tid: int
    fw_tid: int
    op_schema: str


class _Shape(NamedTuple):
    """What a node's name, cat, stream and attrs after seq_id decide, memoised together."""

    name: str  # interned
    kind: int
    node_type: int  # COMP or METADATA (others take the exact path)
    zero_duration: bool  # Optimizer.step
    is_gpu: bool
    attrs_after_seq_id: bytes


_NOT_PLAIN = _Shape("", 0, 0, False, False, b"")  # memo entry of what takes the exact path


def _batch(rows: list[tuple[Any, ...]]) -> RowBatch:
    """The batch of rows made by ``FastRecords.row``."""
    ids, parents, has_parent, names, kinds, is_gpu, types, itds, durations, streams, tails, pg_names = zip(
        *rows, strict=True
    )
    return RowBatch(
        ids,
        parents,
        has_parent,
        names,
        kinds,
        is_gpu,
        types,
        itds,
        durations,
        streams,
        tails,
        {i: value for i, value in enumerate(pg_names) if value != ""},
    )


class FastRecords:
    """Rows of the nodes decoded by ``nodesource``, for the usual layout only: ``row`` returns
    None for anything else (odd types, attrs that override node fields, communication nodes,
    values the encoder refuses) and the reader then takes the exact path on the node as ``json``
    decodes it. Raw parts are memoised by their bytes: equal bytes, equal values."""

    def __init__(self) -> None:
        # inputs/outputs repeat nearby (a kernel's are its launcher's): 1,024 entries hit 55% on
        # GPT-2 traces, 8,192 hit 57% and hold 3 MB more
        self._io: dict[bytes, BoundedCache[bytes]] = {
            encode.TAG_INPUTS: BoundedCache(1 << 10),
            encode.TAG_OUTPUTS: BoundedCache(1 << 10),
        }
        self._shapes_and_types: BoundedCache[bytes] = BoundedCache()  # b"": not plain
        self._rests: BoundedCache[_Rest | None] = BoundedCache(1 << 12)  # None: not plain
        self._shapes: BoundedCache[_Shape] = BoundedCache(1 << 14)
        self._layouts = nodesource.AttrsLayouts()

    def row(self, node: FastNode) -> tuple[Any, ...] | None:
        """(id, parent, has parent, name, kind, is_gpu, type, inter_thread_dep, duration, stream,
        tail, pg_name), or None if the node is not plain."""
        node_id, name, cat, stream = node.id, node.name, node.cat, node.stream
        if type(node_id) is not int or not 0 <= node_id < _U64 or type(name) is not str:
            return None
        if (cat is not None and type(cat) is not str) or (stream is not None and type(stream) is not int):
            return None
        leading = self._layouts.leading(node.attrs)
        if leading is None:
            return None
        rf_id, fw_parent, seq_id, rest_text = leading
        key = (name, cat, stream, rest_text)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes.remember(key, self._shape(name, cat, stream, rest_text))
        if shape is _NOT_PLAIN:
            return None
        itd, exclusive_dur = node.inter_thread_dep, node.exclusive_dur
        if itd and (type(itd) is not int or not 0 < itd < _U64):
            return None
        if type(exclusive_dur) is not float and type(exclusive_dur) is not int:
            return None  # int() of a string or a bool: let the exact path judge
        duration = 0 if shape.zero_duration else int(exclusive_dur)  # as encode.duration_micros
        if not 0 <= duration < _U64:
            return None
        try:
            inputs = self._io_field(encode.TAG_INPUTS, node.inputs, "inputs")
            outputs = self._io_field(encode.TAG_OUTPUTS, node.outputs, "outputs")
            if inputs is None or outputs is None:
                return None
            tail = b"".join(
                (
                    encode.TAG_DURATION + varint(duration) if duration else b"",
                    inputs,
                    outputs,
                    _RF_ID(rf_id),
                    _FW_PARENT(fw_parent),
                    _SEQ_ID(seq_id),
                    shape.attrs_after_seq_id,
                )
            )
        except ValueError:
            return None
        parent = node.ctrl_deps
        has_parent = type(parent) is int and 0 <= parent < _U64
        return (
            node_id,
            parent if has_parent else 0,
            has_parent,
            shape.name,
            shape.kind,
            shape.is_gpu,
            shape.node_type,
            itd or 0,
            duration,
            stream,
            tail,
            node.pg_name,
        )

    def _shape(self, name: str, cat: str | None, stream: int | None, rest_text: bytes) -> _Shape:
        if rest_text in self._rests:
            rest = self._rests[rest_text]
        else:
            rest = self._rests.remember(rest_text, self._rest(rest_text))
        kind = nodes.op_kind(name, cat)
        node_type = nodes.chakra_type(name, cat, kind)
        if (
            rest is None
            or node_type is None
            or node_type not in (_COMP, _METADATA)
            or is_host_op(name)
            or groups.names_groups(name)
        ):
            return _NOT_PLAIN
        try:
            block = encode.attrs_after_seq_id(
                rest.scope, rest.tid, rest.fw_tid, rest.op_schema, cat is not None, stream
            )
        except ValueError:
            return _NOT_PLAIN
        return _Shape(name, kind, node_type, "Optimizer.step" in name, cat is not None, block)

    @staticmethod
    def _rest(text: bytes) -> _Rest | None:
        """The attrs after seq_id, or None if they are not plain (the exact path tells why)."""
        try:
            entries = nodesource.rest_entries(text)
            fields = {entry["name"]: entry["value"] for entry in entries}
        except (ValueError, TypeError, KeyError):
            return None
        names = set(fields)
        if attrs_touch_node_fields(names) or not names.isdisjoint(("rf_id", "fw_parent", "seq_id")):
            return None
        try:
            scope, tid, fw_tid, op_schema = (fields[key] for key in ("scope", "tid", "fw_tid", "op_schema"))
        except KeyError:
            return None
        if not (type(scope) is int and type(tid) is int and type(fw_tid) is int and type(op_schema) is str):
            return None
        return _Rest(scope, tid, fw_tid, op_schema)

    def _io_field(self, tag: bytes, raw: msgspec.Raw, what: str) -> bytes | None:
        key = bytes(raw)
        cache = self._io[tag]
        found = cache.get(key)
        if found is not None:
            return found
        io = nodesource.decode_io(raw)
        if io is None:
            return None
        values = nodesource.value_text(io.values)
        rest_key = (bytes(io.shapes), bytes(io.types))
        rest = self._shapes_and_types.get(rest_key)
        if rest is None:
            rest = self._shapes_and_types.remember(rest_key, self._encode_shapes_and_types(*rest_key, what))
        if values is None or not rest:
            return None
        return cache.remember(key, encode.io_field_with(tag, values, rest, what))

    @staticmethod
    def _encode_shapes_and_types(shapes: bytes, types: bytes, what: str) -> bytes:
        """The encoded shapes and types, decoded here by the standard library; b"" sends the node
        to the exact path (also when both are empty strings, which plain nodes never hold)."""
        try:
            return encode.shapes_and_types(str(nodesource.loads(shapes)), str(nodesource.loads(types)), what)
        except ValueError:
            return b""
