"""The graph skeleton: one compact row per node, and the reference's dependency semantics.

Rows live in typed arrays (a few hundred bytes per node, not ~10 KB of objects). ``build`` then
reproduces ``PyTorchConverter`` step by step, iteratively:

1. conversion order: CPU and metadata ops in file order, each followed by its GPU children; a
   node keeps ``ctrl_deps`` only if its parent was converted before it;
2. ``convert_ctrl_dep_to_data_dep`` from each thread root: a preorder walk (children by ascending
   id) where a CPU op depends on its ``inter_thread_dep`` and the previous CPU op, and a GPU op on
   the last op visited (the reference's ``sync_dep`` test compares two unset start times, so it
   never adds an edge, and neither do we);
3. dangling nodes (no dependency either way) are dropped.
"""

from __future__ import annotations

from array import array
from itertools import compress, pairwise
from typing import Any, NamedTuple

from ..errors import TraceContentError
from ..schema.chakra import NodeType
from . import nodes
from .idindex import ABSENT, DuplicateId, IdIndex
from .records import HostOp, ReadNode, RowBatch

_GPU = nodes.OpKind.GPU


#: ``TraceGraph.accelerator``'s values (``--target accelerator``): how the writer writes a compute row.
#: ``REPLAYED``: a CPU op with its captured duration, a GPU kernel included (no cost known for it).
ACCELERATOR_OP, DROP_DURATION, KEEP_DURATION, REPLAYED = 0, 1, 2, 3


class SendRecv(NamedTuple):
    """A SendRecv kernel's communication attributes, known once its launcher is."""

    node_type: int
    comm_type: int | None
    comm_size: int
    pg_name: Any


class DepTable:
    """``data_deps`` of every node in insertion order: two inline slots per node, a dict beyond.

    Each edge remembers whether it came from ``inter_thread_dep`` (cycle breaking drops those
    first).
    """

    def __init__(self, size: int) -> None:
        self._first = array("Q", bytes(8 * size))
        self._second = array("Q", bytes(8 * size))
        self.count = bytearray(size)
        self._inter_thread = bytearray(size)  # bit 0: first slot, bit 1: second slot
        self._extra: dict[int, list[tuple[int, bool]]] = {}

    def add(self, node: int, dep_id: int, inter_thread: bool) -> None:
        count = self.count[node]
        if count == 0:
            self._first[node] = dep_id
            self._inter_thread[node] |= inter_thread
        elif count == 1:
            self._second[node] = dep_id
            self._inter_thread[node] |= inter_thread << 1
        else:
            self._extra.setdefault(node, []).append((dep_id, inter_thread))
        if count < 255:
            self.count[node] = count + 1

    def edges(self, node: int) -> list[tuple[int, bool]]:
        """(dependency id, is inter-thread) pairs, in the order they were added."""
        count = self.count[node]
        if not count:
            return []
        flags = self._inter_thread[node]
        out = [(self._first[node], bool(flags & 1))]
        if count > 1:
            out.append((self._second[node], bool(flags & 2)))
            out.extend(self._extra.get(node, ()))
        return out

    def ids(self, node: int) -> list[int]:
        count = self.count[node]
        if count == 1:
            return [self._first[node]]
        if count == 2:
            return [self._first[node], self._second[node]]
        return [dep for dep, _ in self.edges(node)]

    def has(self, node: int, dep_id: int) -> bool:
        count = self.count[node]
        if not count:
            return False
        if self._first[node] == dep_id or (count > 1 and self._second[node] == dep_id):
            return True
        return count > 2 and any(dep == dep_id for dep, _ in self._extra.get(node, ()))

    def rows_depending_on(self, dep_id: int) -> list[int]:
        """Rows with ``dep_id`` among their dependencies (scans in C, for a few ids)."""
        rows = []
        for slot, minimum in ((self._first, 1), (self._second, 2)):
            start = 0
            while True:
                try:
                    row = slot.index(dep_id, start)
                except ValueError:
                    break
                if self.count[row] >= minimum:
                    rows.append(row)
                start = row + 1
        rows.extend(row for row, extra in self._extra.items() if any(dep == dep_id for dep, _ in extra))
        return sorted(set(rows))

    def replace(self, node: int, edges: list[tuple[int, bool]]) -> None:
        """Set a node's edges anew (cycle breaking)."""
        self.count[node] = 0
        self._inter_thread[node] = 0
        self._extra.pop(node, None)
        for dep, inter_thread in edges:
            self.add(node, dep, inter_thread)


class TraceGraph:
    """Rows in file order; call ``add`` for every record, then ``build``."""

    def __init__(self, path: str, keep_simulation_fields: bool = False) -> None:
        self.path = path
        self.ids = array("Q")
        self._parents = array("Q")
        self._has_parent = bytearray()
        self.names: list[str] = []
        self.kinds = bytearray()
        self.is_gpu = bytearray()
        self.types = bytearray()
        self._inter_thread = array("Q")
        self.index = IdIndex(())  # made by build()
        self._errors: dict[int, str] = {}
        self._pg_names: dict[int, Any] = {}
        self._send_recv_sizes: dict[int, int] = {}
        self.host_ops: dict[int, HostOp] = {}  # c10d:: and gloo: rows
        self.group_info: dict[int, Any] = {}  # rows that name process groups (convert/groups.py)
        self._interned: dict[str, str] = {}
        self._keep_simulation = keep_simulation_fields
        self.durations = array("Q")
        self.streams: list[Any] = []
        # set by build()
        self.order = array("l")  # converted rows, in the order the reference first converts them
        self.has_ctrl = bytearray()
        self.send_recv: dict[int, SendRecv] = {}  # resolved SendRecv kernels, by row
        # set by an output profile (convert/astra.py); the defaults write the reference's bytes
        self.tail_overrides: dict[int, bytes] = {}  # rows whose tail is not the spilled one
        self.zero_duration: set[int] = set()  # rows written without their duration
        self.duration_overrides: dict[int, int] = {}  # rows written with another duration (convert/untrace.py)
        self.drop_missing_ctrl = False  # omit ctrl_deps that name a node not written
        self.roofline: tuple[array[int], array[int]] | None = None  # num_ops, tensor_size by row (0: none)
        # --target accelerator: per row, ACCELERATOR_OP (a non-CPU op), or a CPU op written without its
        # duration (DROP_DURATION) or with it (KEEP_DURATION, --host-time captured; REPLAYED: made one)
        self.accelerator: bytearray | None = None
        self.deps = DepTable(0)
        self.final = bytearray()
        self.dangling_removed = 0
        self.dropped: list[int] = []  # converted rows dropped as dangling
        self._parent_idx = array("l")
        self._child_start = array("l")
        self._children = array("l")

    def __len__(self) -> int:
        return len(self.ids)

    # -- collecting rows -------------------------------------------------------------------
    def add(self, rec: ReadNode) -> None:
        row = len(self.ids)
        self.ids.append(rec.id)
        self._parents.append(max(rec.parent, 0))
        self._has_parent.append(rec.parent >= 0)
        self.names.append(self._interned.setdefault(rec.name, rec.name))
        self.kinds.append(rec.kind)
        self.is_gpu.append(rec.is_gpu)
        self.types.append(rec.node_type)
        self._inter_thread.append(rec.inter_thread_dep)
        if rec.error is not None:
            self._errors[row] = rec.error
        if rec.pg_name != "":
            self._pg_names[row] = rec.pg_name
        if rec.node_type == 0:
            self._send_recv_sizes[row] = rec.comm_size
        if rec.host_op is not None:
            self.host_ops[row] = rec.host_op
        if rec.group_info is not None:
            self.group_info[row] = rec.group_info
        if self._keep_simulation:
            self.durations.append(rec.duration)
            self.streams.append(rec.stream)

    def add_batch(self, batch: RowBatch) -> None:
        """``add`` for many plain rows at once (no errors, no SendRecv kernels)."""
        row = len(self.ids)
        self.ids.extend(batch.ids)
        self._parents.extend(batch.parents)
        self._has_parent.extend(batch.has_parent)
        self.names.extend(batch.names)  # interned by the reader
        self.kinds.extend(batch.kinds)
        self.is_gpu.extend(batch.is_gpu)
        self.types.extend(batch.types)
        self._inter_thread.extend(batch.inter_thread_deps)
        if batch.pg_names:
            self._pg_names.update((row + i, value) for i, value in batch.pg_names.items())
        if self._keep_simulation:
            self.durations.extend(batch.durations)
            self.streams.extend(batch.streams)

    _COLUMNS = (
        "ids",
        "_parents",
        "_has_parent",
        "names",
        "kinds",
        "is_gpu",
        "types",
        "_inter_thread",
        "durations",
        "streams",
    )
    _ROW_DICTS = ("_errors", "_pg_names", "_send_recv_sizes", "host_ops", "group_info")

    def export_rows(self) -> dict[str, Any]:
        """The collected rows, to hand to the graph of the process that reads the first half."""
        state = {name: getattr(self, name) for name in self._COLUMNS + self._ROW_DICTS}
        state["names"] = list(self.names)
        return state

    def extend_rows(self, state: dict[str, Any]) -> None:
        """Append rows exported by another graph (a later range of the same trace)."""
        offset = len(self.ids)
        for name in self._COLUMNS:
            getattr(self, name).extend(state[name])
        for name in self._ROW_DICTS:
            getattr(self, name).update((row + offset, value) for row, value in state[name].items())

    def describe(self, row: int) -> str:
        return f"node #{row} (id {self.ids[row]}, '{self.names[row]}')"

    def fail(self, row: int, problem: str) -> TraceContentError:
        return TraceContentError(self.path, f"{self.describe(row)}: {problem}")

    # -- building --------------------------------------------------------------------------
    def build(self, allow_missing_parents: bool = False) -> None:
        self._ids_ascending = all(a < b for a, b in pairwise(self.ids))
        try:
            self.index = IdIndex(self.ids, self._ids_ascending)
        except DuplicateId as dup:
            raise TraceContentError(
                self.path, f"duplicate node id {dup.node_id} (nodes #{dup.first_row} and #{dup.row})"
            ) from None
        self._link_parents(allow_missing_parents)
        self._index_children()
        self._convert_in_reference_order()
        self._check_converted()
        self._resolve_send_recv()
        self.deps = DepTable(len(self))
        self._stamp = array("l", [-1]) * len(self)  # last root whose walk visited each row
        self._referenced = bytearray(len(self))
        self.forward_edges = 0
        # the row of each inter_thread_dep: -1 for none (an id of 0 counts as none, as in the
        # reference), ABSENT where it names no node (raised if the walk reaches it)
        self._itd_rows = self.index.rows(self._inter_thread, self._inter_thread)
        for root_number, root in enumerate(self.roots()):
            self._walk_thread(root, root_number)
        self._drop_dangling()
        self._inter_thread, self._itd_rows = array("Q"), array("l")  # the walks are done
        self._stamp, self._referenced = array("l"), bytearray()

    def _link_parents(self, allow_missing: bool) -> None:
        parent_idx = self.index.rows(self._parents, self._has_parent)
        self._parents, self._has_parent = array("Q"), bytearray()  # read once, here
        missing = list(compress(range(len(parent_idx)), map((0).__gt__, parent_idx)))  # no parent, or not found
        for row in missing:
            parent_idx[row] = -1
        if missing and not allow_missing:
            row = missing[0]
            raise self.fail(
                row,
                f"ctrl_deps points at no node of the trace ({len(missing)} node(s) like this); "
                "`allow_missing_parents` converts them as chakra_converter does, silently dropping "
                "every op under them",
            )
        self._parent_idx = parent_idx

    def _index_children(self) -> None:
        """Children of every row, in file order, as one flat array (CSR)."""
        size = len(self)
        start = array("l", [0]) * (size + 1)
        for parent in self._parent_idx:
            if parent >= 0:
                start[parent + 1] += 1
        for row in range(size):
            start[row + 1] += start[row]
        fill = array("l", start)
        children = array("l", [0]) * start[size]
        for row, parent in enumerate(self._parent_idx):
            if parent >= 0:
                children[fill[parent]] = row
                fill[parent] += 1
        self._child_start, self._children = start, children

    def children(self, row: int) -> array[int]:
        return self._children[self._child_start[row] : self._child_start[row + 1]]

    def pg_name(self, row: int) -> Any:
        """The node's ``pg_name`` (top level, or an ``attrs`` entry on top), "" if it has none."""
        return self._pg_names.get(row, "")

    def _convert_in_reference_order(self) -> None:
        size = len(self)
        first = array("l", [-1]) * size
        has_ctrl = bytearray(size)
        order = array("l")
        kinds, is_gpu, parent_idx = self.kinds, self.is_gpu, self._parent_idx
        child_start, children = self._child_start, self._children
        for row in range(size):
            if kinds[row] == _GPU:
                continue
            # convert(row), then each GPU child; a node keeps ctrl_deps if its parent came first
            parent = parent_idx[row]
            has_ctrl[row] = parent >= 0 and first[parent] >= 0
            if first[row] < 0:
                first[row] = len(order)
                order.append(row)
            low, high = child_start[row], child_start[row + 1]
            if low < high:
                for child in children[low:high]:
                    if is_gpu[child]:
                        has_ctrl[child] = first[row] >= 0  # its parent is this row, converted now
                        if first[child] < 0:
                            first[child] = len(order)
                            order.append(child)
        self.order, self.has_ctrl, self._first = order, has_ctrl, first

    def _check_converted(self) -> None:
        for row in sorted(self._errors):
            if self._first[row] >= 0:
                raise self.fail(row, self._errors[row])

    def _resolve_send_recv(self) -> None:
        """Type and comm attrs of SendRecv kernels, from their launcher (parent or grandparent)."""
        for row in sorted(self._send_recv_sizes):
            if self._first[row] < 0:
                continue
            parent = self._parent_idx[row]
            parent_name = self.names[parent]
            launcher_name = parent_name
            pg_name = self._pg_names.get(row, "")
            if parent_name == nodes.RECORD_PARAM_COMMS:
                grandparent = self._parent_idx[parent]
                if grandparent < 0:
                    raise self.fail(parent, "record_param_comms has no parent op to tell send from recv")
                launcher_name = self.names[grandparent]
                pg_name = self._pg_names.get(parent, pg_name)
            node_type = nodes.send_recv_type(launcher_name, parent_name)
            comm_type = nodes.collective_comm_type(self.names[row]) if node_type == NodeType.COMM_COLL_NODE else None
            self.send_recv[row] = SendRecv(node_type, comm_type, self._send_recv_sizes[row], pg_name)
            self.types[row] = node_type

    def roots(self) -> list[int]:
        return [row for row in self.order if self.names[row] in nodes.ROOT_NAMES]

    def _walk_thread(self, root: int, root_number: int) -> None:
        """``convert_ctrl_dep_to_data_dep`` from one thread root, with an explicit stack.

        Also marks each dependency target as referenced (for dangling removal) and counts edges
        that point at an equal or larger id (without them the graph is trivially acyclic).
        """
        ids, kinds, itd_rows, first = self.ids, self.kinds, self._itd_rows, self._first
        stamp, ascending, referenced = self._stamp, self._ids_ascending, self._referenced
        count, add, has = self.deps.count, self.deps.add, self.deps.has
        child_start, children = self._child_start, self._children
        forward = 0
        stack = [root]
        last_cpu = last_any = -1
        while stack:
            row = stack.pop()
            if stamp[row] == root_number:
                continue
            stamp[row] = root_number
            if kinds[row] == _GPU:  # on the last op visited
                targets: tuple[tuple[int, bool], ...] = ((last_any, False),)
                last_any = last_cpu
            else:  # on its inter-thread dependency, then on the previous CPU op
                itd = itd_rows[row]
                if itd != -1 and (itd < 0 or first[itd] < 0):
                    raise self._bad_dependency(row, itd)
                targets = ((itd, True), (last_cpu, False))
                last_cpu = last_any = row
            row_id = ids[row]
            for target, inter in targets:
                if target >= 0:
                    target_id = ids[target]
                    if not (count[row] and has(row, target_id)):
                        add(row, target_id, inter)
                        referenced[target] = 1
                        forward += target_id >= row_id
            low, high = child_start[row], child_start[row + 1]
            if low < high:
                kids = [c for c in children[low:high] if first[c] >= 0 and stamp[c] != root_number]
                if len(kids) > 1:
                    if not ascending:
                        kids.sort(key=ids.__getitem__)
                    kids.reverse()
                stack.extend(kids)
        self.forward_edges += forward

    def _bad_dependency(self, row: int, target: int) -> TraceContentError:
        """An ``inter_thread_dep`` the reference fails on with a KeyError: it names no node, or a
        GPU op that is not converted."""
        if target == ABSENT:
            return self.fail(row, f"depends on node {self._inter_thread[row]}, which is not in the trace")
        return self.fail(
            row, f"depends on node {self.ids[target]}, a GPU op that is not converted (its parent is no CPU op)"
        )

    def _drop_dangling(self) -> None:
        """Keep converted nodes that have a dependency or are one (the reference's single pass)."""
        deps, referenced = self.deps, self._referenced
        final = bytearray(len(self))
        dropped = self.dropped = []
        for row in self.order:
            if deps.count[row] or referenced[row]:
                final[row] = 1
            else:
                dropped.append(row)
        self.final = final
        self.dangling_removed = len(dropped)

    def rows_of_kind(self, kind: nodes.OpKind) -> list[int]:
        """Rows of one op kind (a scan in C: for the rare kinds)."""
        rows, marker, kinds = [], bytes([kind]), self.kinds
        row = kinds.find(marker)
        while row >= 0:
            rows.append(row)
            row = kinds.find(marker, row + 1)
        return rows

    def ctrl_to_dropped(self) -> list[int]:
        """Written rows whose ctrl_deps names a node dropped as dangling (so not in the file)."""
        final, has_ctrl = self.final, self.has_ctrl
        return [child for row in self.dropped for child in self.children(row) if final[child] and has_ctrl[child]]

    def final_rows(self) -> list[int]:
        """Rows that are written, in the order the reference's node map holds them."""
        final = self.final
        return [row for row in self.order if final[row]]

    def rows_by_id(self) -> array[int]:
        """Rows that are written, in id order (the output's order)."""
        if self._ids_ascending:
            return array("l", compress(range(len(self)), self.final))
        return array("l", sorted(self.final_rows(), key=self.ids.__getitem__))

    def parent_row(self, row: int) -> int:
        """The row of ``row``'s ctrl_deps parent (-1 if it names no node)."""
        return self._parent_idx[row]

    def reparent(self, row: int, parent: int) -> None:
        self._parent_idx[row] = parent

    def ctrl_deps(self, row: int) -> tuple[int, ...]:
        """The ctrl_deps written for ``row``: its parent if the reference keeps it (and, with
        ``drop_missing_ctrl``, only if the parent is written too)."""
        parent = self.ctrl_dep(row)
        return () if parent < 0 else (parent,)

    def ctrl_dep(self, row: int) -> int:
        """``ctrl_deps`` as one id, or -1 for none."""
        if not self.has_ctrl[row]:
            return -1
        parent = self._parent_idx[row]
        if self.drop_missing_ctrl and not self.final[parent]:
            return -1
        return self.ids[parent]

    # -- views for cycle checking and writing ------------------------------------------------
    def successors(self, row: int) -> list[int]:
        """Rows this row depends on."""
        if not self.deps.count[row]:
            return []
        index = self.index
        return [index[dep] for dep in self.deps.ids(row)]

    def has_forward_edges(self) -> bool:
        """True if some node depends on a node with a larger or equal id.

        Without such edges id order is a topological order, so the graph is acyclic and the SCC
        pass can be skipped (the common case, whatever the node order in the file).
        """
        return self.forward_edges > 0

    def is_inter_thread(self, row: int, target: int) -> bool:
        target_id = self.ids[target]
        return any(dep == target_id and itd for dep, itd in self.deps.edges(row))

    def remove_edges(self, edges: list[tuple[int, int]]) -> None:
        by_row: dict[int, set[int]] = {}
        for row, target in edges:
            by_row.setdefault(row, set()).add(self.ids[target])
        for row, dropped in by_row.items():
            self.deps.replace(row, [(d, itd) for d, itd in self.deps.edges(row) if d not in dropped])
