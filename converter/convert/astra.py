"""The ``--astra-sim`` output profile: the converted graph changed so that ASTRA-sim runs it.

Applied to the built graph before cycles are checked and nodes written; every change is one the
simulator needs (``schema/astra.py`` says why), and every other node and edge stays as in the
default output:

1. METADATA nodes (``## process_group:init ##``) are removed, and each node that depended on one
   depends on its dependencies instead (what ASTRA-sim itself would do: it issues a METADATA node
   in zero time, then releases its dependents), so the order of everything else is unchanged;
2. ``ctrl_deps`` naming a node that is not written (the self-parented process node the reference
   drops as dangling) are left out;
3. host-side collectives (gloo): the outer ``c10d::`` op of each collective ASTRA-sim simulates
   becomes a communication node (type, ``comm_size`` in bytes, ``pg_name``, peer and tag for
   send/recv; not a CPU op), and the ``gloo:`` ops that did its work (the record-function ids
   after it, before the next ``c10d::`` op) keep no duration, so the time is not counted twice.
   A broadcast, which ASTRA-sim replays for its duration, takes the gloo work's duration.
   Collectives with a device kernel (NCCL) keep the reference's kernel-based comm nodes; in an
   NCCL trace without its Kineto trace (no kernels), the ``c10d::`` op of each collective becomes
   the communication node as for gloo (its ``record_param_comms`` and ``nccl:*`` children stay
   compute nodes: one communication node per collective), in the process group its
   ``record_param_comms`` records as ``pg_name`` (PyTorch 2.4+), else the default one.
   A gloo collective's group is the one the trace names (``groups.py``: the group marker
   ``chakra-profile`` writes, or the functional collective above it), else the default one; the
   peer of a send/receive, a rank of that group, is written as a global rank; a collective of a
   one-rank group stays a compute node (nothing moves; ASTRA-sim would never complete it). A collective naming
   no group in a job whose ``## process_group:init ##`` lists several sets of ranks is warned about
   (``AstraChanges.warnings``): it may belong to any of them.

``diagnose`` says, for a default (reference) conversion, what ASTRA-sim would reject.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..et import encode
from ..schema.chakra import CollectiveCommType, NodeType
from . import groups
from .collectives import HOST_OP_PREFIX, NCCL_RECORD_PREFIX
from .graph import TraceGraph
from .nodes import RECORD_PARAM_COMMS, OpKind
from .records import HostOp

#: Host-side collectives come from gloo, which records no process group: the default one.
HOST_COLLECTIVE_GROUP = "0"
_SEND, _RECV = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
_BROADCAST = int(CollectiveCommType.BROADCAST)


@dataclass
class AstraChanges:
    """What the profile changed, for the summary."""

    metadata_removed: int = 0
    ctrl_deps_dropped: int = 0
    host_collectives: int = 0
    worker_ops_zeroed: int = 0
    single_rank: int = 0  # host collectives of a one-rank group, kept compute nodes
    grouped: dict[str, int] = field(default_factory=dict)  # host collectives per group the trace names
    warnings: list[str] = field(default_factory=list)


def apply(graph: TraceGraph, rank: int | None) -> AstraChanges:
    """Change ``graph`` (built, dangling nodes removed) for ASTRA-sim. ``rank`` is this trace's
    rank, written as the own end of sends and receives when known (ASTRA-sim assumes it)."""
    changes = AstraChanges()
    _remove_metadata(graph, changes)
    _host_collectives(graph, rank, changes)
    graph.drop_missing_ctrl = True
    changes.ctrl_deps_dropped = len(graph.ctrl_to_dropped())
    return changes


def diagnose(graph: TraceGraph) -> list[str]:
    """Why ASTRA-sim would reject the default output of ``graph``, one reason per kind."""
    problems = []
    missing = len(graph.ctrl_to_dropped())
    if missing:
        problems.append(f"{missing} ctrl_deps name a node that is not in the file")
    metadata = len(_written_metadata(graph))
    if metadata:
        problems.append(f"{metadata} METADATA node(s)")
    host = sum(1 for _ in _paired_host_collectives(graph, require_collective=False))
    if host:
        problems.append(f"{host} host-side (gloo) collective(s) are compute nodes, so the network is never simulated")
    return problems


def _written_metadata(graph: TraceGraph) -> set[int]:
    return {row for row in graph.rows_of_kind(OpKind.METADATA) if graph.final[row]}


# -- 1. METADATA nodes ------------------------------------------------------------------------------
def _remove_metadata(graph: TraceGraph, changes: AstraChanges) -> None:
    removed = _written_metadata(graph)
    if not removed:
        return
    ids = graph.ids
    inherited = {ids[row]: _inherited_edges(graph, row, removed) for row in removed}
    dependents = {row for dep in inherited for row in graph.deps.rows_depending_on(dep)} - removed
    for row in sorted(dependents):
        graph.deps.replace(row, _rewired(graph.deps.edges(row), inherited))
    for row in {child for m in removed for child in graph.children(m)} - removed:
        parent = graph.parent_row(row)
        while graph.has_ctrl[row] and parent in removed:  # a child of a removed node: its parent's parent
            parent = graph.parent_row(parent)
            graph.reparent(row, parent)
            if parent < 0:
                graph.has_ctrl[row] = 0
    for row in removed:
        graph.final[row] = 0
    changes.metadata_removed = len(removed)


def _inherited_edges(graph: TraceGraph, row: int, removed: set[int]) -> list[tuple[int, bool]]:
    """The dependencies a removed node passes on: its own, with removed nodes replaced by theirs."""
    out: list[tuple[int, bool]] = []
    stack = list(reversed(graph.deps.edges(row)))
    seen: set[int] = set()
    while stack:
        dep, inter_thread = stack.pop()
        target = graph.index[dep]
        if target in removed:
            if dep not in seen:
                seen.add(dep)
                stack.extend(reversed(graph.deps.edges(target)))
        elif all(dep != d for d, _ in out):
            out.append((dep, inter_thread))
    return out


def _rewired(edges: list[tuple[int, bool]], inherited: dict[int, list[tuple[int, bool]]]) -> list[tuple[int, bool]]:
    out: list[tuple[int, bool]] = []
    for dep, inter_thread in edges:
        for edge in inherited.get(dep, [(dep, inter_thread)]):
            if all(edge[0] != d for d, _ in out):
                out.append(edge)
    return out


# -- 3. host-side collectives -----------------------------------------------------------------------
def _host_collectives(graph: TraceGraph, rank: int | None, changes: AstraChanges) -> None:
    listed = groups.listed_groups(graph)
    ungrouped: dict[str, int] = {}
    for outer, workers in _paired_host_collectives(graph, require_collective=True):
        op = graph.host_ops[outer]
        assert op.collective is not None
        duration = op.duration
        if op.collective.comm_type == _BROADCAST:
            duration = sum(graph.host_ops[w].duration for w in workers)
        label = groups.collective_group(graph, outer, listed) if workers else None
        if label is not None and len(label.ranks) == 1:
            changes.single_rank += 1  # nothing to communicate (ASTRA-sim never completes it): compute
            continue
        if label is not None:
            group = label.name
            changes.grouped[group] = changes.grouped.get(group, 0) + 1
        elif workers:
            group = HOST_COLLECTIVE_GROUP
            ungrouped[graph.names[outer]] = ungrouped.get(graph.names[outer], 0) + 1
        else:
            group = _nccl_group(graph, outer)
        graph.types[outer] = op.collective.node_type
        graph.tail_overrides[outer] = (
            encode.duration(duration) + op.comm_tail + _comm_attrs(graph, outer, op, rank, group, label)
        )
        graph.zero_duration.update(workers)
        changes.host_collectives += 1
        changes.worker_ops_zeroed += len(workers)
    if ungrouped and groups.several_groups(listed):
        ops = ", ".join(f"{name} x{count}" for name, count in sorted(ungrouped.items()))
        sets = "; ".join(f"{g.name}: {list(g.members())}" for g in listed.values())
        changes.warnings.append(
            f"{sum(ungrouped.values())} gloo collective(s) name no process group ({ops}) but the trace "
            f"lists several ({sets}): written in the all-ranks group, which is wrong for those of the "
            "others; capture with chakra-profile, which records each collective's group"
        )


def _comm_attrs(
    graph: TraceGraph, row: int, op: HostOp, rank: int | None, group: str, label: groups.GroupLabel | None
) -> bytes:
    collective = op.collective
    assert collective is not None
    attrs = encode.comm_attrs(collective.node_type, collective.comm_type, collective.comm_size, group)
    if collective.node_type in (_SEND, _RECV):
        peer = collective.peer
        if label is not None and label.ranks and peer is not None:  # a rank of the group: its global rank
            if peer >= len(label.ranks):
                raise graph.fail(row, f"peer {peer} is not a rank of group {label.name} {list(label.ranks)}")
            peer = label.ranks[peer]
        if collective.node_type == _SEND:
            attrs += encode.p2p_attrs(rank, peer, collective.tag)
        else:
            attrs += encode.p2p_attrs(peer, rank, collective.tag)
    return attrs


def _paired_host_collectives(graph: TraceGraph, *, require_collective: bool) -> Iterator[tuple[int, list[int]]]:
    """(outer ``c10d::`` row, the ``gloo:`` rows that did its work) for each written c10d op with gloo
    work; with ``require_collective``, only those ASTRA-sim simulates (read with --astra-sim)."""
    ops = sorted(
        ((_rf_key(op.rf_id), row) for row, op in graph.host_ops.items() if graph.final[row]),
        key=lambda pair: pair[0],
    )
    groups: list[tuple[int, list[int]]] = []
    for _, row in ops:
        if graph.names[row].startswith(HOST_OP_PREFIX):
            groups.append((row, []))
        elif groups:
            groups[-1][1].append(row)
    for outer, workers in groups:
        collective = graph.host_ops[outer].collective is not None
        gloo = bool(workers) and (collective or not require_collective)
        if gloo or (not workers and collective and _nccl_without_kernel(graph, outer)):
            yield outer, workers


def _nccl_group(graph: TraceGraph, outer: int) -> str:
    """The process group of an NCCL host-side collective: the ``pg_name`` its ``record_param_comms``
    records (an attribute of PyTorch 2.4+ host traces), else the default group."""
    stack = list(graph.children(outer))
    while stack:
        row = stack.pop()
        if graph.names[row] == RECORD_PARAM_COMMS:
            name = graph.pg_name(row)
            if name not in ("", None):
                return str(name)
        stack.extend(graph.children(row))
    return HOST_COLLECTIVE_GROUP


def _nccl_without_kernel(graph: TraceGraph, outer: int) -> bool:
    """True for a ``c10d::`` op of an NCCL host-only trace: an ``nccl:*`` record function under it,
    and no device kernel (which would be the collective's communication node already)."""
    nccl = False
    stack = list(graph.children(outer))
    while stack:
        row = stack.pop()
        if graph.is_gpu[row]:
            return False
        nccl = nccl or graph.names[row].startswith(NCCL_RECORD_PREFIX)
        stack.extend(graph.children(row))
    return nccl


def _rf_key(rf_id: Any) -> tuple[int, Any]:
    return (0, rf_id) if type(rf_id) is int else (1, str(rf_id))
