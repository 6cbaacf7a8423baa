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
import multiprocessing
import os
import re
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..io import GZIP_MAGIC
from .graph import TraceGraph
from .reader import TraceReader
from .writer import TailSpill, collect

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
    try:
        return _find_split(path, min_bytes)
    except OSError:
        return None


def _find_split(path: str, min_bytes: int) -> SplitPoint | None:
    size = os.path.getsize(path)
    if size < min_bytes or (os.cpu_count() or 1) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            return None
        start = int(size * SPLIT_FRACTION)
        fh.seek(start)
        found = _BOUNDARY.search(fh.read(_SEARCH_WINDOW))
        if found is None:
            return None
        byte_offset = start + found.group().rindex(b"{") + found.start()
        fh.seek(0)
        return SplitPoint(byte_offset, _characters_before(fh, byte_offset))


def _characters_before(fh: Any, end: int) -> int:
    """UTF-8 characters in the first ``end`` bytes: every byte that is not a continuation byte."""
    count = 0
    while end > 0:
        chunk = fh.read(min(end, 1 << 24))
        end -= len(chunk)
        count += len(chunk) if chunk.isascii() else len(chunk.translate(None, _CONTINUATION_BYTES))
    return count


@dataclass
class SecondHalf:
    """What the worker read: graph rows, their spilled tails, the metadata after the nodes."""

    rows: dict[str, Any]
    spill_offsets: Any  # of the tails in the worker's spill file (SecondHalfReader.spill_path)
    metadata: dict[str, Any]
    first_old_layout_node: int | None  # counted from the split


class SecondHalfReader:
    """Runs the worker; ``result()`` is its SecondHalf, or None if it failed (then read it here).
    ``close()`` must follow in every case."""

    def __init__(
        self, path: str, split: SplitPoint, spill_dir: str, keep_simulation_fields: bool, astra_sim: bool
    ) -> None:
        context = multiprocessing.get_context("fork")
        self._receiver, sender = context.Pipe(duplex=False)
        fd, self.spill_path = tempfile.mkstemp(dir=spill_dir, prefix=".chakra-tails-")
        os.close(fd)  # the worker writes it; we remove it whatever happens (close)
        self._process = context.Process(
            target=_work, args=(sender, path, split.byte_offset, self.spill_path, keep_simulation_fields, astra_sim),
            daemon=True,
        )
        self._process.start()
        sender.close()

    def result(self) -> SecondHalf | None:
        outcome: SecondHalf | None
        try:
            outcome = self._receiver.recv()
        except EOFError:
            outcome = None
        self._process.join()
        return outcome

    def close(self) -> None:
        """Stop the worker if it still runs, and remove its spill file."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._receiver.close()
        if os.path.exists(self.spill_path):
            os.unlink(self.spill_path)


def _work(
    sender: Connection, path: str, byte_offset: int, spill_path: str, keep_simulation_fields: bool, astra_sim: bool
) -> None:
    """Worker body: read from ``byte_offset`` to the end; send a SecondHalf, or None on any error
    (the first process then reads that part itself and reports the error with node numbers)."""
    gc.disable()  # as in the first process: millions of short-lived acyclic objects
    spill = TailSpill(os.path.dirname(spill_path), path=spill_path)
    try:
        graph = TraceGraph(path, keep_simulation_fields)
        reader = TraceReader(path, astra_sim=astra_sim)
        collect(reader.records_from(byte_offset), graph, spill)
        sender.send(SecondHalf(graph.export_rows(), spill.export(), reader.metadata,
                               reader.first_old_layout_node))
    except Exception:
        sender.send(None)
    finally:
        spill.close()
        sender.close()
