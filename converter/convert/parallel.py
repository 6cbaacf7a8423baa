"""Two-process reading of one large plain-JSON trace: the second core parses the second half.

Parsing and encoding nodes is most of a conversion, and a trace's node list cannot be split
without parsing it. So we guess: the first ``}, {"id":`` after the middle of the file is
probably the boundary between two nodes (trace writers put ``id`` first; quotes are escaped
inside strings, so the match is always structural, but it may lie in an array nested in a
node). A worker process reads from there to the end (nodes, then the metadata after them),
while this process reads from the start and stops *only if* a node starts exactly at the
guessed offset. If none does, the worker's result is discarded and reading goes on here: the
split can cost time, never correctness.
"""

from __future__ import annotations

import gc
import os
import re
from dataclasses import dataclass
from typing import Any

from ..errors import TraceFormatError
from ..io import SpillFile, TraceFile, open_trace
from ..workers import Worker, fork_available
from .graph import TraceGraph
from .reader import TraceReader
from .writer import TailSpill

#: Below this size a second process costs more than it saves.
MIN_SPLIT_BYTES = 48 << 20
#: Where to look for the split, as a share of the file: both processes read at the same rate
#: (measured on a 1.2 GB, 260k-node trace: 0.4 and 0.45 were slower than 0.5).
SPLIT_FRACTION = 0.5
_BOUNDARY = re.compile(rb"\}\s*,\s*\{\s*\"id\"\s*:")  # writers put a node's "id" first
_SEARCH_WINDOW = 1 << 22
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))


@dataclass(frozen=True)
class SplitPoint:
    byte_offset: int  # where the second half starts: the '{' of a node (probably)
    char_offset: int  # the same place counted in characters, as the first reader sees it


def find_split(path: str, min_bytes: int = MIN_SPLIT_BYTES) -> SplitPoint | None:
    """A likely node boundary near the middle of a large uncompressed file, or None (also when
    the file cannot be read: the reader then reports that)."""
    if (os.cpu_count() or 1) < 2 or not fork_available():
        return None
    try:
        with open_trace(path) as trace:
            return _find_split(trace, min_bytes)
    except TraceFormatError:
        return None


def _find_split(trace: TraceFile, min_bytes: int) -> SplitPoint | None:
    if trace.size < min_bytes or trace.gzipped:
        return None
    start = int(trace.size * SPLIT_FRACTION)
    trace.seek(start)
    found = _BOUNDARY.search(trace.read(_SEARCH_WINDOW))
    if found is None:
        return None
    byte_offset = start + found.group().rindex(b"{") + found.start()
    trace.seek(0)
    return SplitPoint(byte_offset, _characters_before(trace, byte_offset))


def _characters_before(fh: TraceFile, end: int) -> int:
    """UTF-8 characters in the first ``end`` bytes: every byte that is not a continuation byte."""
    count = 0
    while end > 0:
        chunk = fh.read(min(end, 1 << 24))
        if not chunk:  # the file shrank: the split is then checked (and dropped) by the first reader
            break
        end -= len(chunk)
        count += len(chunk) if chunk.isascii() else len(chunk.translate(None, _CONTINUATION_BYTES))
    return count


@dataclass
class SecondHalf:
    """What the worker read: graph rows, their spilled tails, the metadata after the nodes."""

    rows: dict[str, Any]
    spill_offsets: Any  # of the tails in the worker's spill file (SecondHalfReader.spill)
    metadata: dict[str, Any]
    first_old_layout_node: int | None  # counted from the split


class SecondHalfReader:
    """Runs the worker; ``result()`` is its SecondHalf, or None if it failed (then read it here).
    ``close()`` must follow in every case.

    The worker writes its tails to ``spill``, an unnamed file made here that it inherits: however
    either process ends, nothing is left on disk.
    """

    def __init__(
        self, path: str, split: SplitPoint, spill_dir: str, keep_simulation_fields: bool, astra_sim: bool
    ) -> None:
        self.spill = SpillFile(spill_dir)
        try:
            self._worker = Worker(_work, path, split, self.spill, keep_simulation_fields, astra_sim)
        except BaseException:
            self.spill.close()
            raise

    def result(self) -> SecondHalf | None:
        outcome: SecondHalf | None = self._worker.result()
        return outcome

    def close(self) -> None:
        """Stop the worker if it still runs, and drop its spilled tails."""
        self._worker.stop()
        self.spill.close()


def _work(path: str, split: SplitPoint, spill: SpillFile, keep_simulation_fields: bool, astra_sim: bool) -> SecondHalf:
    """Worker body: read from the split to the end. Any error makes the result None: the first
    process then reads that part itself and reports the error with node numbers."""
    gc.disable()  # as in the first process: millions of short-lived acyclic objects
    tails = TailSpill(spill)
    graph = TraceGraph(path, keep_simulation_fields)
    reader = TraceReader(path, astra_sim=astra_sim)
    for record in reader.records_from(split.byte_offset, split.char_offset):
        graph.add(record)
        tails.append(record.tail)
    return SecondHalf(graph.export_rows(), tails.export(), reader.metadata, reader.first_old_layout_node)
