"""What ASTRA-sim (ETFeederV3, analytical backends) accepts in a Chakra trace, declared once.

Read from its sources and confirmed by running the binaries (docs/astra-sim.md): the feeder
aborts on a dependency id that names no node of the file; the workload's statistics abort on a
METADATA node; a communication node must not be a CPU op; collectives other than the four below
(and broadcast, which is only replayed for its duration) stall the rank; communicator group ids
in ``--comm-group-configuration`` must be positive integers, and a node's ``pg_name`` of ``""``
or ``"0"`` means all ranks; the n-th collective of a group is matched with the n-th on every
other rank of the group.
"""

from __future__ import annotations

from .chakra import CollectiveCommType, NodeType

#: Node types the workload simulates; METADATA and anything outside the enum abort it.
RUNNABLE_NODE_TYPES = frozenset(
    {NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE}
)
#: Node types that run only with some configurations (remote memory) or stall a rank whose
#: other work is done (INVALID: finished at once, but nothing issues its children).
RISKY_NODE_TYPES = frozenset({NodeType.INVALID_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE})

#: Collectives the network simulates, with ``comm_size`` in bytes (all-gather: per-rank input;
#: reduce-scatter: the whole input; all-reduce and all-to-all: the buffer).
SIMULATED_COLLECTIVES = frozenset(
    {
        CollectiveCommType.ALL_REDUCE,
        CollectiveCommType.ALL_GATHER,
        CollectiveCommType.ALL_TO_ALL,
        CollectiveCommType.REDUCE_SCATTER,
    }
)
#: Collectives replayed for their ``duration_micros`` (``comm_size`` is ignored).
REPLAYED_COLLECTIVES = frozenset({CollectiveCommType.BROADCAST})

#: ``pg_name`` values that mean "every rank" (no communicator group file needed).
ALL_RANKS_GROUPS = frozenset({"", "0"})
#: The largest group id ``std::stoi`` parses; a larger or non-decimal ``pg_name`` stalls a rank.
MAX_GROUP_ID = (1 << 31) - 1


def group_id(pg_name: str) -> int | None:
    """The communicator group id a ``pg_name`` names (0: all ranks), or None if ASTRA-sim cannot
    parse it."""
    if pg_name == "":
        return 0
    if not pg_name.isdecimal() or not pg_name.isascii() or len(pg_name) > len(str(MAX_GROUP_ID)):
        return None
    value = int(pg_name)
    return value if value <= MAX_GROUP_ID else None
