"""Output: the spill file for pre-encoded node tails, and the ``.et`` records in id order.

The tails of a large trace are about the size of the output (hundreds of MB), so they go to an
unnamed temporary file next to the output as they are made (``io.SpillFile``), and are read back
by offset when the nodes are written in id order, each behind its head (and communication
attributes).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import IO, Any

from ..errors import TraceContentError
from ..io import SpillFile
from ..schema.chakra import COMM_NODE_TYPES
from . import encode
from .graph import TraceGraph

_READ_AHEAD = 1 << 20


class TailSpill:
    """Append-only store of byte strings in a ``SpillFile``, addressed by the order they were added.

    A worker process fills its own (``export``), which this process then appends to its store
    (``append_exported``).
    """

    def __init__(self, file: SpillFile) -> None:
        self._file = file
        self._write = file.write
        self._offsets = array("Q", [0])
        self._size = 0
        self._window = b""  # read-ahead: nodes are mostly requested in the order they were added
        self._window_start = 0

    def append(self, data: bytes) -> None:
        self._write(data)
        self._size += len(data)
        self._offsets.append(self._size)

    def finish_writing(self) -> None:
        self._file.flush()

    def export(self) -> array[int]:
        """Flush the store and return its offsets, for ``append_exported`` in another process."""
        self._file.flush()
        return self._offsets

    def append_exported(self, file: SpillFile, offsets: array[int]) -> None:
        """Append another process's exported tails (written to ``file``), in their order."""
        self._file.copy_from(file, offsets[-1])
        base = self._size
        self._offsets.extend(base + offset for offset in offsets[1:])
        self._size = base + offsets[-1]

    def read(self, index: int) -> bytes:
        start, end = self._offsets[index], self._offsets[index + 1]
        window_start = self._window_start
        if window_start <= start and end <= window_start + len(self._window):
            return self._window[start - window_start : end - window_start]
        if start == window_start + len(self._window):  # sequential: read ahead
            self._window = self._file.pread(max(end - start, _READ_AHEAD), start)
            self._window_start = start
            return self._window[: end - start]
        return self._file.pread(end - start, start)

    def close(self) -> None:
        self._file.close()


def write_metadata(out: IO[bytes], path: str, metadata: dict[str, Any]) -> None:
    """The GlobalMetadata record, first in the file."""
    try:
        out.write(encode.global_metadata(metadata))
    except ValueError as exc:
        raise TraceContentError(path, f"top-level metadata cannot be encoded: {exc}") from None


#: (stage, done, total): stage "read" counts input bytes, "write" counts nodes.
Progress = Callable[[str, int, int], None]


def write_nodes(out: IO[bytes], graph: TraceGraph, spill: TailSpill, progress: Progress | None) -> tuple[int, int, int]:
    """Write every kept node in id order; returns (nodes, comm nodes, data deps)."""
    ids, names, types, deps = graph.ids, graph.names, graph.types, graph.deps
    send_recv, overrides, zero_duration = graph.send_recv, graph.tail_overrides, graph.zero_duration
    rows = sorted(graph.final_rows(), key=ids.__getitem__)
    name_fields: dict[str, bytes] = {}
    comm = edges = 0
    for count, row in enumerate(rows):
        name = names[row]
        name_field = name_fields.get(name)
        try:
            if name_field is None:
                name_field = name_fields[name] = encode.name_field(name, "name")
            comm_tail = encode.comm_attrs(*send_recv[row]) if row in send_recv else b""
        except ValueError as exc:
            raise graph.fail(row, str(exc)) from None
        node_deps = deps.ids(row) if deps.count[row] else ()
        head = encode.head(ids[row], name_field, types[row], graph.ctrl_deps(row), node_deps)
        tail = overrides.get(row) or spill.read(row)
        if row in zero_duration:
            tail = encode.without_duration(tail)
        out.write(encode.node_record(head, tail, comm_tail))
        edges += len(node_deps)
        comm += types[row] in COMM_NODE_TYPES
        if progress is not None and count % 8192 == 0:
            progress("write", count, len(rows))
    if progress is not None:
        progress("write", len(rows), len(rows))
    return len(rows), comm, edges
