"""A compacted ``.et`` written from an ``.et``: the plan (``plan.py``) applied record by record.

Two passes over the input: the first decodes the columns the plan needs (``et.decode.read_et``),
the second streams the records again and writes each kept node: its id, name and type as they
were, its kept dependencies (a dependency on a merged run's last node names the run's first),
its other fields as they were, with the summed duration, ``num_ops`` and ``tensor_size`` of its
run. The output is published atomically (``io.atomic_output``); the GlobalMetadata record is
copied. ``compact_file(path, path)`` compacts a file in place.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import TraceFormatError
from ..et import encode, wire
from ..et.decode import EtTrace, attribute, field_spans, read_et, records
from ..io import OutputTarget, atomic_output, check_input, check_output
from ..schema.chakra import NODE_FIELDS, WIRE_VARINT
from .plan import SUMMED, Plan, plan

_F = {name: number for name, (number, _) in NODE_FIELDS.items()}
_HEAD_FIELDS = frozenset({_F["id"], _F["name"], _F["type"], _F["ctrl_deps"], _F["data_deps"]})
_U64 = 1 << 64

Progress = Callable[[str, int, int], None]


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
    started = time.perf_counter()
    check_input(input_path)
    in_place = os.path.exists(output_path) and os.path.realpath(input_path) == os.path.realpath(output_path)
    target = check_output(output_path) if in_place else check_output(output_path, input_path)
    trace = read_et(input_path, SUMMED)
    decided = plan(trace)
    written, deps = _write(trace, decided, target, progress)
    return CompactResult(
        input_path=input_path, output_path=target.path, nodes_read=len(trace), nodes_written=written,
        dependencies_read=len(trace.deps), dependencies_written=deps, redundant_dependencies=decided.redundant,
        merged_nodes=decided.merged, seconds=time.perf_counter() - started,
    )


def _write(trace: EtTrace, decided: Plan, target: OutputTarget, progress: Progress | None) -> tuple[int, int]:
    head, keep = decided.head, decided.keep_dep
    parents = {node_id: row for row, node_id in enumerate(trace.ids)}
    written = deps = 0
    size = len(trace)
    with atomic_output(target) as out:
        batch: list[bytes] = []
        for number, (offset, message) in enumerate(records(trace.path)):
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
        elif number == _F["attr"] and isinstance(value, bytes):
            rest.append(_attr(decided, row, message[start:end], value))
        else:
            if duration is not None and number > _F["duration_micros"]:  # the run's duration, where it goes
                rest.append(encode.duration(duration))
                duration = None
            rest.append(message[start:end])
    if duration is not None:
        rest.append(encode.duration(duration))
    node_id = trace.ids[row]
    head = (encode.TAG_ID + wire.varint(node_id) if node_id else b"") + name + node_type
    return head + _deps(encode.TAG_CTRL, ctrl) + _deps(encode.TAG_DATA, data) + b"".join(rest)


def _deps(tag: bytes, ids: list[int]) -> bytes:
    if not ids:
        return b""
    packed = b"".join(map(wire.varint, ids))
    return tag + wire.varint(len(packed)) + packed


def _attr(decided: Plan, row: int, field: bytes, payload: bytes) -> bytes:
    """An attribute as it was, or with its run's sum when it is one of ``SUMMED``."""
    name, value_field, _ = attribute(payload)
    total = decided.sums.get(name, {}).get(row)
    if total is None:
        return field
    value = wire.varint((value_field << 3) | WIRE_VARINT) + wire.varint(total % _U64)
    return wire.attribute(wire.attr_name(name), value)
