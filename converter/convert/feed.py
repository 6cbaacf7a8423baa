"""Parallel reading of a gzipped trace: this process decompresses, workers parse.

A gzip stream is decompressed from its start by one process, several times faster than its
nodes are parsed. So this process reads the document up to the node array, then cuts what it
decompresses into chunks of about ``CHUNK_BYTES`` ending at a likely node boundary (``}, {"id":``,
the split points' guess) and sends them to workers in turn; each worker reads its chunks (fast
decoder, the standard library where it refuses) into rows and spilled tails. Results are taken
in order, and a chunk is taken only if the one before it was: a chunk that starts where a node
starts and reads as nothing but whole nodes ends where the next one starts. The first chunk that
does not (the guess fell inside a node), or whose nodes hold an error, is read here with
everything after it, so output and errors are those of one process; the array's end and the
members after it are always read here.
"""

from __future__ import annotations

import gc
import io
import multiprocessing
import os
import queue
import re
import time
import zlib
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Any

from ..errors import TraceFormatError
from ..io.read import TraceFile, is_gzip
from ..io.spill import SpillFile
from ..jsonstream import JsonObjectStream
from ..workers import become_worker, signals_held
from . import nodesource
from .graph import TraceGraph
from .parallel import ReadTimes
from .reader import TraceReader
from .writer import TailSpill, collect

CHUNK_BYTES = 4 << 20
#: Gzipped files smaller than this are read by one process.
MIN_FEED_BYTES = 8 << 20
_READ_BYTES = 1 << 20
_CHUNKS_PER_WORKER = 2  # in flight at once
#: No boundary in this much: stop feeding, read the rest here (one huge node, or no "id" first).
_MAX_CHUNK_BYTES = 64 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{\s*\"id\"\s*:")
_CLOSING = b"]}"  # after a chunk, for its reader: the array and the document end there
_POLL_SECONDS = 0.2
_STOP_SECONDS = 2.0  # how long close() waits for a worker at each step


@dataclass
class ChunkResult:
    """What a worker read from one chunk: graph rows, their tails' offsets in its spill file."""

    rows: dict[str, Any]
    spill_offsets: Any
    first_old_layout_node: int | None  # counted from the chunk's first node
    chars: int  # characters in the chunk


class ChunkWorkers:
    """Worker processes reading chunks sent in turn (queues: neither side waits for the other to
    take what it sends); ``close()`` must follow in every case."""

    def __init__(self, path: str, jobs: int, spill_dir: str, *, keep_simulation_fields: bool, astra_sim: bool) -> None:
        context = multiprocessing.get_context("fork")
        self._workers: list[tuple[multiprocessing.process.BaseProcess, Any, Any, SpillFile]] = []
        self._handed_over: set[int] = set()  # workers whose spill file a TailSpill owns now
        try:
            for _ in range(jobs):
                inbox, outbox = context.Queue(), context.Queue()
                for queue in (inbox, outbox):
                    queue.cancel_join_thread()  # at exit, never wait for a worker that is gone
                spill = SpillFile(spill_dir)  # unnamed, inherited: nothing is left on disk, however it ends
                process = context.Process(
                    target=_work,
                    daemon=True,
                    args=(os.getpid(), inbox, outbox, path, spill, keep_simulation_fields, astra_sim),
                )
                # a message that cannot be sent (no memory to pickle it) is not a traceback from the
                # queue's thread: the worker that cannot answer dies (its chunk is read here); a
                # chunk that cannot reach its worker ends the worker too
                outbox._on_queue_feeder_error = _worker_cannot_answer  # type: ignore[attr-defined]
                inbox._on_queue_feeder_error = _stop_worker(process)  # type: ignore[attr-defined]
                self._workers.append((process, inbox, outbox, spill))
                with signals_held():
                    process.start()
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self._workers)

    def send(self, worker: int, chunk: bytes) -> None:
        self._workers[worker][1].put(chunk)

    def result(self, worker: int, waiting: Callable[[], None] | None = None) -> ChunkResult | None:
        """The result of the oldest chunk sent to ``worker`` (None: it could not read it, or it
        died); ``waiting`` is called now and then until it comes."""
        process, _, outbox, _ = self._workers[worker]
        while True:
            try:
                outcome: ChunkResult | None = outbox.get(timeout=_POLL_SECONDS)
                return outcome
            except queue.Empty:
                if not process.is_alive():
                    return None
                if waiting is not None:
                    waiting()

    def spill(self, worker: int) -> SpillFile:
        """The spill file ``worker`` writes, for ``TailSpill.adopt`` (which then owns it)."""
        self._handed_over.add(worker)
        return self._workers[worker][3]

    def close(self) -> None:
        """Stop the workers, and drop the spill files not handed over. A worker waiting for a
        chunk is told to stop by an empty message (a signal may reach one of its other threads,
        leaving it blocked in its read); one still busy is terminated, then killed."""
        for _process, inbox, _outbox, _spill in self._workers:
            with suppress(OSError, ValueError):
                inbox.put(None)
        for worker, (process, inbox, outbox, spill) in enumerate(self._workers):
            if process.pid is not None:
                process.join(_STOP_SECONDS)
                if process.is_alive():
                    process.terminate()
                    process.join(_STOP_SECONDS)
                if process.is_alive():
                    process.kill()
                process.join()
            inbox.close()
            outbox.close()
            if worker not in self._handed_over:
                spill.close()


def _worker_cannot_answer(_error: BaseException, _message: object) -> None:
    os._exit(1)


def _stop_worker(process: multiprocessing.process.BaseProcess) -> Callable[[BaseException, object], None]:
    def stop(_error: BaseException, _message: object) -> None:
        with suppress(OSError, ValueError, AttributeError):
            process.kill()

    return stop


def _work(
    parent: int,
    inbox: Any,
    outbox: Any,
    path: str,
    spill_file: SpillFile,
    keep_simulation_fields: bool,
    astra_sim: bool,
) -> None:
    """Worker body: read each chunk received as whole nodes; send a ChunkResult, or None when
    the chunk is not made of whole nodes or one of them has an error (this process then reads
    that part itself and reports the error with node numbers)."""
    try:
        _work_loop(parent, inbox, outbox, path, spill_file, keep_simulation_fields, astra_sim)
    except Exception:  # no memory, thread or file left: the parent sees this worker die and says so
        os._exit(1)


def _work_loop(
    parent: int,
    inbox: Any,
    outbox: Any,
    path: str,
    spill_file: SpillFile,
    keep_simulation_fields: bool,
    astra_sim: bool,
) -> None:
    become_worker(parent)  # quiet under signals, gone with its parent
    gc.disable()  # as in the first process: millions of short-lived acyclic objects
    spill = TailSpill(spill_file)
    reader = TraceReader(path, astra_sim=astra_sim)  # kept: its memos serve every chunk
    try:
        while True:
            chunk = inbox.get()
            if chunk is None:  # close(): no more chunks
                break
            first = len(spill)
            try:
                graph = TraceGraph(path, keep_simulation_fields)
                reader.first_old_layout_node = None
                collect(reader.records_from_source(io.BytesIO(chunk + _CLOSING)), graph, spill)
                if reader.metadata:
                    raise TraceFormatError(path, "the chunk held more than nodes")
                offsets = spill.export()[first - len(spill) - 1 :]
                outcome: ChunkResult | None = ChunkResult(
                    graph.export_rows(), offsets, reader.first_old_layout_node, reader.chars_read - len(_CLOSING)
                )
            except Exception:
                outcome = None
            outbox.put(outcome)
    finally:
        spill.close()


class _Rest(io.RawIOBase):
    """Bytes already read, then the rest of the source; a read error seen ahead comes again."""

    def __init__(self, head: bytes, source: TraceFile | IO[bytes], error: BaseException | None) -> None:
        super().__init__()
        self._head, self._source, self._error = memoryview(head), source, error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            count = min(len(buffer), len(self._head))
            buffer[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        if self._error is not None:
            raise self._error
        data = self._source.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def should_feed(path: str, jobs: int) -> bool:
    """Whether to read ``path`` this way: a large gzipped file, more than one job."""
    try:
        return (
            jobs > 1
            and is_gzip(path)
            and os.path.getsize(path) >= MIN_FEED_BYTES
            and ("fork" in multiprocessing.get_all_start_methods())
        )
    except OSError:
        return False


def read_fed(
    reader: TraceReader,
    graph: TraceGraph,
    spill: TailSpill,
    workers: ChunkWorkers,
    progress: Callable[[int, int], None] | None = None,
) -> ReadTimes:
    """Read the gzipped file: its head here, its nodes by ``workers``, its end here again;
    ``progress`` is told the (compressed) bytes read now and then."""
    times = ReadTimes()
    with JsonObjectStream(reader.path, stream_keys={"nodes"}, batch=nodesource.decode_nodes) as stream:
        waiting = (lambda: progress(stream.bytes_read, stream.total_bytes)) if progress is not None else None
        if not reader.head(stream):
            return times
        ahead, source, chars = stream.detach()
        buffer = bytearray(ahead)
        in_flight: deque[tuple[int, bytes]] = deque()  # (worker, chunk and the separator after it)
        window = _CHUNKS_PER_WORKER * len(workers)
        turn, done, error = 0, False, None
        while True:
            while not done and len(in_flight) < window:
                cut = _BOUNDARY.search(buffer, CHUNK_BYTES)
                while cut is None and not done and len(buffer) < _MAX_CHUNK_BYTES:
                    data, error = _read(source)
                    buffer += data
                    done = not data
                    cut = _BOUNDARY.search(buffer, CHUNK_BYTES)
                if cut is None:
                    done = True  # the rest is read here
                    break
                next_start = cut.start() + cut.group().index(b"{")
                piece = bytes(buffer[:next_start])
                del buffer[:next_start]
                workers.send(turn, piece[: cut.start() + 1])
                in_flight.append((turn, piece))
                turn = (turn + 1) % len(workers)
            if not in_flight:
                break
            worker, piece = in_flight[0]
            started = time.perf_counter()
            part = workers.result(worker, waiting)
            times.wait += time.perf_counter() - started
            if part is None:
                break  # read it here, and everything after it
            started = time.perf_counter()
            in_flight.popleft()
            reader.merge_range({}, set(), part.first_old_layout_node, len(graph))
            graph.extend_rows(part.rows)
            spill.adopt(workers.spill(worker), part.spill_offsets)
            chars += part.chars + len(piece) - (piece.rindex(b"}") + 1)  # the separator is ASCII
            times.merge += time.perf_counter() - started
        rest = b"".join(piece for _, piece in in_flight) + bytes(buffer)
        tail = io.BufferedReader(_Rest(rest, source, error), _READ_BYTES)
        collect(reader.records_from_source(tail, len(graph), chars), graph, spill)
        source.close()
    return times


def _read(source: TraceFile | IO[bytes]) -> tuple[bytes, BaseException | None]:
    """The next decompressed bytes, or nothing and the error that the reader will meet there."""
    try:
        return source.read(_READ_BYTES), None
    except (OSError, EOFError, zlib.error, TraceFormatError) as exc:  # a corrupt or truncated gzip
        return b"", exc
