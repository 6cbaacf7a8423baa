"""A compacted ``.et`` written from an ``.et``: the plan (``plan.py``) applied record by record.

Two passes over the input: the first decodes the columns the plan needs (``et.decode.read_et``),
the second streams the records again and writes each kept node: its id, name and type as they
were (a merged run named ``first ... last, N ops``), its kept dependencies (a dependency on a
merged run's last node names the run's first),
its other fields as they were, with the summed duration, ``num_ops`` and ``tensor_size`` of its
run. The output is published atomically (``io.atomic_output``); the GlobalMetadata record is
copied. ``compact_file(path, path)`` compacts a file in place; ``compact_temporary`` is how a
conversion writes its graph compacted (``--compact``), ``compacted_copy`` how ``scale`` reads a
captured rank compacted, both through an unnamed temporary file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import IO, cast

from .._types import Progress
from ..errors import OutputError, TraceContentError, TraceFormatError
from ..et import encode, wire
from ..et.decode import EtTrace, Malformed, field_spans, iter_records, read_et
from ..et.records import attribute
from ..io.output import OutputTarget, atomic_output, check_output
from ..io.outputset import OutputSet
from ..io.read import check_input
from ..io.spill import SpillFile
from ..job.files import foreign_rank_files, job_rank_files
from ..schema.chakra import ATTRIBUTE_FIELDS, NODE_FIELDS, WIRE_VARINT
from .plan import SUMMED, Plan, plan

_F = {name: number for name, (number, _) in NODE_FIELDS.items()}
_HEAD_FIELDS = frozenset({_F["id"], _F["name"], _F["type"], _F["ctrl_deps"], _F["data_deps"]})
_U64 = 1 << 64


@dataclass(frozen=True)
class CompactResult:
    input_path: str
    output_path: str
    nodes_read: int
    nodes_written: int
    dependencies_read: int
    dependencies_written: int
    redundant_dependencies: int  # dropped: the parent is an ancestor of another parent
    merged_nodes: int  # folded into the first node of their run
    seconds: float


def compact_file(input_path: str, output_path: str, progress: Progress | None = None) -> CompactResult:
    """Compact ``input_path`` into ``output_path`` (the same path replaces it, atomically)."""
    check_input(input_path)
    in_place = os.path.exists(output_path) and os.path.realpath(input_path) == os.path.realpath(output_path)
    target = check_output(output_path) if in_place else check_output(output_path, input_path)
    return _compact(input_path, target, progress)


def _compact(input_path: str, target: OutputTarget, progress: Progress | None) -> CompactResult:
    with atomic_output(target) as out:
        return _compact_into(input_path, out, target.path, progress)


def _compact_into(input_path: str, out: IO[bytes], output_name: str, progress: Progress | None) -> CompactResult:
    started = time.perf_counter()
    trace = read_et(input_path, SUMMED)
    decided = plan(trace)
    written, deps = _write(trace, decided, out, progress)
    return CompactResult(
        input_path=input_path,
        output_path=output_name,
        nodes_read=len(trace),
        nodes_written=written,
        dependencies_read=len(trace.deps),
        dependencies_written=deps,
        redundant_dependencies=decided.redundant,
        merged_nodes=decided.merged,
        seconds=time.perf_counter() - started,
    )


@contextmanager
def compacted_copy(input_path: str, work_dir: str) -> Iterator[tuple[str, CompactResult]]:
    """``input_path`` compacted into a temporary file in ``work_dir`` (unnamed where the system
    allows, gone when the block ends): (a path to read it by, the result)."""
    spill = SpillFile(work_dir)
    try:
        result = _compact_into(input_path, cast(IO[bytes], spill), input_path, None)
        spill.flush()
        proc = f"/proc/self/fd/{spill.fileno()}"
        if os.path.exists(proc):
            yield proc, result
            return
        with tempfile.NamedTemporaryFile(dir=work_dir, prefix=".chakra-compacted-") as named:
            _copy_spill(spill, named, work_dir)
            yield named.name, result
    finally:
        spill.close()


def _copy_spill(spill: SpillFile, out: IO[bytes], work_dir: str) -> None:
    try:
        with open(spill.fileno(), "rb", closefd=False) as raw:
            raw.seek(0)
            shutil.copyfileobj(raw, out)
        out.flush()
    except OSError as exc:
        raise OutputError(work_dir, f"cannot write temporary data: {exc.strerror or exc}") from None


@contextmanager
def compact_temporary(target: OutputTarget) -> Iterator[tuple[IO[bytes], Callable[[], CompactResult]]]:
    """A temporary file (unnamed, next to the output) to write an uncompacted ``.et`` into, and the
    function that compacts it into ``target`` (atomically: the output never holds the uncompacted
    file, nor half of anything); the temporary file is gone when the block ends."""
    spill = SpillFile(target.work_dir)
    try:

        def finish() -> CompactResult:
            spill.flush()
            proc = f"/proc/self/fd/{spill.fileno()}"
            if os.path.exists(proc):
                return _renamed(proc, target)
            with tempfile.NamedTemporaryFile(dir=target.work_dir, prefix=".chakra-uncompacted-") as named:
                _copy_spill(spill, named, target.work_dir)
                return _renamed(named.name, target)

        yield cast(IO[bytes], spill), finish
    finally:
        spill.close()


def _renamed(source: str, target: OutputTarget) -> CompactResult:
    """Compact ``source``, a temporary file, naming the output in any error and in the result."""
    try:
        result = _compact(source, target, None)
    except (TraceFormatError, TraceContentError) as exc:
        raise type(exc)(target.path, f"cannot compact what was written: {exc.problem}") from None
    return replace(result, input_path=target.path)


def _write(trace: EtTrace, decided: Plan, out: IO[bytes], progress: Progress | None) -> tuple[int, int]:
    head, keep = decided.head, decided.keep_dep
    parents = {node_id: row for row, node_id in enumerate(trace.ids)}
    written = deps = 0
    size = len(trace)
    batch: list[bytes] = []
    for number, (offset, message) in enumerate(iter_records(trace.path)):
        if number == 0:
            batch.append(wire.delimited_message(message))
            continue
        row = number - 1
        if row >= size:
            raise TraceFormatError(trace.path, "changed while it was being compacted")
        if head[row] != row:
            continue
        start = trace.dep_start[row]
        ctrl: list[int] = []
        data: list[int] = []
        for slot in range(start, trace.dep_start[row + 1]):
            if keep[slot]:
                parent_id = trace.ids[head[parents[trace.deps[slot]]]]
                (ctrl if slot - start < trace.ctrl_count[row] else data).append(parent_id)
        deps += len(ctrl) + len(data)
        try:
            node = _node(trace, decided, row, message, ctrl, data)
        except TraceFormatError as exc:
            raise TraceFormatError(trace.path, f"record {number} at byte {offset}: {exc.problem}") from None
        batch.append(wire.delimited_message(node))
        written += 1
        if len(batch) >= 512:
            out.write(b"".join(batch))
            batch.clear()
            if progress is not None:
                progress("write", row + 1, size)
    out.write(b"".join(batch))
    if progress is not None:
        progress("write", size, size)
    return written, deps


def _node(trace: EtTrace, decided: Plan, row: int, message: bytes, ctrl: list[int], data: list[int]) -> bytes:
    """The kept node's message: head rebuilt, the rest copied with its run's sums."""
    name = node_type = b""
    rest: list[bytes] = []
    duration = decided.durations.get(row)
    summed = any(row in sums for sums in decided.sums.values())
    for number, start, end, value in field_spans(message):
        if number == _F["name"]:
            name = message[start:end]
        elif number == _F["type"]:
            node_type = message[start:end]
        elif number in _HEAD_FIELDS:
            continue
        elif number == _F["duration_micros"] and duration is not None:
            rest.append(encode.duration(duration))
            duration = None
        elif number == _F["attr"] and summed and isinstance(value, bytes):
            rest.append(_attr(decided, row, message[start:end], value))
        else:
            if duration is not None and number > _F["duration_micros"]:  # the run's duration, where it goes
                rest.append(encode.duration(duration))
                duration = None
            rest.append(message[start:end])
    if duration is not None:
        rest.append(encode.duration(duration))
    node_id = trace.ids[row]
    run = decided.runs.get(row)
    if run is not None:
        name = encode.name_field(run_name(trace.names[row], trace.names[run[1]], run[0]), "name")
    head = (encode.TAG_ID + wire.varint(node_id) if node_id else b"") + name + node_type
    return head + _deps(encode.TAG_CTRL, ctrl) + _deps(encode.TAG_DATA, data) + b"".join(rest)


def run_name(first: str, last: str, count: int) -> str:
    """A merged run's name: what it holds, from its first to its last node ("aten::mm ... aten::add, 57 ops")."""
    return f"{first} ... {last}, {count:,} ops"


def _deps(tag: bytes, ids: list[int]) -> bytes:
    if not ids:
        return b""
    packed = b"".join(map(wire.varint, ids))
    return tag + wire.varint(len(packed)) + packed


def _attr(decided: Plan, row: int, field: bytes, payload: bytes) -> bytes:
    """An attribute as it was, or with its run's sum when it is one of ``SUMMED``."""
    try:
        decoded = attribute(payload)
    except Malformed as exc:
        raise TraceFormatError("", f"an attribute does not decode: {exc}") from None
    name = decoded.name
    total = decided.sums.get(name, {}).get(row)
    if total is None or decoded.kind is None:
        return field
    value_field = ATTRIBUTE_FIELDS[decoded.kind][0]
    encoded = (total << 1) if value_field in _ZIGZAG else total % _U64  # sums are never negative
    value = wire.varint((value_field << 3) | WIRE_VARINT) + wire.varint(encoded)
    return wire.attribute(wire.attr_name(name), value)


_ZIGZAG = frozenset({ATTRIBUTE_FIELDS["sint32_val"][0], ATTRIBUTE_FIELDS["sint64_val"][0]})


def compact_ranks(
    in_prefix: str, out_prefix: str, on_rank_done: Callable[[CompactResult], None] | None = None
) -> list[CompactResult]:
    """Every rank ``<in_prefix>.<r>.et`` compacted into ``<out_prefix>.<r>.et``, read one at a time
    and written all or nothing (``io.OutputSet``: a failure leaves every old file as it was). A gap
    in the ranks is refused (``job.files.job_rank_files``), and so are rank files of another
    job under ``out_prefix`` beyond the new ones."""
    if os.path.isdir(in_prefix):
        raise TraceFormatError(in_prefix, "is a directory: name a .et file, or the PREFIX of PREFIX.<rank>.et files")
    if os.path.lexists(in_prefix):  # a file, not a prefix: what it is (a FIFO, a device) is the error
        check_input(in_prefix)
    inputs = job_rank_files(in_prefix)
    foreign_rank_files(out_prefix, len(inputs), f"the {len(inputs)} rank(s) of {os.path.basename(in_prefix)}")
    targets = []
    for rank, source in enumerate(inputs):  # every output checked before any work
        output = f"{out_prefix}.{rank}.et"
        in_place = os.path.realpath(source) == os.path.realpath(output)
        targets.append(check_output(output) if in_place else check_output(output, source))
    results = []
    with OutputSet(unnamed=True, shown=f"{out_prefix}.*") as files:  # every rank replaced, or none
        for source, target in zip(inputs, targets, strict=True):
            with files.open(target) as out:
                results.append(_compact_into(source, out, target.path, None))
        files.commit()
    if on_rank_done is not None:  # once written: the report says so
        for result in results:
            on_rank_done(result)
    return results
