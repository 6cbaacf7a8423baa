"""PyTorch distributed's names in a host trace: the ``c10d::`` ops (which of them are
communication, as what, and which input holds the tensors), gloo's worker ops, the record function
NCCL runs each collective in, the ``## process_group:init ##`` node, and the group marker
``chakra-profile`` writes (``## chakra:group NAME RANKS ##``). Facts both the front end
(``convert/collectives.py``, ``convert/groups.py``) and ``check`` read."""

from __future__ import annotations

from dataclasses import dataclass

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
