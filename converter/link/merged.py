"""Host trace, second pass: write the merged (host + device) trace the way ``chakra_trace_link`` does.

Nodes are renumbered 0.. in id order, each host node followed by the device ops it launched
(copies of the host node with the kernel's name, category, times and stream). ``ctrl_deps`` follow
the renumbering; a parent id that is not a node gets a fresh id after all nodes, in output order,
as the reference's id assigner does. Host nodes arrive in file order; if that is not id order,
each node's block goes to a spill file and is copied out in id order, so memory stays per node.

The output is the reference's JSON document (its values; not its blank space). Writing, nodes are
decoded only as far as their top-level keys (msgspec: ``{key: raw JSON of its value}``): each value
the merged node keeps is copied as it is, and the ones the linker sets are encoded by msgspec (the
standard library's encoder takes ~10x longer), unless one is a float that is not finite (msgspec
would write ``null`` for it, the reference ``NaN``). Nodes the standard library decoded (where
msgspec refused) are merged and written by it.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from typing import Any

import msgspec

from ..io.output import OutputTarget, atomic_output
from ..io.spill import SpillFile
from .hostindex import NO_CTRL_DEPS, HostIndex, iter_host_nodes
from .linker import LinkedOp, LinkPlan

_dumps = json.JSONEncoder().encode
_encode = msgspec.json.Encoder().encode
Block = list[dict[str, Any]]


class Renumbering:
    """Original id -> merged id for host nodes, and fresh ids for dangling parents."""

    def __init__(self, index: HostIndex, plan: LinkPlan) -> None:
        self.new_id: dict[int, int] = {}
        next_id = 0
        order = index.sorted_positions()
        left_out = index.left_out
        for position in order:
            host_id = index.ids[position]
            if host_id in left_out:
                continue
            self.new_id[host_id] = next_id
            linked = plan.linked.get(host_id)
            next_id += 1 + (len(linked.gpu_ops) if linked else 0)
        self.fresh: dict[Any, int] = {}
        for position in order:
            parent = index.ctrl_deps[position]
            if index.ids[position] in left_out:
                continue
            if parent is not NO_CTRL_DEPS and self._lookup(parent) is None:
                self.fresh[parent] = next_id
                next_id += 1

    def _lookup(self, original: Any) -> int | None:
        found = self.new_id.get(original)  # ctrl_deps are JSON scalars (checked by the index)
        return found if found is not None else self.fresh.get(original)

    def parent(self, original: Any) -> Any:
        found = self._lookup(original)
        return original if found is None else found


def merged_nodes(node: dict[str, Any], plan: LinkPlan, ids: Renumbering) -> Block:
    """The host node as the merged trace has it, followed by its device ops."""
    host_id = node["id"]
    new_id = ids.new_id[host_id]
    node["id"] = new_id
    linked = plan.linked.get(host_id)
    out = [node]
    if linked is not None:
        node["inclusive_dur"] = linked.inclusive_dur
        node["exclusive_dur"] = linked.exclusive_dur
        node["ts"] = linked.ts
        dep = linked.inter_thread_dep
        node["inter_thread_dep"] = None if dep is None else ids.new_id.get(dep, dep)
        for offset, gpu in enumerate(linked.gpu_ops, start=1):
            copy = dict(node)
            copy.update(
                {
                    "id": new_id + offset,
                    "ctrl_deps": new_id,
                    "cat": gpu.cat,
                    "name": gpu.name,
                    "ph": gpu.ph,
                    "inclusive_dur": gpu.dur,
                    "exclusive_dur": gpu.excl,
                    "ts": gpu.ts,
                    "stream": gpu.stream,
                }
            )
            if "ncclDevKernel" in gpu.name and gpu.pg_name is not None:
                copy["pg_name"] = gpu.pg_name
            out.append(copy)
    if "ctrl_deps" in node:
        node["ctrl_deps"] = ids.parent(node["ctrl_deps"])
    return out


def _raw_block(
    node: dict[str, msgspec.Raw], position: int, index: HostIndex, plan: LinkPlan, ids: Renumbering
) -> bytes:
    """``merged_nodes`` of a node decoded as raw values, written as JSON text: its values, less
    those the merged nodes set, then those set."""
    host_id = index.ids[position]
    new_id = ids.new_id[host_id]
    linked = plan.linked.get(host_id)
    host_values: dict[str, Any] = {}
    if linked is not None:
        dep = linked.inter_thread_dep
        host_values.update(
            inclusive_dur=linked.inclusive_dur,
            exclusive_dur=linked.exclusive_dur,
            ts=linked.ts,
            inter_thread_dep=None if dep is None else ids.new_id.get(dep, dep),
        )
    parent = index.ctrl_deps[position]
    if parent is not NO_CTRL_DEPS:
        host_values["ctrl_deps"] = ids.parent(parent)
    exact = _linked_values_finite(linked, plan.exact_events) and (type(parent) is not float or math.isfinite(parent))
    texts = [_joined(node, new_id, host_values, exact)]
    for offset, gpu in enumerate(linked.gpu_ops if linked is not None else (), start=1):
        values = {
            "inter_thread_dep": host_values["inter_thread_dep"],
            "ctrl_deps": new_id,
            "cat": gpu.cat,
            "name": gpu.name,
            "ph": gpu.ph,
            "inclusive_dur": gpu.dur,
            "exclusive_dur": gpu.excl,
            "ts": gpu.ts,
            "stream": gpu.stream,
        }
        if "ncclDevKernel" in gpu.name and gpu.pg_name is not None:
            values["pg_name"] = gpu.pg_name
        texts.append(_joined(node, new_id + offset, values, exact))
    return b",".join(texts)


def _joined(node: dict[str, msgspec.Raw], node_id: int, values: dict[str, Any], exact: bool) -> bytes:
    """The JSON object of ``node``'s raw values with its id and ``values`` set: the id first (where
    readers look for a node's start), then the values kept, then the others set."""
    parts = [b'{"id":', str(node_id).encode("ascii")]
    kept = {key: raw for key, raw in node.items() if key != "id" and key not in values}
    if kept:
        parts += (b",", _encode(kept)[1:-1])
    if values:
        parts += (b",", (_encode(values) if exact else _dumps(values).encode("ascii"))[1:-1])
    parts.append(b"}")
    return b"".join(parts)


def _linked_values_finite(linked: LinkedOp | None, exact_events: bool) -> bool:
    """Whether every float the linker puts in a host node's block is finite: its times (and,
    unless every Kineto event was decoded by msgspec, every value taken from an event)."""
    if linked is None:
        return True
    try:
        total = linked.inclusive_dur + linked.exclusive_dur + linked.ts  # an overflow only errs on the safe side
        for gpu in linked.gpu_ops:
            total += gpu.dur + gpu.excl + gpu.ts
    except TypeError:
        return False
    if not math.isfinite(total):
        return False
    return exact_events or all(
        type(v) is not float or math.isfinite(v)
        for gpu in linked.gpu_ops
        for v in (gpu.cat, gpu.name, gpu.ph, gpu.stream, gpu.pg_name)
    )


def _block_text(block: Block) -> bytes:
    """The block's nodes as JSON text, by the standard library (which decoded them)."""
    return ",\n".join(map(_dumps, block)).encode("ascii")


def _in_id_order(texts: Iterator[bytes], index: HostIndex, spill_dir: str) -> Iterator[bytes]:
    """Spill each block's text in file order, then read the blocks back in id order."""
    rank = [0] * index.node_count
    for number, position in enumerate(index.sorted_positions()):
        rank[position] = number
    spans: list[tuple[int, int]] = [(0, 0)] * index.node_count
    spill = SpillFile(spill_dir)
    try:
        end = 0
        for position, data in enumerate(texts):
            spans[rank[position]] = (end, len(data))
            spill.write(data)
            end += len(data)
        spill.flush()
        for offset, size in spans:
            yield spill.pread(size, offset)
    finally:
        spill.close()


def _written_blocks(
    index: HostIndex, plan: LinkPlan, ids: Renumbering, nodes: Iterator[tuple[Any, bool]]
) -> Iterator[bytes]:
    """Each host node's merged block as JSON text, in file order (empty for a node left out)."""
    left_out = index.left_out
    for position, (node, exact) in enumerate(nodes):
        if left_out and index.ids[position] in left_out:
            yield b""
        elif exact:
            yield _raw_block(node, position, index, plan, ids)
        else:
            if index.reparented and isinstance(node, dict) and "ctrl_deps" in node:
                node["ctrl_deps"] = index.ctrl_deps[position]
            yield _block_text(merged_nodes(node, plan, ids))
    for node in index.synthesized:  # a cut-off trace's nodes made again, after the file's
        yield _block_text(merged_nodes(dict(node), plan, ids))


def merged_document(index: HostIndex, plan: LinkPlan, spill_dir: str) -> Iterator[bytes]:
    """The merged trace's JSON text, piece by piece (second pass over the host trace); spill
    files for an out-of-order host trace go to ``spill_dir``."""
    ids = Renumbering(index, plan)
    yield b"{"
    number = -1
    for number, (key, value) in enumerate(iter_host_nodes(index.path)):
        yield b"," * (number > 0) + b"\n" + _dumps(key).encode("ascii") + b": "
        if key == "nodes":
            texts: Iterator[bytes] = _written_blocks(index, plan, ids, value)
            if not index.ascending:
                texts = _in_id_order(texts, index, spill_dir)
            yield b"[\n"
            count = 0
            for text in texts:
                if text:  # an empty block: a node left out
                    yield b",\n" * (count > 0) + text
                    count += 1
            yield b"\n]"
        else:
            yield _dumps(value).encode("ascii")
    if index.cut_off and "finish_ts" not in index.metadata:  # a cut-off trace closed by hand
        yield b"," * (number >= 0) + b'\n"finish_ts": null'
    yield b"\n}\n"


def write_merged(index: HostIndex, plan: LinkPlan, target: OutputTarget) -> None:
    """Write the merged trace; the output appears only once it is complete."""
    with atomic_output(target, compress=target.path.endswith(".gz")) as out:
        for piece in merged_document(index, plan, target.work_dir):
            out.write(piece)


class DocumentReader(io.RawIOBase):
    """A readable file over pieces of bytes made on demand (``merged_document``), for a reader
    that takes a file: the merged trace is converted without being written anywhere."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        super().__init__()
        self._pieces = pieces
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._left = memoryview(piece)
        count = min(len(buffer), len(self._left))
        buffer[:count] = self._left[:count]
        self._left = self._left[count:]
        return count

    def close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()  # the host trace's stream and spill file
        super().close()
