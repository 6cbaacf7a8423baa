"""Host trace, first pass: the few fields of each node the linker needs, not the nodes themselves.

The merged trace is written in a second pass over the file (``merged.py``), so memory here is a
handful of integers per node whatever the size of each node's inputs and attributes.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceContentError, TraceFormatError
from ..jsonstream import JsonObjectStream
from ..schema.compat import map_old_schema_node

ROOT_ID = 1  # et_replay's root: the process node, id 1
_U64 = 1 << 64
NO_CTRL_DEPS = object()  # marks a node without a ``ctrl_deps`` key (left untouched on output)


@dataclass
class HostIndex:
    """Per node, in file order: id, parent, ``rf_id`` and name; plus the top-level metadata."""

    path: str
    ids: array[int] = field(default_factory=lambda: array("Q"))
    ctrl_deps: list[Any] = field(default_factory=list)
    rf_ids: list[Any] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    ascending: bool = True

    @property
    def node_count(self) -> int:
        return len(self.ids)

    def sorted_positions(self) -> list[int]:
        """File positions ordered by node id: the order of the merged trace."""
        if self.ascending:
            return list(range(len(self.ids)))
        ids = self.ids
        return sorted(range(len(ids)), key=ids.__getitem__)

    def reachable_ids(self) -> set[int]:
        """Ids reachable from node 1 through children (et_replay's tree), iteratively."""
        present = set(self.ids)
        if ROOT_ID not in present:
            return set()
        children: dict[Any, list[int]] = {}
        for node_id, parent in zip(self.ids, self.ctrl_deps, strict=True):
            if node_id != ROOT_ID and parent in present:
                children.setdefault(parent, []).append(node_id)
        seen = {ROOT_ID}
        stack = [ROOT_ID]
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return seen


def iter_host_nodes(path: str, index_metadata: dict[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """Top-level ``(key, value)`` pairs of a host trace; ``nodes`` yields mapped node dicts."""
    with JsonObjectStream(path, stream_keys={"nodes"}) as stream:
        for key, value in stream.items():
            if key == "nodes":
                yield key, (map_old_schema_node(n) if isinstance(n, dict) else n for n in value)
            else:
                if index_metadata is not None:
                    index_metadata[key] = value
                yield key, value


def index_host_trace(path: str | os.PathLike[str]) -> HostIndex:
    """First pass over a host trace; raises on layouts the linker cannot use."""
    index = HostIndex(os.fspath(path))
    seen_nodes = False
    for key, value in iter_host_nodes(index.path, index.metadata):
        if key == "nodes":
            seen_nodes = True
            _index_nodes(index, value)
    if not seen_nodes:
        raise TraceFormatError(index.path, "no 'nodes' array: not a Chakra host execution trace")
    if not index.node_count:
        raise TraceContentError(index.path, "the host trace has no nodes")
    return index


def _index_nodes(index: HostIndex, nodes: Iterator[Any]) -> None:
    seen: set[int] = set()
    previous = -1
    for position, node in enumerate(nodes):
        node_id = _node_id(index.path, position, node)
        if node_id in seen:
            raise TraceContentError(index.path, f"node #{position}: duplicate node id {node_id}")
        seen.add(node_id)
        index.ascending = index.ascending and node_id > previous
        previous = node_id
        index.ids.append(node_id)
        index.ctrl_deps.append(_parent(index.path, position, node))
        index.rf_ids.append(_rf_id(index.path, position, node))
        index.names.append(_name(index.path, position, node))


def _node_id(path: str, position: int, node: Any) -> int:
    if not isinstance(node, dict):
        raise TraceContentError(path, f"node #{position} is a {type(node).__name__}, not a JSON object")
    node_id = node.get("id")
    if type(node_id) is not int or not 0 <= node_id < _U64:  # the ids of a Chakra trace are uint64
        raise TraceContentError(path, f"node #{position}: id must be a non-negative integer below 2**64, "
                                      f"got {node_id!r}")
    return node_id


def _parent(path: str, position: int, node: dict[str, Any]) -> Any:
    """``ctrl_deps`` as the linker keys tables with it: a JSON scalar (a parent id that is no node is
    kept, and renumbered, as the reference does), or NO_CTRL_DEPS where the node has none."""
    parent = node.get("ctrl_deps", NO_CTRL_DEPS)
    if isinstance(parent, list | dict):
        shown = repr(parent)
        raise TraceContentError(path, f"node #{position} (id {node['id']}): ctrl_deps must be a node id, "
                                      f"got {shown if len(shown) <= 60 else shown[:60] + '...'}")
    return parent


def _name(path: str, position: int, node: dict[str, Any]) -> str:
    """The node's name: et_replay reads it from every node, and the converter needs a string."""
    if "name" not in node:
        raise TraceContentError(path, f"node #{position} (id {node['id']}): missing required field 'name'")
    name = node["name"]
    if not isinstance(name, str):
        raise TraceContentError(path, f"node #{position} (id {node['id']}): name must be a string, got {name!r}")
    return name


def _rf_id(path: str, position: int, node: dict[str, Any]) -> Any:
    """The record-function id et_replay reads: the last ``rf_id`` entry of ``attrs``, as int."""
    attrs = node.get("attrs") or ()
    if not isinstance(attrs, list | tuple):
        raise TraceContentError(path, f"node #{position} (id {node['id']}): malformed 'attrs' "
                                      f"(a list of {{name, value}} entries expected), got {type(attrs).__name__}")
    found = None
    for attr in attrs:
        if isinstance(attr, dict) and attr.get("name") == "rf_id":
            found = attr.get("value")
    try:
        return None if found is None else int(found)
    except (TypeError, ValueError):
        return None
