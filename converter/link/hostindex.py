"""Host trace, first pass: the few fields of each node the linker needs, not the nodes themselves.

The merged trace is written in a second pass over the file (``merged.py``), so memory here is a
handful of integers per node whatever the size of each node's inputs and attributes. Runs of nodes
are decoded by msgspec into ``_IndexedNode``\\ s, which skip everything else (``fastjson``: exact
or refused; a run holding a 1.0.1-layout node is refused too, as it needs the layout's mapping).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import TraceContentError, TraceFormatError
from ..fastjson import ExactDecoder
from ..jsonstream import DecodedRun, JsonObjectStream
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
    tids: list[Any] = field(default_factory=list)  # the ``tid`` attribute (the observer's thread number)
    metadata: dict[str, Any] = field(default_factory=dict)
    ascending: bool = True
    #: ids left out of the merged trace (steps not linked: ``steps.py``), whole subtrees
    left_out: frozenset[int] = frozenset()
    #: nodes made up for a cut-off trace (``cutoff.py``): positions past the file's, written last
    synthesized: list[dict[str, Any]] = field(default_factory=list)
    reparented: bool = False  # some ``ctrl_deps`` here differ from the file's (``cutoff.py``)
    cut_off: bool = False  # a trace cut off before its end (``cutoff.py``)

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
        """Ids reachable from node 1 through children (et_replay's tree), iteratively; the
        subtrees left out are not."""
        if ROOT_ID in self.left_out or ROOT_ID not in set(self.ids):
            return set()
        return self.subtrees([ROOT_ID], skip=self.left_out)

    def subtrees(self, tops: Iterable[int], *, skip: Collection[int] = frozenset()) -> set[int]:
        """The ids of ``tops`` and of every node under them (through ``ctrl_deps``, iteratively),
        leaving out the nodes of ``skip`` and what lies under them only through those."""
        children: dict[Any, list[int]] = {}
        for node_id, parent in zip(self.ids, self.ctrl_deps, strict=True):
            if parent != node_id and node_id not in skip:
                children.setdefault(parent, []).append(node_id)
        seen = set(tops)
        stack = list(seen)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        return seen


class _Attr(msgspec.Struct, gc=False):
    name: Any = None
    value: Any = None


class _IndexedNode(msgspec.Struct, gc=False):
    """What the first pass reads of a node (absent: UNSET for ctrl_deps). The types are those
    ``_dict_fields`` accepts: a run msgspec refuses is read by the standard library and checked
    there, so that errors name the node."""

    name: str
    id: Any = None
    ctrl_deps: int | float | str | bool | msgspec.UnsetType | None = msgspec.UNSET
    attrs: list[_Attr] | None = None
    parent: Any = msgspec.UNSET  # 1.0.1 layout (with no ctrl_deps)


_INDEXED_RUNS = ExactDecoder(msgspec.json.Decoder(list[_IndexedNode]))


def _indexed_run(text: str) -> list[_IndexedNode] | None:
    nodes = _INDEXED_RUNS(text)
    if nodes is None or any(n.parent is not msgspec.UNSET and n.ctrl_deps is msgspec.UNSET for n in nodes):
        return None
    return nodes


_RAW_NODE_RUNS = ExactDecoder(msgspec.json.Decoder(list[dict[str, msgspec.Raw]]))


def _raw_node_run(text: str) -> list[dict[str, msgspec.Raw]] | None:
    """The run's nodes as ``{key: raw JSON}``, the raw JSON without blank space (what the merged
    trace copies: written indented, traces are ~4x larger, and so slower to write and to read)."""
    try:
        text = msgspec.json.format(text, indent=-1)  # only blank space changes: tokens are kept as they are
    except (msgspec.DecodeError, RecursionError, ValueError):
        return None
    nodes = _RAW_NODE_RUNS(text)
    if nodes is None or any("parent" in n and "ctrl_deps" not in n for n in nodes):
        return None  # a 1.0.1-layout node needs the layout's mapping, on decoded values
    return nodes


def iter_host_nodes(path: str) -> Iterator[tuple[str, Any]]:
    """Top-level ``(key, value)`` pairs of a host trace; ``nodes`` yields ``(node, exact)``: the
    node as msgspec decodes it, ``{key: raw JSON of its value}`` (no value decoded), with exact
    True; or the node the standard library decoded (where msgspec refused), mapped to the newer
    layout, with exact False (then its floats may be NaN or infinite)."""
    with JsonObjectStream(path, stream_keys={"nodes"}, batch=_raw_node_run) as stream:
        for key, value in stream.items():
            yield key, (_mapped_nodes(value) if key == "nodes" else value)


def _mapped_nodes(elements: Iterator[Any]) -> Iterator[tuple[Any, bool]]:
    for element in elements:
        if type(element) is DecodedRun:  # no 1.0.1-layout node in it: _raw_node_run refused those
            for node in element:
                yield node, True
        else:
            yield (map_old_schema_node(element) if isinstance(element, dict) else element), False


def index_host_trace(path: str | os.PathLike[str]) -> HostIndex:
    """First pass over a host trace; raises on layouts the linker cannot use."""
    index = HostIndex(os.fspath(path))
    seen_nodes = False
    with JsonObjectStream(index.path, stream_keys={"nodes"}, batch=_indexed_run) as stream:
        for key, value in stream.items():
            if key == "nodes":
                seen_nodes = True
                _index_nodes(index, value)
            else:
                index.metadata[key] = value
    if not seen_nodes:
        raise TraceFormatError(index.path, "no 'nodes' array: not a Chakra host execution trace")
    if not index.node_count:
        raise TraceContentError(index.path, "the host trace has no nodes")
    return index


def _index_nodes(index: HostIndex, elements: Iterator[Any]) -> None:
    seen: set[int] = set()
    previous = -1
    position = 0
    for element in elements:
        single = map_old_schema_node(element) if isinstance(element, dict) else element
        for node in element if type(element) is DecodedRun else (single,):
            if type(node) is _IndexedNode:
                node_id, ctrl_deps, rf_id, name, tid = _indexed_fields(index.path, position, node)
            else:
                node_id, ctrl_deps, rf_id, name, tid = _dict_fields(index.path, position, node)
            if node_id in seen:
                raise TraceContentError(index.path, f"node #{position}: duplicate node id {node_id}")
            seen.add(node_id)
            index.ascending = index.ascending and node_id > previous
            previous = node_id
            index.ids.append(node_id)
            index.ctrl_deps.append(ctrl_deps)
            index.rf_ids.append(rf_id)
            index.names.append(name)
            index.tids.append(tid)
            position += 1


def _indexed_fields(path: str, position: int, node: _IndexedNode) -> tuple[int, Any, Any, str, Any]:
    node_id = node.id
    if type(node_id) is not int or not 0 <= node_id < _U64:  # the ids of a Chakra trace are uint64
        raise TraceContentError(
            path, f"node #{position}: id must be a non-negative integer below 2**64, got {node_id!r}"
        )
    found = tid = None
    for attr in node.attrs or ():
        if attr.name == "rf_id":
            found = attr.value
        elif attr.name == "tid":
            tid = attr.value
    ctrl_deps = NO_CTRL_DEPS if node.ctrl_deps is msgspec.UNSET else node.ctrl_deps
    return node_id, ctrl_deps, _as_rf_id(found), node.name, _key(tid)


def _dict_fields(path: str, position: int, node: Any) -> tuple[int, Any, Any, str, Any]:
    """A node the standard library decoded, checked as msgspec checks ``_IndexedNode``."""
    node_id = _node_id(path, position, node)
    rf_id = _rf_id(path, position, node)
    tid = None
    for attr in node.get("attrs") or ():
        if isinstance(attr, dict) and attr.get("name") == "tid":
            tid = attr.get("value")
    return node_id, _parent(path, position, node), rf_id, _name(path, position, node), _key(tid)


def _key(value: Any) -> Any:
    """A value usable as a dict key (the thread number keys the by-order linking), else None."""
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _node_id(path: str, position: int, node: Any) -> int:
    if not isinstance(node, dict):
        raise TraceContentError(path, f"node #{position} is a {type(node).__name__}, not a JSON object")
    node_id = node.get("id")
    if type(node_id) is not int or not 0 <= node_id < _U64:  # the ids of a Chakra trace are uint64
        raise TraceContentError(
            path, f"node #{position}: id must be a non-negative integer below 2**64, got {node_id!r}"
        )
    return node_id


def _parent(path: str, position: int, node: dict[str, Any]) -> Any:
    """``ctrl_deps`` as the linker keys tables with it: a JSON scalar (a parent id that is no node is
    kept, and renumbered, as the reference does), or NO_CTRL_DEPS where the node has none."""
    parent = node.get("ctrl_deps", NO_CTRL_DEPS)
    if isinstance(parent, list | dict):
        shown = repr(parent)
        raise TraceContentError(
            path,
            f"node #{position} (id {node['id']}): ctrl_deps must be a node id, "
            f"got {shown if len(shown) <= 60 else shown[:60] + '...'}",
        )
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
        raise TraceContentError(
            path,
            f"node #{position} (id {node['id']}): malformed 'attrs' "
            f"(a list of {{name, value}} entries expected), got {type(attrs).__name__}",
        )
    found = None
    for attr in attrs:
        if isinstance(attr, dict) and attr.get("name") == "rf_id":
            found = attr.get("value")
    return _as_rf_id(found)


def _as_rf_id(found: Any) -> int | None:
    try:
        return None if found is None else int(found)
    except (TypeError, ValueError):
        return None
