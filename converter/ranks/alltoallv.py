"""One size per all-to-all across a job's ranks, for ASTRA-sim (``convert-all`` with ``astra_sim``).

An all-to-all with splits (``all_to_all_single`` with input and output split sizes: a
mixture-of-experts layer's dispatch and combine) moves a different number of bytes on each rank,
and each rank's node carries its own input buffer (``convert/collectives.py``, as the reference
reads NCCL's ``In msg nelems``). ASTRA-sim knows only the even all-to-all: a node of
``comm_size`` S sends S / n bytes to each of the group's n ranks, and the ranks' messages are
matched by size, so ranks that disagree on S hang without a word. ``even_all_to_all`` gives the
n-th ALL_TO_ALL of each group, on every rank of it, the group's largest size: the busiest
sender's buffer, which bounds the uneven exchange's time (what a rank receives in a MoE dispatch
it sends back in the combine, so both directions' imbalance shows). Sizes already equal are left
alone (an even all-to-all is unchanged), and a group whose ranks issue different numbers of
all-to-alls is left for ``check`` to report.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..et import wire
from ..et.decode import attribute_spans, read_et
from ..et.records import rewrite_nodes
from ..schema.astra import ALL_RANKS_GROUPS
from ..schema.chakra import CollectiveCommType, NodeType

_ALL_TO_ALL = int(CollectiveCommType.ALL_TO_ALL)
_COLL = int(NodeType.COMM_COLL_NODE)
_COMM_SIZE = wire.attr_name("comm_size")


def _all_to_alls(path: str) -> dict[str, list[tuple[int, int]]]:
    """Per group, (row, comm_size) of each ALL_TO_ALL node of the file, in node order."""
    trace = read_et(path)
    out: dict[str, list[tuple[int, int]]] = {}
    for row in sorted(trace.comm, key=lambda r: trace.ids[r]):
        attrs = trace.comm[row]
        if trace.types[row] != _COLL or attrs.get("comm_type") != _ALL_TO_ALL:
            continue
        group = str(attrs.get("pg_name", "") or "")
        group = "0" if group in ALL_RANKS_GROUPS else group
        size = attrs.get("comm_size")
        out.setdefault(group, []).append((row, size if type(size) is int else 0))
    return out


def even_all_to_all(paths: Sequence[str]) -> tuple[int, int]:
    """Rewrite the ``.et`` files ``paths`` (one per rank, in place) so that each group's n-th
    ALL_TO_ALL has one size on all of its ranks, the largest; returns (collectives evened, nodes
    changed). Raises ``TraceFormatError`` for a file that does not decode, ``OutputError`` where
    one cannot be rewritten."""
    per_rank = [_all_to_alls(path) for path in paths]
    groups = {group for found in per_rank for group in found}
    changes: list[dict[int, int]] = [{} for _ in paths]
    evened = 0
    for group in sorted(groups):
        members = [i for i, found in enumerate(per_rank) if group in found]
        counts = {len(per_rank[i][group]) for i in members}
        if len(members) < 2 or len(counts) != 1:
            continue  # one rank, or ranks that disagree: check reports it
        for position in range(counts.pop()):
            sizes = [per_rank[i][group][position][1] for i in members]
            largest = max(sizes)
            if min(sizes) == largest:
                continue
            evened += 1
            for i, size in zip(members, sizes, strict=True):
                if size != largest:
                    changes[i][per_rank[i][group][position][0]] = largest
    for path, changed in zip(paths, changes, strict=True):
        if changed:
            rewrite_nodes(path, changed, _with_size, ".evening")
    return evened, sum(len(c) for c in changes)


def _with_size(message: bytes, size: int) -> bytes:
    """A node's message with its ``comm_size`` attribute replaced."""
    for name, start, end in attribute_spans(message):
        if name == "comm_size":
            return message[:start] + wire.int64_attr(_COMM_SIZE, size, "comm_size") + message[end:]
    return message + wire.int64_attr(_COMM_SIZE, size, "comm_size")
