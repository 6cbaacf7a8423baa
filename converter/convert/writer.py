"""Output: the spill file for pre-encoded node tails, and the ``.et`` records in id order.

The tails of a large trace are about the size of the output (hundreds of MB), so they go to an
unnamed temporary file next to the output as they are made (``io.SpillFile``), and are read back
by offset when the nodes are written in id order, each behind its head (and communication
attributes).
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, islice
from typing import IO, Any, Protocol

from .._types import Progress
from ..errors import OutputError, TraceContentError
from ..et import encode
from ..io.spill import SpillFile
from ..schema.chakra import COMM_NODE_TYPES, NodeType
from ..workers import Worker, fork_available
from .graph import ACCELERATOR_OP, DROP_DURATION, REPLAYED, TraceGraph
from .records import ReadNode, RowBatch

_BUFFER = 1 << 20
_WRITE_BATCH = 512  # records joined per write (~0.5 MB: more saves no time, costs memory)
_GAP = 1 << 16  # tails skipped ahead of the read-ahead window that still extend it
_ROWS_PER_WRITER = 100_000  # fewer nodes than this a process: writing is not split
_COMP = int(NodeType.COMP_NODE)


class _Segment:
    """Consecutive tails in one file: the first one's index, and their offsets in the file."""

    __slots__ = ("fd", "first", "offsets")

    def __init__(self, first: int, fd: int, offsets: array[int]) -> None:
        self.first, self.fd, self.offsets = first, fd, offsets

    @property
    def end(self) -> int:
        return self.first + len(self.offsets) - 1


class TailSpill:
    """Append-only store of byte strings in a ``SpillFile``, addressed by the order they were added.

    A worker process fills one in a ``SpillFile`` its parent made (``export``); the parent then
    takes those tails over in place (``adopt``), reading them from that file, which it owns from
    then on (``close`` closes it).
    """

    def __init__(self, file: SpillFile) -> None:
        self._file = file
        self._write = file.write
        self.directory = file.directory
        self._size = 0
        self._own = _Segment(0, self._file.fileno(), array("Q", [0]))  # where appends go
        self._segments = [self._own]
        self._adopted: list[SpillFile] = []
        self._window = b""  # read-ahead: nodes are mostly requested in the order they were added
        self._window_start = 0
        self._window_fd = -1
        self._last = (0, self._file.fileno())  # where the last read ended, in which file

    def __len__(self) -> int:
        return self._own.end

    def append(self, data: bytes) -> None:
        self._write(data)
        self._size += len(data)
        self._own.offsets.append(self._size)

    def extend(self, items: Sequence[bytes]) -> None:
        """``append`` each of ``items``."""
        self._write(b"".join(items))
        offsets = self._own.offsets
        offsets.extend(islice(accumulate(map(len, items), initial=self._size), 1, None))
        self._size = offsets[-1]

    def finish_writing(self) -> None:
        self._file.flush()

    def export(self) -> array[int]:
        """Flush the store and return its offsets, for ``adopt`` in another process."""
        self._file.flush()
        return self._own.offsets

    def adopt(self, source: SpillFile, offsets: array[int]) -> None:
        """Append another process's exported tails (written to ``source``), in their order, read
        from that file in place (several times over, as it grows); this store owns ``source``
        from now on."""
        if not any(source is adopted for adopted in self._adopted):
            self._adopted.append(source)
        if len(offsets) < 2:
            return
        count = self._own.end
        if len(self._own.offsets) == 1:  # nothing appended since the last adoption
            self._segments.pop()
        self._segments.append(_Segment(count, source.fileno(), offsets))
        self._own = _Segment(count + len(offsets) - 1, self._file.fileno(), array("Q", [self._size]))
        self._segments.append(self._own)

    def read(self, index: int) -> bytes:
        return next(self.read_each((index,)))

    def read_each(self, indices: Iterable[int]) -> Iterator[bytes]:
        """``read`` of each index in turn. Tails are mostly read in the order they were added,
        maybe skipping some (dropped nodes): a read just after the previous one reads ahead."""
        try:
            yield from self._read_each(indices)
        except OSError as exc:
            raise OutputError(self.directory, f"cannot read temporary data: {exc.strerror or exc}") from None

    def _read_each(self, indices: Iterable[int]) -> Iterator[bytes]:
        segments = self._segments
        firsts = [segment.first for segment in segments]
        first, end, offsets, fd = segments[0].first, segments[0].end, segments[0].offsets, segments[0].fd
        window, window_start, window_fd = self._window, self._window_start, self._window_fd
        last_end, last_fd = self._last
        window_end = window_start + len(window)
        for index in indices:
            if not first <= index < end:
                segment = segments[bisect_right(firsts, index) - 1]
                first, end, offsets, fd = segment.first, segment.end, segment.offsets, segment.fd
            start, stop = offsets[index - first], offsets[index - first + 1]
            if fd == window_fd and window_start <= start and stop <= window_end:
                yield window[start - window_start : stop - window_start]
            elif fd == last_fd and 0 <= start - last_end < _GAP:
                window, window_start, window_fd = os.pread(fd, max(stop - start, _BUFFER), start), start, fd
                window_end = start + len(window)
                self._window, self._window_start, self._window_fd = window, window_start, window_fd
                yield window[: stop - start]
            else:
                yield os.pread(fd, stop - start, start)
            last_end, last_fd = stop, fd
            self._last = (stop, fd)

    def close(self) -> None:
        self._file.close()
        for source in self._adopted:
            source.close()


def collect(rows: Iterable[ReadNode | RowBatch], graph: TraceGraph, spill: TailSpill) -> None:
    """Each row (or batch of rows) the reader yields into the graph, its tail into the spill."""
    for row in rows:
        if type(row) is RowBatch:
            graph.add_batch(row)
            spill.extend(row.tails)
        else:
            graph.add(row)  # type: ignore[arg-type]
            spill.append(row.tail)  # type: ignore[union-attr]


def write_metadata(out: IO[bytes], path: str, metadata: dict[str, Any]) -> None:
    """The GlobalMetadata record, first in the file."""
    try:
        out.write(encode.global_metadata(metadata))
    except ValueError as exc:
        raise TraceContentError(path, f"top-level metadata cannot be encoded: {exc}") from None


def write_nodes(
    out: IO[bytes], graph: TraceGraph, spill: TailSpill, progress: Progress | None, jobs: int = 1
) -> tuple[int, int, int]:
    """Write every kept node in id order; returns (nodes, comm nodes, data deps). With ``jobs``
    over 1 and many nodes, workers forked now (they share the graph and the spill) encode the
    later slices of the id order into files next to the output, copied in after this process's
    own slice; a slice whose worker failed is written here (so an error names the right node)."""
    rows = graph.rows_by_id()
    slices = min(jobs, len(rows) // _ROWS_PER_WRITER) if fork_available() else 1
    if slices < 2:
        return _write_rows(out, graph, spill, rows, progress)
    cuts = [len(rows) * k // slices for k in range(slices + 1)]
    out.flush()  # the workers inherit the file: nothing of it may wait in a buffer they copy
    workers: list[tuple[Worker, SpillFile]] = []
    try:
        for k in range(1, slices):
            part_file = SpillFile(spill.directory)
            workers.append((Worker(_write_part, part_file, graph, spill, rows[cuts[k] : cuts[k + 1]]), part_file))
        totals = list(_write_rows(out, graph, spill, rows[: cuts[1]], progress))
        for k, (worker, part_file) in enumerate(workers, start=1):
            part = worker.result()
            if part is None:
                part = _write_rows(out, graph, spill, rows[cuts[k] : cuts[k + 1]], None)
            else:
                _copy_into(out, part_file)
            totals = [a + b for a, b in zip(totals, part, strict=True)]
            if progress is not None:
                progress("write", cuts[k + 1], len(rows))
    finally:
        for worker, part_file in workers:
            worker.stop()
            part_file.close()
    return totals[0], totals[1], totals[2]


def _write_part(part_file: SpillFile, graph: TraceGraph, spill: TailSpill, rows: Sequence[int]) -> tuple[int, int, int]:
    """Worker body: ``rows``' records into ``part_file`` (made by the parent, inherited)."""
    totals = _write_rows(part_file, graph, spill, rows, None)
    part_file.flush()
    return totals


def _copy_into(out: IO[bytes], part_file: SpillFile) -> None:
    """Append everything a worker wrote to ``part_file``."""
    offset = 0
    while chunk := part_file.pread(_BUFFER, offset):
        out.write(chunk)
        offset += len(chunk)


class _Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


def _write_rows(
    out: _Writable, graph: TraceGraph, spill: TailSpill, rows: Sequence[int], progress: Progress | None
) -> tuple[int, int, int]:
    """The records of ``rows`` (in this order); returns (nodes, comm nodes, data deps)."""
    ids, names, types, deps = graph.ids, graph.names, graph.types, graph.deps
    send_recv, dep_count, ctrl_dep = graph.send_recv, graph.deps.count, graph.ctrl_dep
    overrides, zero_duration, new_durations = graph.tail_overrides, graph.zero_duration, graph.duration_overrides
    roofline, accelerator = graph.roofline, graph.accelerator
    prefixes: dict[tuple[str, int], bytes] = {}
    pending: list[bytes] = []
    edges = 0
    for count, (row, tail) in enumerate(zip(rows, spill.read_each(rows), strict=True)):
        node_type = types[row]
        prefix = prefixes.get((names[row], node_type))
        if prefix is None:
            try:
                prefix = prefixes[(names[row], node_type)] = encode.name_and_type(names[row], node_type)
            except ValueError as exc:
                raise graph.fail(row, str(exc)) from None
        rest = overrides.get(row) or tail
        if row in zero_duration:
            rest = encode.without_duration(rest)
        elif row in new_durations:
            rest = encode.duration(new_durations[row]) + encode.without_duration(rest)
        if row in send_recv:
            try:
                rest += encode.comm_attrs(*send_recv[row])
            except ValueError as exc:
                raise graph.fail(row, str(exc)) from None
        if node_type == _COMP and (accelerator is not None or roofline is not None):
            if accelerator is not None:
                stays = accelerator[row]
                if stays == DROP_DURATION:
                    rest = encode.without_duration(rest)
                elif stays == ACCELERATOR_OP:
                    rest = encode.as_accelerator_op(rest)
                elif stays == REPLAYED:  # no cost known: a CPU op, replayed for its captured duration
                    rest = encode.as_cpu_op(rest)  # KEEP_DURATION: the CPU op as captured
            if roofline is not None and roofline[0][row]:
                rest += encode.roofline_attrs(roofline[0][row], roofline[1][row])
        node_deps = deps.ids(row) if dep_count[row] else ()
        edges += len(node_deps)
        pending.append(encode.delimited_node(ids[row], prefix, ctrl_dep(row), node_deps, rest))
        if len(pending) == _WRITE_BATCH:
            out.write(b"".join(pending))
            pending.clear()
            if progress is not None:
                progress("write", count, len(rows))
    out.write(b"".join(pending))
    if progress is not None:
        progress("write", len(rows), len(rows))
    return len(rows), sum(types[row] in COMM_NODE_TYPES for row in rows), edges
