"""Host trace, second pass: write the merged (host + device) trace the way ``chakra_trace_link`` does.

Nodes are renumbered 0.. in id order, each host node followed by the device ops it launched
(copies of the host node with the kernel's name, category, times and stream). ``ctrl_deps`` follow
the renumbering; a parent id that is not a node gets a fresh id after all nodes, in output order,
as the reference's id assigner does. Host nodes arrive in file order; if that is not id order,
each node's text goes to a spill file and is copied out in id order, so memory stays per node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..io import OutputTarget, SpillFile, atomic_text_output
from .hostindex import NO_CTRL_DEPS, HostIndex, iter_host_nodes
from .linker import LinkPlan

_dumps = json.JSONEncoder().encode


class Renumbering:
    """Original id -> merged id for host nodes, and fresh ids for dangling parents."""

    def __init__(self, index: HostIndex, plan: LinkPlan) -> None:
        self.new_id: dict[int, int] = {}
        next_id = 0
        order = index.sorted_positions()
        for position in order:
            host_id = index.ids[position]
            self.new_id[host_id] = next_id
            linked = plan.linked.get(host_id)
            next_id += 1 + (len(linked.gpu_ops) if linked else 0)
        self.fresh: dict[Any, int] = {}
        for position in order:
            parent = index.ctrl_deps[position]
            if parent is not NO_CTRL_DEPS and self._lookup(parent) is None:
                self.fresh[parent] = next_id
                next_id += 1

    def _lookup(self, original: Any) -> int | None:
        found = self.new_id.get(original)  # ctrl_deps are JSON scalars (checked by the index)
        return found if found is not None else self.fresh.get(original)

    def parent(self, original: Any) -> Any:
        found = self._lookup(original)
        return original if found is None else found


def merged_nodes(node: dict[str, Any], plan: LinkPlan, ids: Renumbering) -> list[dict[str, Any]]:
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


def merged_items(index: HostIndex, plan: LinkPlan, spill_dir: str) -> Iterator[tuple[str, Any]]:
    """The merged trace as top-level ``(key, value)`` pairs, in file order; the value of ``nodes``
    is an iterator over merged node dicts in output (id) order. Second pass over the host trace."""
    ids = Renumbering(index, plan)
    for key, value in iter_host_nodes(index.path):
        if key == "nodes":
            yield key, _merged_node_stream(value, index, plan, ids, spill_dir)
        else:
            yield key, value


def _merged_node_stream(
    nodes: Iterator[Any], index: HostIndex, plan: LinkPlan, ids: Renumbering, spill_dir: str
) -> Iterator[dict[str, Any]]:
    blocks = (merged_nodes(node, plan, ids) for node in nodes)
    if index.ascending:
        for block in blocks:
            yield from block
    else:
        yield from _in_id_order(blocks, index, spill_dir)


def _in_id_order(blocks: Iterator[list[dict[str, Any]]], index: HostIndex, spill_dir: str) -> Iterator[dict[str, Any]]:
    """Spill each node's block as JSON text in file order, then read the blocks back in id order."""
    rank = [0] * index.node_count
    for number, position in enumerate(index.sorted_positions()):
        rank[position] = number
    spans: list[tuple[int, int]] = [(0, 0)] * index.node_count
    spill = SpillFile(spill_dir)
    try:
        end = 0
        for position, block in enumerate(blocks):
            data = _dumps(block).encode()
            spans[rank[position]] = (end, len(data))
            spill.write(data)
            end += len(data)
        spill.flush()
        for offset, size in spans:
            yield from json.loads(spill.pread(size, offset))
    finally:
        spill.close()


def write_merged(index: HostIndex, plan: LinkPlan, target: OutputTarget) -> None:
    """Write the merged trace; the output appears only once it is complete."""
    with atomic_text_output(target) as out:
        out.write("{")
        for number, (key, value) in enumerate(merged_items(index, plan, target.work_dir)):
            out.write(("," if number else "") + "\n" + _dumps(key) + ": ")
            if key == "nodes":
                out.write("[\n")
                for count, node in enumerate(value):
                    out.write((",\n" if count else "") + _dumps(node))
                out.write("\n]")
            else:
                out.write(_dumps(value))
        out.write("\n}\n")
