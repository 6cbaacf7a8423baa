"""PyTorch distributed's names in a host trace: the ``c10d::`` ops (which of them are
communication, as what, and which input holds the tensors), gloo's worker ops, the record function
NCCL runs each collective in, the ``## process_group:init ##`` node, and the group marker
``chakra-profile`` writes (``## chakra:group NAME RANKS ##``). Facts both the front end
(``convert/collectives.py``, ``convert/groups.py``) and ``check`` read."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .chakra import CollectiveCommType, NodeType

HOST_OP_PREFIX = "c10d::"
WORKER_OP_PREFIX = "gloo:"
NCCL_RECORD_PREFIX = "nccl:"  # the record function NCCL's process group runs each collective in
_COLL, _SEND, _RECV = int(NodeType.COMM_COLL_NODE), int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)

#: op name -> (node type, collective type, index of the input whose tensors are counted)
C10D_OPS: dict[str, tuple[int, int | None, int]] = {
    "c10d::allreduce_": (_COLL, int(CollectiveCommType.ALL_REDUCE), 0),
    "c10d::broadcast_": (_COLL, int(CollectiveCommType.BROADCAST), 0),
    "c10d::allgather_": (_COLL, int(CollectiveCommType.ALL_GATHER), 1),
    "c10d::_allgather_base_": (_COLL, int(CollectiveCommType.ALL_GATHER), 1),
    "c10d::reduce_scatter_": (_COLL, int(CollectiveCommType.REDUCE_SCATTER), 1),
    "c10d::_reduce_scatter_base_": (_COLL, int(CollectiveCommType.REDUCE_SCATTER), 1),
    "c10d::alltoall_": (_COLL, int(CollectiveCommType.ALL_TO_ALL), 1),
    "c10d::alltoall_base_": (_COLL, int(CollectiveCommType.ALL_TO_ALL), 1),
    "c10d::allreduce_coalesced_": (_COLL, int(CollectiveCommType.ALL_REDUCE), 0),
    "c10d::allgather_coalesced_": (_COLL, int(CollectiveCommType.ALL_GATHER), 1),
    "c10d::allgather_into_tensor_coalesced_": (_COLL, int(CollectiveCommType.ALL_GATHER), 1),
    "c10d::reduce_scatter_tensor_coalesced_": (_COLL, int(CollectiveCommType.REDUCE_SCATTER), 1),
    "c10d::send": (_SEND, None, 0),
    "c10d::recv_": (_RECV, None, 0),
}
#: The ``c10d::`` ops that become communication nodes under --astra-sim.
HOST_COLLECTIVES = frozenset(C10D_OPS)

MARKER_PREFIX = "## chakra:group "
MARKER_SUFFIX = " ##"
FUNCTIONAL_PREFIX = "_c10d_functional::"
PROCESS_GROUP_INIT = "process_group:init"


@dataclass(frozen=True, slots=True)
class GroupLabel:
    """A process group as the trace names it; ``ranks`` empty when only the name is known."""

    name: str
    ranks: tuple[int, ...] = ()


def marker_name(name: str, ranks: list[int] | tuple[int, ...]) -> str:
    """The record function ``chakra-profile`` opens inside a collective of group ``name``."""
    return f"{MARKER_PREFIX}{name} {','.join(str(r) for r in ranks)}{MARKER_SUFFIX}"


def parse_marker(name: str) -> GroupLabel | None:
    """The group a marker names, or None if ``name`` is not a well-formed marker."""
    if not (name.startswith(MARKER_PREFIX) and name.endswith(MARKER_SUFFIX)):
        return None
    parts = name[len(MARKER_PREFIX) : -len(MARKER_SUFFIX)].split(" ")
    if len(parts) != 2 or not parts[0]:
        return None
    try:
        ranks = tuple(int(r) for r in parts[1].split(",")) if parts[1] else ()
    except ValueError:
        return None
    if any(r < 0 for r in ranks):
        return None
    return GroupLabel(parts[0], ranks)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """One entry of the ``## process_group:init ##`` node: ``ranks`` empty means ``size`` ranks
    from 0 (what PyTorch writes for a group of every rank)."""

    name: str
    ranks: tuple[int, ...]
    size: int

    def members(self) -> tuple[int, ...]:
        return self.ranks or tuple(range(self.size))


def init_groups(node: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{pg_name, ranks, pg_size}]`` of a ``## process_group:init ##`` node (its first input, a
    JSON list of groups); [] if it does not read as one."""
    inputs = node.get("inputs")
    values: Any = inputs.get("values") if isinstance(inputs, dict) else inputs
    return [
        {"pg_name": g.name, "ranks": list(g.ranks), "pg_size": g.size}
        for g in (init_node_groups(values) if isinstance(values, list) else ())
    ]


def init_node_groups(values: list[Any]) -> tuple[ListedGroup, ...]:
    """The groups a ``## process_group:init ##`` node's input values list (none if they do not read as a list)."""
    try:
        groups = json.loads(values[0])
    except (TypeError, IndexError, ValueError, RecursionError):
        return ()
    if not isinstance(groups, list):
        return ()
    out = []
    for g in groups:
        if not isinstance(g, dict) or "pg_name" not in g:
            continue
        ranks = g.get("ranks") or []
        size = g.get("group_size")
        if not (isinstance(ranks, list) and all(type(r) is int and r >= 0 for r in ranks)):
            continue
        size = size if type(size) is int and size >= 0 else len(ranks)
        out.append(ListedGroup(str(g["pg_name"]), tuple(ranks), size))
    return tuple(out)
