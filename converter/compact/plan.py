"""Which dependencies and nodes a compacted trace keeps: the merge rule, on columns.

ASTRA-sim (``Workload::issue_dep_free_nodes``) issues a node once every node in its
``data_deps`` and ``ctrl_deps`` has finished and its resource is free: one CPU slot (``is_cpu_op``
true), one GPU compute slot (a COMP node that is not a CPU op), one communication slot; the ready
nodes are tried in ascending id order. A compute node takes ``duration_micros`` x 1,000 cycles
(1 cycle when its duration is 0). Two steps follow from that, both done here without recursion:

1. **Redundant dependencies are dropped.** An edge p -> c is redundant when p is an ancestor of
   another parent q of c: q cannot finish before p has, so c becomes ready at the same moment
   without the edge. (Tested with a chain-cover reachability index: nodes are cut into chains in
   topological order, each node keeps, per chain, the last position on it that is its ancestor.
   Nodes past ``MAX_CHAINS`` chains are not indexed: their edges are kept, which is always safe.)
2. **Runs are merged.** After 1, an edge a -> b where a's only child is b and b's only parent is
   a, both COMP nodes on the same resource (same ``is_cpu_op``), neither a collective (no
   ``comm_type``) nor of duration 0 (ASTRA-sim charges 0 one cycle, a sum would lose it), puts b
   into a's run if no node that may be ready beside a on its resource (neither a's ancestor
   nor its descendant) has a lower id than b. Then, when a finishes, b is ready (a is its only
   parent), a's slot is free, and every other ready node of the slot has a higher id: ASTRA-sim
   issues b at once, so the run holds the slot from a's start to b's end as the merged node
   does. Where all nodes of a resource are ordered by the dependencies there is no such rival
   at all; otherwise (two CPU threads, kernels that wait only for their launch) the rivals are
   found with the index both ways (ancestors and descendants per chain) and range minima of
   ids per chain; leaves (no children) take no chain and are checked one by one. Past
   ``PAIRWISE_LIMIT`` nodes, or ``_MAX_LEAVES`` leaves on the slot, a resource whose nodes are
   not all ordered merges nothing. A run becomes
   its first node, with the summed duration (and summed ``num_ops``/``tensor_size`` where each
   node of the run has them), the first node's id and dependencies; the dependents of its last
   node depend on it instead, and it is named for what it holds: ``first ... last, N ops`` (the
   first and last nodes' names). Nothing is merged in a trace with INVALID or METADATA nodes
   (ASTRA-sim finishes them inside its issue loop and issues what they release only at the
   next event; a merged run has fewer events).

``Plan.head[r]`` is the row that row r is merged into (itself for a kept row) and ``keep_dep``
says, per dependency slot of ``EtTrace.deps``, whether the edge is kept.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from ..errors import TraceContentError
from ..et.decode import CPU_OP_ABSENT, CPU_OP_FALSE, CPU_OP_TRUE, EtTrace
from ..schema.chakra import NodeType

MAX_CHAINS = 32
PAIRWISE_LIMIT = 1 << 16  # nodes: above, a slot whose nodes are not all ordered merges nothing
SUMMED = ("num_ops", "tensor_size")
_U64 = 1 << 64
_I64 = 1 << 63


@dataclass
class Plan:
    head: array[int]  # row -> the row it is merged into (itself when it starts a run or is not merged)
    keep_dep: bytearray  # per slot of trace.deps: 1 if the edge is written
    durations: dict[int, int]  # head row -> summed duration (only for heads of runs of 2 or more)
    sums: dict[str, dict[int, int]]  # attribute -> head row -> summed value
    redundant: int = 0  # edges dropped by step 1
    merged: int = 0  # rows folded into an earlier one by step 2
    runs: dict[int, tuple[int, int]] = field(default_factory=dict)  # head row of a run -> (nodes, its last row)


def plan(trace: EtTrace) -> Plan:
    """The compaction of ``trace`` (read with ``int_attrs=SUMMED``); ``TraceContentError`` for a
    trace ASTRA-sim could not run either (a dependency naming no node, duplicate ids, a cycle)."""
    rows = _rows_by_id(trace)
    parents = _parent_rows(trace, rows)
    order = _topological_order(trace, parents)
    keep, ordered, index = _reduce(trace, parents, order)
    rivals = _Rivals(trace, parents, order, index) if index.pairwise and len(ordered) < 3 else None
    return _merge(trace, parents, keep, order, ordered, rivals)


def _rows_by_id(trace: EtTrace) -> dict[int, int]:
    rows: dict[int, int] = {}
    for row, node_id in enumerate(trace.ids):
        if rows.setdefault(node_id, row) != row:
            raise TraceContentError(
                trace.path,
                f"node id {node_id} is used twice (records {rows[node_id] + 1} "
                f"and {row + 1}): ASTRA-sim cannot run it, nothing to compact",
            )
    return rows


def _parent_rows(trace: EtTrace, rows: dict[int, int]) -> array[int]:
    """Per dependency slot, the parent's row."""
    out = array("q", bytes(8 * len(trace.deps)))
    for row in range(len(trace)):
        for slot in range(trace.dep_start[row], trace.dep_start[row + 1]):
            parent = rows.get(trace.deps[slot])
            if parent is None:
                raise TraceContentError(
                    trace.path,
                    f"node {trace.ids[row]} depends on {trace.deps[slot]}, which is "
                    "no node of the file: ASTRA-sim would abort on it",
                )
            out[slot] = parent
    return out


def _topological_order(trace: EtTrace, parents: array[int]) -> array[int]:
    size = len(trace)
    pending = array("q", bytes(8 * size))
    child_start = array("q", bytes(8 * (size + 1)))
    for slot in range(len(parents)):
        child_start[parents[slot] + 1] += 1
    for row in range(size):
        child_start[row + 1] += child_start[row]
    fill = array("q", child_start)
    children = array("q", bytes(8 * len(parents)))
    for row in range(size):
        for slot in range(trace.dep_start[row], trace.dep_start[row + 1]):
            p = parents[slot]
            children[fill[p]] = row
            fill[p] += 1
            pending[row] += 1
    order = array("q", (row for row in range(size) if pending[row] == 0))
    at = 0
    while at < len(order):
        row = order[at]
        at += 1
        for k in range(child_start[row], child_start[row + 1]):
            child = children[k]
            pending[child] -= 1
            if pending[child] == 0:
                order.append(child)
    if len(order) != size:
        raise TraceContentError(
            trace.path,
            f"{size - len(order):,} nodes are on or behind a dependency cycle: "
            "ASTRA-sim would hang on it, nothing to compact",
        )
    return order


def resource(trace: EtTrace, row: int) -> int:
    """The ASTRA-sim slot a compute node takes: CPU_OP_FALSE (GPU), CPU_OP_TRUE (CPU) or
    CPU_OP_ABSENT (no ``is_cpu_op``: kept apart); -1 for any other node."""
    if trace.types[row] != NodeType.COMP_NODE or row in trace.comm:
        return -1
    return trace.cpu_ops[row]


@dataclass
class _Index:
    """The chain-cover reachability index: ``reach[r][c]`` is the last position on chain c that
    is an ancestor of row r (or r itself), -1 for none; kept for every row only when ``pairwise``."""

    chain: array[int]
    position: array[int]
    rows_on: list[list[int]]  # chain -> its rows by position
    leaves: list[int]  # rows without children: on no chain
    reach: list[array[int] | None]
    pairwise: bool  # reach kept for every row and every row on a chain


def _reduce(trace: EtTrace, parents: array[int], order: array[int]) -> tuple[bytearray, set[int], _Index]:
    """Step 1: per dependency slot, 1 unless the parent is an ancestor of another parent; and
    the resources whose nodes are all ordered by dependencies (never two of them ready at once)."""
    size = len(trace)
    pairwise = size <= PAIRWISE_LIMIT
    rows_on: list[list[int]] = []
    leaves: list[int] = []
    last = {slot: -1 for slot in (CPU_OP_FALSE, CPU_OP_TRUE, CPU_OP_ABSENT)}
    ordered = set(last)
    rank = array("q", bytes(8 * size))  # position in the topological order
    for at, row in enumerate(order):
        rank[row] = at
    chain = array("q", [-1]) * size
    position = array("q", bytes(8 * size))
    chain_tail = array("q")
    reach: list[array[int] | None] = [None] * size  # per chain, the last position that is an ancestor-or-self
    waiting = array("q", bytes(8 * size))  # dependency slots not yet visited, per parent: reach freed at 0
    for slot in range(len(parents)):
        waiting[parents[slot]] += 1
    fanout = array("q", waiting)  # dependency slots naming each row (its children, counted by edge)
    keep = bytearray(b"\x01") * len(parents)
    empty = array("i", [-1]) * MAX_CHAINS
    for row in order:
        start, end = trace.dep_start[row], trace.dep_start[row + 1]
        distinct = {parents[slot] for slot in range(start, end)}
        # join the chain of the latest parent (in topological order) that still ends its chain,
        # preferring one on the row's own slot or with no other child: a launch's kernel would
        # otherwise take the host chain and leave the next host op a new chain per launch
        best = fallback = -1
        own = resource(trace, row)
        for p in distinct:
            if chain[p] >= 0 and chain_tail[chain[p]] == p:
                if (resource(trace, p) == own or fanout[p] == 1) and (best < 0 or rank[p] > rank[best]):
                    best = p
                if fallback < 0 or rank[p] > rank[fallback]:
                    fallback = p
        if best < 0 and len(chain_tail) >= MAX_CHAINS:
            best = fallback
        if waiting[row] == 0:  # a leaf is on no path between two nodes: it takes no chain
            leaves.append(row)
        elif best >= 0:
            chain[row], position[row] = chain[best], position[best] + 1
            chain_tail[chain[best]] = row
            rows_on[chain[row]].append(row)
        elif len(chain_tail) < MAX_CHAINS:
            chain[row] = len(chain_tail)
            chain_tail.append(row)
            rows_on.append([row])
        else:
            pairwise = False
        mine = array("i", empty)
        used = len(chain_tail)
        for p in distinct:
            theirs = reach[p]
            assert theirs is not None
            for k in range(used):
                if theirs[k] > mine[k]:
                    mine[k] = theirs[k]
        if chain[row] >= 0:
            mine[chain[row]] = position[row]
        reach[row] = mine
        slot_of_row = resource(trace, row)
        if slot_of_row in ordered:
            before = last[slot_of_row]
            if before >= 0 and (chain[before] < 0 or mine[chain[before]] < position[before]):
                ordered.discard(slot_of_row)  # not provably after the previous one: may be ready beside it
            last[slot_of_row] = row
        if len(distinct) > 1:
            for slot in range(start, end):
                p = parents[slot]
                c = chain[p]
                if c < 0:
                    continue
                for q in distinct:
                    theirs = reach[q]
                    if q != p and theirs is not None and theirs[c] >= position[p]:
                        keep[slot] = 0
                        break
        for slot in range(start, end):
            p = parents[slot]
            waiting[p] -= 1
            if waiting[p] == 0 and not pairwise:
                reach[p] = None
    return keep, ordered, _Index(chain, position, rows_on, leaves, reach, pairwise)


_FAR = (1 << 31) - 1


class _Rivals:
    """``first(a)``: the lowest id of a node on a's slot that may be ready beside a (neither its
    ancestor nor its descendant), from the reachability index both ways and range minima of ids
    per chain; ``_FAR_ID`` when there is none."""

    def __init__(self, trace: EtTrace, parents: array[int], order: array[int], index: _Index) -> None:
        self.trace, self.index = trace, index
        chains = len(index.rows_on)
        children: list[list[int]] = [[] for _ in range(len(trace))]
        for row in range(len(trace)):
            for slot in range(trace.dep_start[row], trace.dep_start[row + 1]):
                children[parents[slot]].append(row)
        # below[r][c]: the first position on chain c that is a descendant of r (or r), _FAR for none
        self.below: list[array[int] | None] = [None] * len(trace)
        far = array("i", [_FAR]) * chains
        for row in reversed(order):
            mine = array("i", far)
            for child in children[row]:
                theirs = self.below[child]
                assert theirs is not None
                for k in range(chains):
                    if theirs[k] < mine[k]:
                        mine[k] = theirs[k]
            if index.chain[row] >= 0:
                mine[index.chain[row]] = index.position[row]
            self.below[row] = mine
        self.tables: dict[int, list[list[list[int]]]] = {}
        self.leaves: dict[int, list[int]] = {}

    def _table(self, slot: int) -> list[list[list[int]]]:
        """Per chain, the sparse table of range minima of the ids of ``slot``'s nodes."""
        found = self.tables.get(slot)
        if found is None:
            trace, found = self.trace, []
            for rows in self.index.rows_on:
                levels = [[trace.ids[r] if resource(trace, r) == slot else _FAR_ID for r in rows]]
                width = 1
                while width * 2 <= len(rows):
                    last = levels[-1]
                    levels.append([min(last[i], last[i + width]) for i in range(len(rows) - 2 * width + 1)])
                    width *= 2
                found.append(levels)
            self.tables[slot] = found
        return found

    def first(self, row: int) -> int:
        """(``row`` has a child, so it is on a chain.)"""
        above, below = self.index.reach[row], self.below[row]
        assert above is not None and below is not None
        slot = resource(self.trace, row)
        table, best = self._table(slot), _FAR_ID
        mine, at = self.index.chain[row], self.index.position[row]
        leaves = self.leaves.get(slot)
        if leaves is None:
            leaves = self.leaves[slot] = [r for r in self.index.leaves if resource(self.trace, r) == slot]
        if len(leaves) > _MAX_LEAVES:
            return -1  # too many to look at: assume the worst
        for leaf in leaves:  # beside row unless row is its ancestor
            theirs = self.index.reach[leaf]
            assert theirs is not None
            if theirs[mine] < at and self.trace.ids[leaf] < best:
                best = self.trace.ids[leaf]
        for k, levels in enumerate(table):
            lo, hi = above[k] + 1, min(below[k], len(levels[0])) - 1
            if lo <= hi:
                level = (hi - lo + 1).bit_length() - 1
                best = min(best, levels[level][lo], levels[level][hi - (1 << level) + 1])
        return best


_FAR_ID = 1 << 64
_MAX_LEAVES = 512


def _merge(
    trace: EtTrace, parents: array[int], keep: bytearray, order: array[int], ordered: set[int], rivals: _Rivals | None
) -> Plan:
    """Step 2: runs of compute nodes along edges that are a node's only kept child and parent."""
    size = len(trace)
    only_parent = array("q", [-1]) * size  # the one distinct kept parent, -1 for none, -2 for several
    children = array("q", bytes(8 * size))  # distinct kept children, counted (capped at 2)
    for row in range(size):
        seen = -1
        for slot in range(trace.dep_start[row], trace.dep_start[row + 1]):
            if not keep[slot]:
                continue
            p = parents[slot]
            if seen == -1:
                seen = p
            elif seen != p:
                seen = -2
        only_parent[row] = seen
    counted: set[tuple[int, int]] = set()
    for row in range(size):
        for slot in range(trace.dep_start[row], trace.dep_start[row + 1]):
            if keep[slot] and (parents[slot], row) not in counted:
                counted.add((parents[slot], row))
                children[parents[slot]] += 1
    counted.clear()
    mergeable = bytearray(size)
    # ASTRA-sim finishes INVALID and METADATA nodes inside its issue loop without issuing what they
    # release until the next event: a merged run has fewer events, so nothing is merged then.
    skipped = NodeType.INVALID_NODE in trace.types or NodeType.METADATA_NODE in trace.types
    for row in range(size if not skipped else 0):  # zero durations (a cycle each) kept apart
        mergeable[row] = resource(trace, row) >= 0 and trace.durations[row] > 0
    head = array("q", range(size))
    durations: dict[int, int] = {}
    sums: dict[str, dict[int, int]] = {name: {} for name in SUMMED}
    values = trace.int_attrs
    merged = 0
    runs: dict[int, tuple[int, int]] = {}
    for row in order:  # parents first: a run's rows are merged into its first
        a = only_parent[row]
        if a < 0 or children[a] != 1 or not mergeable[row] or not mergeable[a]:
            continue
        if trace.cpu_ops[row] != trace.cpu_ops[a]:
            continue
        if resource(trace, a) not in ordered and (rivals is None or rivals.first(a) < trace.ids[row]):
            continue  # another node of the slot may be ready when a ends, with a lower id than row
        if any((row in values.get(name, {})) != (a in values.get(name, {})) for name in SUMMED):
            continue
        h = head[a]
        total = durations.get(h, trace.durations[h]) + trace.durations[row]
        if total >= _U64:
            continue
        new_sums = {}
        for name in SUMMED:
            table = values.get(name, {})
            if row in table:
                new_sums[name] = sums[name].get(h, table[h]) + table[row]
        if any(v >= _I64 or v < 0 for v in new_sums.values()):  # int64 fields: keep the sum in range
            continue
        head[row] = h
        runs[h] = (runs.get(h, (1, h))[0] + 1, row)  # a chain: the row merged last is its end
        durations[h] = total
        for name, v in new_sums.items():
            sums[name][h] = v
        merged += 1
    return Plan(head, keep, durations, sums, redundant=keep.count(0), merged=merged, runs=runs)
