"""ASTRA-sim's memory fields: the ``inputs`` and ``outputs`` attributes its ``track-local-mem`` reads.

ASTRA-sim's ``LocalMemUsageTracker`` (astra-sim ``workload/LocalMemUsageTracker.cc``, feeder v3)
reads, when a node ends, two attributes of it: ``inputs`` (the tensors it read) and ``outputs``
(the tensors it made), each a ``string_list`` of (tensor name, bytes) pairs; it throws where a
node lacks either. A tensor lives from the start of the node that wrote it to the end of the last
node that read it (one never read lives to the end); a tensor read before any node wrote it is taken
as written at time 0 (what the step found live), and a tensor written twice, or written after a
node read it, fails an assertion (``LocalMemUsageTracker.cc:147``). Its peak is logged as
``sys[R] peak memory usage: X MB`` (MB: 2^20 bytes), at the end of the rank's report.

What this writes, per node, from the tensors of its ``inputs``/``outputs`` values (each storage on
the training device, named ``<storage id>.<generation>`` as ``host.read_host`` follows them: a
storage id the observer hands to a new allocation is a new tensor). A ``.et`` keeps no strides, so
a broadcast view (``expand``: stride 0) would count its elements, not its storage's: a storage's
bytes are those of the tensor that allocated it, or of a tensor a node writes in place (its output
the very tensor it read, not a view op's new one), the largest view read where there is neither.
``outputs`` lists the tensors
the node made (the first node that outputs a storage it does not read), ``inputs`` every other
tensor it touched (read, or written in place). A read is listed only where the tensor's writer is an
ancestor of the reader in the graph (so it has ended before the reader starts, in any order the
simulator issues independent nodes); the others are counted and left out (none on the captures
measured, docs/memory.md). A tensor no node reads (made and never used again) is listed as read by
the writer's first dependent: the tracker would keep it to the end of the run, where ``memory``
frees it after its last use.

The copies are for the memory tracker: its report comes after the rank's statistics, which throw on
a compute node with ``is_cpu_op`` true ("Only GPU and COMM types are supported for overlap
extraction", ``Statistics.cc``), so the copies mark every compute node as device compute. Their
simulated time is not the job's: simulate the job itself for that.
"""

from __future__ import annotations

import ast
import heapq
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import TraceFormatError
from ..et.decode import _fields, attribute_spans, iter_records, packed_ids, text_value
from ..et.wire import attribute, attribute_message, delimited_message
from ..io import atomic_output, check_output
from ..schema.chakra import IO_FIELDS, NODE_FIELDS, NodeType
from .host import _FLAG, HostTensors, Storage, _encloses, _optimizer_ranges, _resolve
from .kineto import FORWARD, phase_of_name

_ID, _NAME, _TYPE = NODE_FIELDS["id"][0], NODE_FIELDS["name"][0], NODE_FIELDS["type"][0]
_CTRL, _DATA = NODE_FIELDS["ctrl_deps"][0], NODE_FIELDS["data_deps"][0]
_INPUTS, _OUTPUTS = NODE_FIELDS["inputs"][0], NODE_FIELDS["outputs"][0]
_IO = {IO_FIELDS["values"][0]: "values", IO_FIELDS["shapes"][0]: "shapes", IO_FIELDS["types"][0]: "types"}
_COMP = NodeType.COMP_NODE
_CPU_FALSE = attribute(b"", attribute_message("is_cpu_op", "bool_val", False))  # an ``attr`` entry
_SEARCH_LIMIT = 200_000  # nodes one ancestor question may visit before the read is left out
_DECODE = msgspec.json.Decoder()


@dataclass
class FieldStats:
    """What ``write_fields`` wrote for one rank."""

    path: str
    nodes: int
    tensors: int
    reads: int
    dropped: int  # reads left out: the writer is not an ancestor of the reader


def _literal(raw: Any) -> Any:
    """A value, shapes or types string of an ``IOInfo`` (Python's ``str()`` of a list)."""
    text = text_value(raw) if isinstance(raw, bytes) else ""
    if not text:
        return None
    try:
        return _DECODE.decode(text.replace("'", '"'))
    except msgspec.DecodeError:
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None


def _io(raw: bytes) -> list[tuple[int, int, int, str]]:
    """(storage id, bytes from the storage's start, tensor id, device) of each tensor of an
    ``IOInfo`` (a tensor list's items too)."""
    part: dict[str, Any] = {}
    for number, _, value in _fields(raw):
        if number in _IO:
            part[_IO[number]] = _literal(value)
    values, types = part.get("values"), part.get("types")
    found: list[tuple[int, int, int, str]] = []
    if not isinstance(values, list) or not isinstance(types, list):
        return found
    for value, kind in zip(values, types, strict=False):
        if not isinstance(kind, str) or "Tensor" not in kind or not isinstance(value, list):
            continue
        for item in value if value and isinstance(value[0], list) else [value]:
            if isinstance(item, list) and len(item) == 6 and all(type(v) is int for v in item[:5]):
                tid, sid, offset, numel, itemsize, device = item
                found.append((sid, (offset + numel) * itemsize, tid, str(device)))
    return found


_Uses = tuple[list[tuple[int, int, int, str]], list[tuple[int, int, int, str]]]


class _Job:
    """One rank's nodes: ids, dependencies (to answer "is W an ancestor of R"), parents, and each
    node's tensors read and written (storage id, bytes, -, device)."""

    def __init__(self, path: str) -> None:
        self.ids = array("q")
        self.dep_start = array("q", [0])
        self.deps = array("q")
        self.parent: dict[int, int] = {}
        self.devices: dict[str, int] = {}
        self.uses: list[_Uses] = []
        self.own: dict[int, str] = {}  # node id -> the phase its name marks
        self.steps: list[int] = []  # optimizer steps, and what ends one (host.read_host's)
        self.ends: list[int] = []
        for number, (_, message) in enumerate(iter_records(path)):
            if number == 0:
                continue  # GlobalMetadata
            self._add(message)

    def _add(self, message: bytes) -> None:
        node_id, name = -1, ""
        ctrl: list[int] = []
        data: list[int] = []
        ins: list[tuple[int, int, int, str]] = []
        outs: list[tuple[int, int, int, str]] = []
        for number, _, raw in _fields(message):
            if number == _ID:
                node_id = raw
            elif number == _NAME:
                name = text_value(raw)
            elif number == _CTRL:
                ctrl.extend(packed_ids(raw))
            elif number == _DATA:
                data.extend(packed_ids(raw))
            elif number == _INPUTS:
                ins = _io(raw)
            elif number == _OUTPUTS:
                outs = _io(raw)
        self.ids.append(node_id)
        phase = phase_of_name(name)
        if phase is not None:
            self.own[node_id] = phase
        if name.startswith("Optimizer.step#"):
            self.steps.append(node_id)
        elif name.startswith(("Optimizer.zero_grad#", "ProfilerStep#")):
            self.ends.append(node_id)
        self.deps.extend(ctrl + data)
        self.dep_start.append(len(self.deps))
        if ctrl:
            self.parent[node_id] = ctrl[0]
        for t in outs:
            self.devices[t[3]] = self.devices.get(t[3], 0) + 1
        self.uses.append((ins, outs))

    def tensors(self) -> tuple[list[dict[str, int]], list[dict[str, int]], dict[str, int], int]:
        """Per row, the tensors it read (name -> writer row, -1 where none wrote it) and made
        (name -> its row), each tensor's bytes, and how many rows there are. A tensor is made
        where ``host.read_host`` has it made: at the first node that outputs it fresh, or at its
        first use where ``HostTensors.pre_existing`` says it was not live before the step (a
        gradient first touched by the backward pass, a collective's output buffer)."""
        phases = _resolve(self.parent, self.own)
        _optimizer_ranges(phases, self.own, self.steps, self.ends)
        cuda = [d for d in self.devices if d.startswith("cuda")]
        device = max(cuda, key=lambda d: self.devices[d]) if cuda else "cpu"
        rows = sorted(range(len(self.ids)), key=self.ids.__getitem__)
        touched: list[list[str]] = [[] for _ in self.ids]
        size: dict[str, int] = {}  # the largest view read, replaced below by the largest written
        written: dict[str, int] = {}
        record: dict[str, Storage] = {}
        writer: dict[str, int] = {}  # name -> row that made it
        first_row: dict[str, int] = {}
        current: dict[int, tuple[int, str]] = {}  # storage id -> (generation, name)
        for row in rows:
            nid = self.ids[row]
            flag = _FLAG[phases.get(nid, FORWARD)]
            ins = [(sid, nbytes, tid) for sid, nbytes, tid, dev in self.uses[row][0] if dev == device and sid > 0]
            read_ids = {sid for sid, _, _ in ins}
            read_tensors = {tid for _, _, tid in ins}
            outs = [(sid, nbytes, tid) for sid, nbytes, tid, dev in self.uses[row][1] if dev == device and sid > 0]
            uses = [(sid, nbytes, 0, False) for sid, nbytes, _ in ins] + [
                (sid, nbytes, 2, True) if sid not in read_ids else (sid, nbytes, 1, tid in read_tensors)
                for sid, nbytes, tid in outs
            ]
            for sid, nbytes, kind, allocated in uses:
                gen, name = current.get(sid, (-1, ""))
                s = record.get(name)
                if s is None or (kind == 2 and s.last != nid and not _encloses(self.parent, s.last, nid)):
                    gen, name = gen + 1, f"{sid}.{gen + 1}"
                    current[sid] = (gen, name)
                    s = record[name] = Storage()
                    first_row[name] = row
                    if kind == 2:
                        writer[name] = row
                if allocated:  # made here, or the very tensor the node read, written in place
                    written[name] = max(written.get(name, 0), nbytes)
                else:
                    size[name] = max(size.get(name, 0), nbytes)
                s.used_by |= flag
                s.last = max(s.last, nid)
                if nid <= min(s.first_read, s.first_write):
                    s.first_by = flag
                if kind == 0:
                    s.first_read = min(s.first_read, nid)
                elif nid < s.first_write:
                    s.first_write = nid
                if not touched[row] or touched[row][-1] != name:
                    touched[row].append(name)
        size.update(written)  # a written view is never a broadcast one (the module's docstring)
        for name in record:
            size.setdefault(name, 0)
        rule = HostTensors("", device)
        for name, s in record.items():
            if name not in writer and not rule.pre_existing(s):
                writer[name] = first_row[name]
        reads: list[dict[str, int]] = [{} for _ in self.ids]
        made: list[dict[str, int]] = [{} for _ in self.ids]
        for row in rows:
            for name in touched[row]:
                if writer.get(name) == row:
                    made[row][name] = row
                else:
                    reads[row][name] = writer.get(name, -1)
        self.uses = []
        return reads, made, size, len(self.ids)


def _ancestry(job: _Job) -> tuple[Any, dict[int, int]]:
    """``is_ancestor(w, r)`` for rows, over a topological order of the graph (Kahn's, lower ids
    first; a dependency on a missing node, or a cycle, is refused). A run of nodes each depending
    on the one before it in that order answers at once; else a search back through the
    dependencies, never below the writer's place, bounded by ``_SEARCH_LIMIT``."""
    n = len(job.ids)
    by_id = {job.ids[row]: row for row in range(n)}
    waiting = array("q", bytes(8 * n))
    children: dict[int, list[int]] = {}
    for row in range(n):
        for dep in job.deps[job.dep_start[row] : job.dep_start[row + 1]]:
            if dep not in by_id:
                raise TraceFormatError("", f"node {job.ids[row]} depends on node {dep}, which is not in the file")
            waiting[row] += 1
            children.setdefault(by_id[dep], []).append(row)
    ready = [(job.ids[row], row) for row in range(n) if waiting[row] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, row = heapq.heappop(ready)
        order.append(row)
        for child in children.get(row, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (job.ids[child], child))
    if len(order) != n:
        raise TraceFormatError("", "the dependencies form a cycle")
    position = array("q", bytes(8 * n))
    for pos, row in enumerate(order):
        position[row] = pos
    run_start = array("q", bytes(8 * n))
    for pos, row in enumerate(order):
        deps = job.deps[job.dep_start[row] : job.dep_start[row + 1]]
        run_start[pos] = run_start[pos - 1] if pos and job.ids[order[pos - 1]] in deps else pos

    def is_ancestor(writer: int, reader: int) -> bool:
        w = position[writer]
        stack: list[int] = [position[reader]]
        seen: set[int] = set()
        while stack and len(seen) < _SEARCH_LIMIT:
            p = stack.pop()
            if run_start[p] <= w < p:
                return True
            row = order[p]
            for dep in job.deps[job.dep_start[row] : job.dep_start[row + 1]]:
                q = position[by_id[dep]]
                if q == w:
                    return True
                if q > w and q not in seen:
                    seen.add(q)
                    stack.append(q)
        return False

    first_child = {row: min(kids, key=job.ids.__getitem__) for row, kids in children.items()}
    return is_ancestor, first_child


def _pairs(names: Sequence[str], size: dict[str, int]) -> list[str]:
    """(name, bytes) flattened, empty tensors left out (the tracker skips them too)."""
    return [v for name in names if size[name] for v in (name, str(size[name]))]


def write_fields(source: str, target: str) -> FieldStats:
    """``source`` (a rank's ``.et``) with ASTRA-sim's memory fields on every node, as ``target``."""
    try:
        job = _Job(source)
        is_ancestor, first_child = _ancestry(job)
    except TraceFormatError as exc:
        raise TraceFormatError(source, exc.problem) from None
    reads, made, size, count = job.tensors()
    read = {name for row_reads in reads for name in row_reads}
    for row, names in enumerate(made):
        child = first_child.get(row)
        for name in names:
            if name not in read and child is not None:
                reads[child][name] = row  # freed once the writer's first dependent ends
    stats = FieldStats(target, count, sum(1 for b in size.values() if b), 0, 0)
    with atomic_output(check_output(target, source)) as out:
        for number, (_, message) in enumerate(iter_records(source)):
            if number == 0:
                out.write(delimited_message(message))
                continue
            row = number - 1
            kept = []
            for name, writer in reads[row].items():
                if not size[name]:
                    continue
                if writer < 0 or is_ancestor(writer, row):
                    kept.append(name)
                else:
                    stats.dropped += 1
            stats.reads += len(kept)
            body = _device_compute(message)
            body += attribute(b"", attribute_message("inputs", "string_list", _pairs(kept, size)))
            body += attribute(b"", attribute_message("outputs", "string_list", _pairs(list(made[row]), size)))
            out.write(delimited_message(body))
    return stats


def _device_compute(message: bytes) -> bytes:
    """The node with ``is_cpu_op`` false where it is a compute node (the module's docstring)."""
    node_type = next((raw for number, _, raw in _fields(message) if number == _TYPE), None)
    if node_type != _COMP:
        return message
    parts, pos = [], 0
    for name, start, end in attribute_spans(message):
        if name == "is_cpu_op":
            parts.append(message[pos:start])
            pos = end
    parts.append(message[pos:])
    return b"".join(parts) + _CPU_FALSE


def write_job_fields(prefix: str, out_prefix: str, ranks: int) -> list[FieldStats]:
    """Every rank's copy (``OUT_PREFIX.<r>.et``); none is left where one fails."""
    targets = [f"{out_prefix}.{r}.et" for r in range(ranks)]
    sources = [f"{prefix}.{r}.et" for r in range(ranks)]
    for target in targets:
        check_output(target, *sources)
    existed = [os.path.lexists(t) for t in targets]
    done: list[FieldStats] = []
    try:
        for source, target in zip(sources, targets, strict=True):
            done.append(write_fields(source, target))
    except BaseException:
        for target, was in zip(targets[: len(done)], existed, strict=False):
            if not was:
                os.unlink(target)
        raise
    return done
