"""The process group of each host-side collective, read from the trace.

gloo records no process group on its ``c10d::`` ops (the group is an ``<Object>`` input, and there
is no ``record_param_comms``), so a job of several groups (tensor x data parallel, a pipeline)
would have every collective land in the all-ranks group. Three things in a host trace name it:

1. **The group marker** ``## chakra:group NAME RANKS ##`` (``RANKS`` comma-separated global
   ranks), a record function that ``chakra-profile`` opens inside every ``c10d::`` op it issues on
   gloo (``profiler/groups.py``): a child of the ``c10d::`` node. Anyone can write it from their
   own tracer the same way.
2. **A functional collective** (``_c10d_functional::all_reduce`` and kin, what DTensor and tensor
   parallelism issue): its last string input is the group's name; the ``c10d::`` op it runs is its
   descendant.
3. **The ``## process_group:init ##`` node** lists every group of the job (name, ranks, size):
   what a group name means, and whether the job has groups other than all ranks at all.

``collective_group`` finds 1, else 2; ``listed_groups`` reads 3. A collective that names no group
in a job whose init node lists more than one set of ranks cannot be placed: the caller warns.
"""

from __future__ import annotations

from typing import Any

from ..schema.distributed import FUNCTIONAL_PREFIX, init_node_groups
from ..schema.distributed import PROCESS_GROUP_INIT as PROCESS_GROUP_INIT
from ..schema.distributed import GroupLabel as GroupLabel
from ..schema.distributed import ListedGroup as ListedGroup
from ..schema.distributed import init_groups as init_groups
from ..schema.distributed import marker_name as marker_name
from ..schema.distributed import parse_marker as parse_marker
from .graph import TraceGraph

_ANCESTORS = 6  # how far up a functional collective may sit above its c10d op


def names_groups(name: str) -> bool:
    """Nodes whose inputs say something about groups (read on the exact path)."""
    return name.startswith(FUNCTIONAL_PREFIX) or PROCESS_GROUP_INIT in name


def group_info(name: str, inputs: Any) -> Any:
    """What a node of ``names_groups`` says, kept with the graph: a functional collective's group
    name (str), or the init node's groups (a tuple of ``ListedGroup``); None if it says nothing."""
    values, types = (inputs.get("values"), inputs.get("types")) if isinstance(inputs, dict) else (inputs, None)
    if not isinstance(values, list):
        return None
    if PROCESS_GROUP_INIT in name:
        return init_node_groups(values)
    if isinstance(types, list) and len(types) == len(values):
        strings = [v for v, t in zip(values, types, strict=True) if t == "String" and isinstance(v, str)]
        return strings[-1] if strings else None
    return None


def listed_groups(graph: TraceGraph) -> dict[str, ListedGroup]:
    """The groups the trace's init node(s) list, by name."""
    found: dict[str, ListedGroup] = {}
    for info in graph.group_info.values():
        if isinstance(info, tuple):
            found.update((g.name, g) for g in info)
    return found


def several_groups(listed: dict[str, ListedGroup]) -> bool:
    """True when the job's groups are not all the same set of ranks (a collective with no group
    could then be in any of them)."""
    return len({g.members() for g in listed.values()}) > 1


def collective_group(graph: TraceGraph, outer: int, listed: dict[str, ListedGroup]) -> GroupLabel | None:
    """The group of the ``c10d::`` op at row ``outer``: its marker child, else the functional
    collective above it (ranks from ``listed``); None if the trace does not say."""
    for child in graph.children(outer):
        label = parse_marker(graph.names[child])
        if label is not None:
            return label
    row = graph.parent_row(outer)
    for _ in range(_ANCESTORS):
        if row < 0:
            break
        info = graph.group_info.get(row)
        if isinstance(info, str):
            entry = listed.get(info)
            return GroupLabel(info, entry.members() if entry is not None else ())
        row = graph.parent_row(row)
    return None
