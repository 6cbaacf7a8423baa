"""``--roofline`` and ``--target accelerator``: ASTRA-sim's roofline fields on every compute node.

ASTRA-sim (``Workload::issue_comp``, roofline enabled) times a compute node that is not a CPU op
as ``num_ops / min(peak, bandwidth * num_ops / tensor_size)`` = ``max(num_ops / peak,
tensor_size / bandwidth)``, in whole nanoseconds. A node without ``num_ops`` aborts it,
``tensor_size`` 0 drops the node without releasing its dependents (the rank may never finish),
``num_ops`` 0 divides 0 by 0, and a node that rounds to 0 ns trips its event queue's assertion
(``event time > current time``). So:

1. each compute node's cost comes from its recorded shapes and dtypes (``schema/opcost.py``);
   it is written as ``num_ops`` = max(FLOPs, 1) and ``tensor_size`` = max(bytes, ``MIN_BYTES``):
   16 KiB take at least 1 ns at any bandwidth up to 16 TB/s;
2. the work is counted once, at the innermost op that does it: an op with a descendant (in the
   ctrl_deps tree) that has a cost of its own (``aten::linear`` over ``aten::addmm``, an autograd
   node over its ``aten::mm``) is a *wrapper*, and views and allocations (``aten::view``,
   ``aten::empty``) do no work: both get ``num_ops`` 1, ``tensor_size`` 1;
3. a GPU kernel takes the cost of the CPU op that launched it (its ctrl_deps parent), split between
   that op's kernels in proportion to their measured durations (evenly if all are 0); the CPU op
   is then a *launcher*, with 1 and 1;
4. ops whose work the network simulates (the ``gloo:`` worker ops of a host-side collective under
   ``--astra-sim``) get 1 and 1;
5. a node whose shapes or dtypes cannot be read gets no values, and the summary warns (ASTRA-sim's
   roofline would refuse that node if it is not a CPU op).

With ``accelerator`` (``--target accelerator``) every compute node that does work is written with
``is_cpu_op`` false, so ASTRA-sim times a CPU capture's ops with the roofline instead of replaying
them; the nodes that do none (wrappers, views, launchers, network workers) stay CPU ops and lose
their duration (ASTRA-sim replays a node without duration in 1 ns): no host overhead is modelled.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from ..et import decode
from ..et.wire import BoundedCache
from ..schema.chakra import NodeType
from ..schema.opcost import BadShapes, Cost, OpClass, op_cost, parse_list
from .graph import TraceGraph
from .writer import TailSpill

_COMP = int(NodeType.COMP_NODE)
MIN_BYTES = 1 << 14  # tensor_size floor of a node that does work: >= 1 ns at up to 16 TB/s
_EXAMPLES = 3
WRAPPER, LAUNCHER, KERNEL, NETWORK = "wrapper", "launcher", "kernel", "network"
_NO_WORK = frozenset({WRAPPER, LAUNCHER, NETWORK, OpClass.NONE.value})


@dataclass
class ClassTotals:
    nodes: int = 0
    flops: int = 0
    bytes: int = 0


@dataclass
class RooflineSummary:
    """What ``--roofline`` wrote: per op class (and ``wrapper``, ``launcher``, ``network`` for the
    nodes given the minimum), nodes, FLOPs and bytes; the nodes left without values and why."""

    classes: dict[str, ClassTotals] = field(default_factory=dict)
    kernels: int = 0  # GPU kernels given a share of their launcher's cost
    kernels_without_launcher: int = 0  # given the minimum
    unreadable: int = 0  # nodes given no values
    examples: list[str] = field(default_factory=list)  # the first few of them, with the reason
    accelerator: bool = False

    @property
    def nodes(self) -> int:
        return sum(c.nodes for c in self.classes.values())

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.classes.values())

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.classes.values())

    def warnings(self) -> list[str]:
        if not self.unreadable:
            return []
        return [f"--roofline: {self.unreadable:,} compute node(s) have shapes or dtypes that cannot be read and "
                f"get no num_ops/tensor_size (ASTRA-sim's roofline refuses such a node unless it is a CPU op): "
                + "; ".join(self.examples)]


def apply(graph: TraceGraph, spill: TailSpill, accelerator: bool) -> RooflineSummary:
    """Give every written compute node of ``graph`` (built) its roofline values (set on the graph
    for the writer); with ``accelerator``, mark the compute nodes to be written as non-CPU ops."""
    summary = RooflineSummary(accelerator=accelerator)
    size = len(graph)
    num_ops, tensor_size = array("q", bytes(8 * size)), array("Q", bytes(8 * size))
    rows = [row for row in range(size) if graph.final[row] and graph.types[row] == _COMP]
    costs, durations = _read_costs(graph, spill, rows, summary)
    is_gpu = graph.is_gpu
    kernels: dict[int, list[int]] = {}
    orphans: list[int] = []
    for row in rows:
        if is_gpu[row]:
            launcher = graph.parent_row(row)
            if launcher >= 0 and not is_gpu[launcher]:
                kernels.setdefault(launcher, []).append(row)
            else:
                orphans.append(row)
    own = _exclusive(graph, rows, costs)

    stay_cpu = bytearray(size)

    def put(row: int, name: str, flops: int, moved: int) -> None:
        if name in _NO_WORK and not is_gpu[row]:
            flops = moved = 1
            stay_cpu[row] = 1
        else:  # a GPU kernel always does work
            flops, moved = max(flops, 1), max(moved, MIN_BYTES)
        num_ops[row], tensor_size[row] = flops, moved
        totals = summary.classes.setdefault(name, ClassTotals())
        totals.nodes += 1
        totals.flops += flops
        totals.bytes += moved

    for row in rows:
        cost = own.get(row)
        if is_gpu[row]:
            continue
        if row in graph.zero_duration:
            put(row, NETWORK, 1, 1)
        elif cost is None:
            for _ in kernels.get(row, ()):  # unreadable: no values, for its kernels neither
                _unreadable(graph, row, "the kernel's launcher is unreadable", summary)
        elif row in kernels:
            put(row, LAUNCHER, 1, 1)
            _share(kernels[row], cost, durations, put, summary)
        elif cost.flops == 0 and cost.bytes == 0:
            put(row, WRAPPER if cost.op_class is not OpClass.NONE else OpClass.NONE.value, 1, 1)
        else:
            put(row, cost.op_class.value, cost.flops, cost.bytes)
    for row in orphans:
        put(row, KERNEL, 1, MIN_BYTES)
    summary.kernels_without_launcher = len(orphans)
    graph.roofline = (num_ops, tensor_size)
    if accelerator:
        graph.accelerator = stay_cpu
    return summary


def _read_costs(graph: TraceGraph, spill: TailSpill, rows: list[int], summary: RooflineSummary
                ) -> tuple[dict[int, Cost], dict[int, int]]:
    """Each row's cost (absent where unreadable: counted in ``summary``) and each GPU row's duration."""
    memo: BoundedCache[Cost | str] = BoundedCache(1 << 14)
    costs: dict[int, Cost] = {}
    durations: dict[int, int] = {}
    names, is_gpu, overrides = graph.names, graph.is_gpu, graph.tail_overrides
    for row, tail in zip(rows, spill.read_each(rows), strict=True):
        tail = overrides.get(row) or tail
        try:
            io = decode.tail_io(tail)
        except ValueError as exc:
            _unreadable(graph, row, f"its record does not decode ({exc})", summary)
            continue
        if is_gpu[row]:
            durations[row] = io.duration
            continue  # a kernel's shapes are its launcher's
        key = (names[row], io.in_shapes, io.in_types, io.out_shapes, io.out_types)
        found = memo.get(key)
        if found is None:
            found = memo.remember(key, _cost(*key))
        if isinstance(found, str):
            _unreadable(graph, row, found, summary)
        else:
            costs[row] = found
    return costs, durations


def _cost(name: str, in_shapes: str, in_types: str, out_shapes: str, out_types: str) -> Cost | str:
    try:
        return op_cost(name, parse_list(in_shapes, "input shapes"), parse_list(in_types, "input types"),
                       parse_list(out_shapes, "output shapes"), parse_list(out_types, "output types"))
    except BadShapes as exc:
        return str(exc)


def _unreadable(graph: TraceGraph, row: int, why: str, summary: RooflineSummary) -> None:
    summary.unreadable += 1
    if len(summary.examples) < _EXAMPLES:
        summary.examples.append(f"{graph.describe(row)}: {why}")


def _exclusive(graph: TraceGraph, rows: list[int], costs: dict[int, Cost]) -> dict[int, Cost]:
    """Each CPU row's own work: its inclusive cost less its children's (each part at least 0).

    Inclusive: an op of a known class, the larger of its rule's cost and its children's sum; a view
    or allocation, or an op of no known class that has children (an autograd node, a module, a
    ``record_function``), its children's sum; an op of no known class without children, its rule's
    (its tensors moved). So ``aten::linear`` over ``aten::addmm`` keeps nothing, and ``aten::addmm``
    over the ``aten::copy_`` of its bias keeps the product."""
    is_gpu, parent_row = graph.is_gpu, graph.parent_row
    cpu_rows = [row for row in rows if not is_gpu[row]]
    depth = _depths(graph, cpu_rows)
    below: dict[int, tuple[int, int, int]] = {}  # row -> (children, their FLOPs, their bytes)
    out: dict[int, Cost] = {}
    for row in sorted(cpu_rows, key=depth.__getitem__, reverse=True):
        children, child_flops, child_bytes = below.get(row, (0, 0, 0))
        cost = costs.get(row)
        if cost is None:  # unreadable: its children's work only
            flops, moved = child_flops, child_bytes
        elif cost.op_class is OpClass.NONE or (cost.op_class is OpClass.UNKNOWN and children):
            flops, moved = child_flops, child_bytes
            out[row] = Cost(cost.op_class, 0, 0)
        else:
            flops, moved = max(cost.flops, child_flops), max(cost.bytes, child_bytes)
            out[row] = Cost(cost.op_class, flops - child_flops, moved - child_bytes)
        parent = parent_row(row)
        if parent >= 0 and parent != row:
            count, f, b = below.get(parent, (0, 0, 0))
            below[parent] = (count + 1, f + flops, b + moved)
    return out


def _depths(graph: TraceGraph, rows: list[int]) -> dict[int, int]:
    """Each row's depth in the ctrl_deps tree (iteratively; a parent chain that loops ends there)."""
    depth: dict[int, int] = {}
    parent_row = graph.parent_row
    for row in rows:
        chain: list[int] = []
        seen: set[int] = set()
        node = row
        while node >= 0 and node not in depth and node not in seen:
            seen.add(node)
            chain.append(node)
            node = parent_row(node)
        base = depth.get(node, -1) if node >= 0 else -1
        for offset, member in enumerate(reversed(chain), start=1):
            depth[member] = base + offset
    return depth


def _share(kernels: list[int], cost: Cost, durations: dict[int, int], put: Callable[[int, str, int, int], None],
           summary: RooflineSummary) -> None:
    """The launcher's cost split between its kernels by their durations (evenly if all are 0)."""
    weights = [durations.get(k, 0) for k in kernels]
    total = sum(weights)
    if total <= 0:
        weights, total = [1] * len(kernels), len(kernels)
    for kernel, weight in zip(kernels, weights, strict=True):
        put(kernel, cost.op_class.value, cost.flops * weight // total, cost.bytes * weight // total)
        summary.kernels += 1
