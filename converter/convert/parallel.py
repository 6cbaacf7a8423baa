"""Parallel reading of one large plain-JSON trace: the file cut into byte ranges, a process each.

Parsing and encoding nodes is most of a conversion, and a trace's node list cannot be split
without parsing it. So we guess: the first ``}, {"id":`` after each of the points 1/n, 2/n, ...
of the file is probably a boundary between two nodes (trace writers put ``id`` first; quotes are
escaped inside strings, so the match is always structural, but it may lie in an array nested in
a node). This process reads from the start, and a worker process from each split point; each
reader stops at the first later split point where a node starts *exactly* (or reads on to the
end, then the metadata after the nodes). Following the readers from the file's start, from each
to the split it stopped at, gives a chain of verified ranges; a worker whose split point was
inside a value is not on it, and its work is dropped. A worker on the chain that failed is read
again here, so that errors name the right node. The split can cost time, never correctness.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..io.read import GZIP_MAGIC
from ..io.spill import SpillFile
from ..workers import Worker, fork_available
from .graph import TraceGraph
from .reader import TraceReader
from .writer import TailSpill, collect

#: Below this size a second process costs more than it saves.
MIN_SPLIT_BYTES = 48 << 20
#: Each range holds at least this much (fewer ranges than jobs on smaller files).
MIN_RANGE_BYTES = 16 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{\s*\"id\"\s*:")  # writers put a node's "id" first
_SEARCH_WINDOW = 1 << 22
_POLL_SECONDS = 0.2


def find_splits(path: str, jobs: int) -> list[int]:
    """Likely node boundaries (byte offsets, ascending) cutting a large uncompressed file into
    up to ``jobs`` ranges; none for a small or gzipped file, one job, or where processes cannot
    be forked (also when the file cannot be read: the reader then reports that)."""
    if jobs < 2 or not fork_available():
        return []
    try:
        return _find_splits(path, jobs)
    except OSError:
        return []


def _find_splits(path: str, jobs: int) -> list[int]:
    size = os.path.getsize(path)
    if size < MIN_SPLIT_BYTES:
        return []
    ranges = max(1, min(jobs, size // MIN_RANGE_BYTES))
    splits: list[int] = []
    with open(path, "rb") as fh:
        if fh.read(2) == GZIP_MAGIC:
            return []
        for k in range(1, ranges):
            start = size * k // ranges
            fh.seek(start)
            found = _BOUNDARY.search(fh.read(_SEARCH_WINDOW))
            if found is not None:
                split = start + found.start() + found.group().rindex(b"{")
                if not splits or split > splits[-1]:
                    splits.append(split)
    return splits


@dataclass
class RangeResult:
    """What a worker read from its split point: graph rows, their spilled tails, and the
    metadata after the nodes if it read to the end."""

    rows: dict[str, Any]
    spill_offsets: Any  # of the tails in the worker's spill file (RangeReaders.take_spill)
    metadata: dict[str, Any]
    keys: set[str]  # top-level keys after the nodes ("nodes" too)
    first_old_layout_node: int | None  # counted from the split point
    stopped_at: int | None  # the split point it stopped at, or None: it read to the end
    chars: int  # characters from its split point to where it stopped


class RangeReaders:
    """A worker reading from each split point; ``result(split)`` is its RangeResult, or None if
    it failed (then read that range here). ``close()`` must follow in every case.

    Each worker writes its tails to a ``SpillFile`` made here that it inherits (unnamed: however
    either process ends, nothing is left on disk).
    """

    def __init__(
        self, path: str, splits: list[int], spill_dir: str, *, keep_simulation_fields: bool, astra_sim: bool
    ) -> None:
        self._progress = multiprocessing.get_context("fork").Array("q", len(splits), lock=False)  # bytes read
        self._workers: dict[int, tuple[Worker, SpillFile | None]] = {}  # None: spill handed over
        try:
            for slot, split in enumerate(splits):
                spill = SpillFile(spill_dir)
                try:
                    worker = Worker(
                        _work,
                        path,
                        split,
                        splits[slot + 1 :],
                        spill,
                        keep_simulation_fields,
                        astra_sim,
                        self._progress,
                        slot,
                    )
                except BaseException:
                    spill.close()
                    raise
                self._workers[split] = (worker, spill)
        except BaseException:
            self.close()
            raise

    def bytes_read(self) -> int:
        """Bytes read so far by all workers (some twice, after a split inside a value)."""
        return sum(self._progress)

    def result(self, split: int, waiting: Callable[[], None] | None = None) -> RangeResult | None:
        """The result of the worker that started at ``split``; ``waiting`` is called now and
        then until it comes (progress)."""
        worker = self._workers[split][0]
        while waiting is not None and not worker.receiver.poll(_POLL_SECONDS):
            waiting()
        outcome: RangeResult | None = worker.result()
        return outcome

    def take_spill(self, split: int) -> SpillFile:
        """The spill file of the worker that started at ``split``, handed over: the caller closes it."""
        worker, spill = self._workers[split]
        assert spill is not None, "a worker's spill is taken once"
        self._workers[split] = (worker, None)
        return spill

    def close(self) -> None:
        """Stop the workers that still run, and drop the spill files not handed over."""
        for worker, spill in self._workers.values():
            worker.stop()
            if spill is not None:
                spill.close()
        self._workers.clear()


def _work(
    path: str,
    start: int,
    stops: list[int],
    spill_file: SpillFile,
    keep_simulation_fields: bool,
    astra_sim: bool,
    progress: Any,
    slot: int,
) -> RangeResult:
    """Worker body: read from ``start`` to the first of ``stops`` where a node starts, or to the
    end. Any error makes the result None: the first process then reads that part itself and
    reports the error with node numbers."""
    gc.disable()  # as in the first process: millions of short-lived acyclic objects
    spill = TailSpill(spill_file)
    try:
        graph = TraceGraph(path, keep_simulation_fields)

        def report(done: int, _total: int) -> None:
            progress[slot] = done - start

        reader = TraceReader(path, progress=report, astra_sim=astra_sim)
        collect(reader.records_from(start, stops=stops), graph, spill)
        return RangeResult(
            graph.export_rows(),
            spill.export(),
            reader.metadata,
            reader.keys,
            reader.first_old_layout_node,
            reader.stopped_at,
            reader.chars_read,
        )
    finally:
        spill.close()


@dataclass
class ReadTimes:
    """Seconds spent waiting for the workers' ranges, and merging them."""

    wait: float = 0.0
    merge: float = 0.0


def read_chain(
    reader: TraceReader,
    graph: TraceGraph,
    spill: TailSpill,
    splits: list[int],
    readers: RangeReaders,
    waiting: Callable[[], None] | None = None,
) -> ReadTimes:
    """Read the file from its start here, then take each worker's range along the chain (or
    read it here where the worker failed)."""
    times = ReadTimes()
    collect(reader.records(splits), graph, spill)
    chars = reader.chars_read
    at = reader.stopped_at
    while at is not None:
        started = time.perf_counter()
        part = readers.result(at, waiting)
        times.wait += time.perf_counter() - started
        started = time.perf_counter()
        if part is None:  # the worker hit a problem: read that range here, to report it precisely
            later = [split for split in splits if split > at]
            collect(reader.records_from(at, len(graph), chars, later), graph, spill)
            chars += reader.chars_read
            at = reader.stopped_at
        else:
            reader.merge_range(part.metadata, part.keys, part.first_old_layout_node, len(graph))
            graph.extend_rows(part.rows)
            spill.adopt(readers.take_spill(at), part.spill_offsets)
            chars += part.chars
            at = part.stopped_at
        times.merge += time.perf_counter() - started
    return times
