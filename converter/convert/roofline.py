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
   roofline would refuse that node if it is not a CPU op); with ``accelerator`` it stays a CPU op,
   replayed for its captured duration (a GPU kernel of such a launcher is made one): no accelerator
   node is ever written without ``num_ops`` and ``tensor_size``.

With ``accelerator`` (``--target accelerator``) every compute node that does work is written with
``is_cpu_op`` false, so ASTRA-sim times a CPU capture's ops with the roofline instead of replaying
them; the nodes that do none (wrappers, views, launchers, network workers) stay CPU ops and lose
their duration (ASTRA-sim replays a node without duration in 1 ns): no host overhead is modelled.
With ``keep_host_time`` (``--host-time captured``) they keep it (the network workers excepted:
the network simulates their work), so ASTRA-sim replays the captured host work between the
roofline-timed ops.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from ..et import decode
from ..et.wire import BoundedCache
from ..schema.chakra import NodeType
from ..schema.opcost import BadShapes, Cost, OpClass, op_cost, parse_list
from .graph import ACCELERATOR_OP, DROP_DURATION, KEEP_DURATION, REPLAYED, TraceGraph
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
    replayed: int = 0  # with accelerator: of them, the nodes kept CPU ops with their captured durations
    examples: list[str] = field(default_factory=list)  # the first few of them, with the reason
    accelerator: bool = False
    host_time: bool = False  # the no-work nodes keep their captured durations

    @property
    def nodes(self) -> int:
        return sum(c.nodes for c in self.classes.values())

    @property
    def no_work_nodes(self) -> int:
        """Nodes given the minimum that are not GPU kernels (with ``accelerator``: the CPU ops)."""
        return sum(c.nodes for name, c in self.classes.items() if name in _NO_WORK)

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.classes.values())

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.classes.values())

    def warnings(self) -> list[str]:
        if not self.unreadable:
            return []
        fate = (
            "with `target` accelerator they stay CPU ops, replayed for their captured durations, as "
            "ASTRA-sim's roofline cannot time them"
            if self.accelerator
            else "ASTRA-sim's roofline refuses such a node unless it is a CPU op"
        )
        return [
            f"`roofline`: {self.unreadable:,} compute node(s) have shapes or dtypes that cannot be read and "
            f"get no num_ops/tensor_size ({fate}): " + "; ".join(self.examples)
        ]


def apply(graph: TraceGraph, spill: TailSpill, accelerator: bool, keep_host_time: bool = False) -> RooflineSummary:
    """Give every written compute node of ``graph`` (built) its roofline values (set on the graph
    for the writer); with ``accelerator``, mark the compute nodes to be written as non-CPU ops and
    those that do no work as CPU ops without their duration, or with it (``keep_host_time``).
    Memory: a few arrays over the rows (~50 bytes a row), the distinct costs, the kernels."""
    summary = RooflineSummary(accelerator=accelerator, host_time=accelerator and keep_host_time)
    stays = KEEP_DURATION if keep_host_time else DROP_DURATION
    size = len(graph)
    num_ops, tensor_size = array("q", bytes(8 * size)), array("Q", bytes(8 * size))
    rows = [row for row in range(size) if graph.final[row] and graph.types[row] == _COMP]
    costs = _read_costs(graph, spill, rows, summary)
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
    del costs.index  # what the pass still needs is in ``own``

    stay_cpu = bytearray(size)
    totals: dict[str, list[int]] = {}

    def put(row: int, name: str, flops: int, moved: int) -> None:
        if name in _NO_WORK and not is_gpu[row]:
            flops = moved = 1
            stay_cpu[row] = stays
        else:  # a GPU kernel always does work
            flops, moved = min(max(flops, 1), _CAP), min(max(moved, MIN_BYTES), _CAP)
        num_ops[row], tensor_size[row] = flops, moved
        entry = totals.get(name)
        if entry is None:
            entry = totals[name] = [0, 0, 0]
        entry[0] += 1
        entry[1] += flops
        entry[2] += moved

    zero_duration = graph.zero_duration
    for row in rows:
        if is_gpu[row]:
            continue
        if row in zero_duration:
            put(row, NETWORK, 1, 1)
        elif not own.has[row]:
            for _ in kernels.get(row, ()):  # unreadable: no values, for its kernels neither
                _unreadable(graph, row, "the kernel's launcher is unreadable", summary)
        else:
            cost = own.cost(row)
            if row in kernels:
                put(row, LAUNCHER, 1, 1)
                _share(kernels[row], cost, costs.durations, put, summary)
            elif cost.flops == 0 and cost.bytes == 0:
                put(row, WRAPPER if cost.op_class is not OpClass.NONE else OpClass.NONE.value, 1, 1)
            else:
                put(row, cost.op_class.value, cost.flops, cost.bytes)
    for row in orphans:
        put(row, KERNEL, 1, MIN_BYTES)
    summary.kernels_without_launcher = len(orphans)
    summary.classes = {name: ClassTotals(*entry) for name, entry in totals.items()}
    graph.roofline = (num_ops, tensor_size)
    if accelerator:
        for row in rows:  # never an accelerator op without values (ASTRA-sim would never finish)
            if not num_ops[row] and stay_cpu[row] == ACCELERATOR_OP:
                stay_cpu[row] = REPLAYED if is_gpu[row] else KEEP_DURATION
                summary.replayed += 1
        graph.accelerator = stay_cpu
    return summary


class _Costs:
    """Each row's cost as an index into the distinct costs (-1: none, or unreadable), and each
    GPU row's duration."""

    def __init__(self, size: int) -> None:
        self.index = array("l", [-1]) * size
        self.table: list[Cost] = []
        self.durations = array("Q", bytes(8 * size))


def _read_costs(graph: TraceGraph, spill: TailSpill, rows: list[int], summary: RooflineSummary) -> _Costs:
    """Each row's cost (none where unreadable: counted in ``summary``) and each GPU row's duration."""
    memo: BoundedCache[int | str] = BoundedCache(1 << 14)  # -> index into costs.table, or why unreadable
    costs = _Costs(len(graph))
    index, table, durations = costs.index, costs.table, costs.durations
    names, is_gpu, overrides = graph.names, graph.is_gpu, graph.tail_overrides
    for row, tail in zip(rows, spill.read_each(rows), strict=True):
        tail = overrides.get(row) or tail
        try:
            io = decode.tail_io(tail, duration_only=bool(is_gpu[row]))  # a kernel's shapes are its launcher's
        except ValueError as exc:
            _unreadable(graph, row, f"its record does not decode ({exc})", summary)
            continue
        if is_gpu[row]:
            durations[row] = io.duration
            continue
        key = (names[row], io.in_shapes, io.in_types, io.out_shapes, io.out_types)
        found = memo.get(key)
        if found is None:
            cost = _cost(*key)
            if not isinstance(cost, str):
                table.append(cost)
            found = memo.remember(key, cost if isinstance(cost, str) else len(table) - 1)
        if isinstance(found, str):
            _unreadable(graph, row, found, summary)
        else:
            index[row] = found
    return costs


def _cost(name: str, in_shapes: bytes, in_types: bytes, out_shapes: bytes, out_types: bytes) -> Cost | str:
    try:
        texts = [part.decode("utf-8") for part in (in_shapes, in_types, out_shapes, out_types)]
        return op_cost(
            name,
            parse_list(texts[0], "input shapes"),
            parse_list(texts[1], "input types"),
            parse_list(texts[2], "output shapes"),
            parse_list(texts[3], "output types"),
        )
    except UnicodeDecodeError:
        return "shapes or types are not UTF-8"
    except BadShapes as exc:
        return str(exc)


def _unreadable(graph: TraceGraph, row: int, why: str, summary: RooflineSummary) -> None:
    summary.unreadable += 1
    if len(summary.examples) < _EXAMPLES:
        summary.examples.append(f"{graph.describe(row)}: {why}")


_CLASSES = list(OpClass)
_CLASS_CODE = {op_class: code for code, op_class in enumerate(_CLASSES)}
_CAP = (1 << 63) - 1  # int64: FLOPs and bytes are clamped there (absurd shapes)


class _Own:
    """Each row's own (exclusive) cost, column by column."""

    def __init__(self, size: int) -> None:
        self.has = bytearray(size)
        self.classes = bytearray(size)
        self.flops = array("q", bytes(8 * size))
        self.bytes = array("q", bytes(8 * size))

    def set(self, row: int, op_class: OpClass, flops: int, moved: int) -> None:
        self.has[row] = 1
        self.classes[row] = _CLASS_CODE[op_class]
        self.flops[row], self.bytes[row] = min(flops, _CAP), min(moved, _CAP)

    def cost(self, row: int) -> Cost:
        return Cost(_CLASSES[self.classes[row]], self.flops[row], self.bytes[row])


def _exclusive(graph: TraceGraph, rows: list[int], costs: _Costs) -> _Own:
    """Each CPU row's own work: its inclusive cost less its children's (each part at least 0).

    Inclusive: an op of a known class, the larger of its rule's cost and its children's sum; a view
    or allocation, or an op of no known class that has children (an autograd node, a module, a
    ``record_function``), its children's sum; an op of no known class without children, its rule's
    (its tensors moved). So ``aten::linear`` over ``aten::addmm`` keeps nothing, and ``aten::addmm``
    over the ``aten::copy_`` of its bias keeps the product."""
    size = len(graph)
    is_gpu, parent_row, index, table = graph.is_gpu, graph.parent_row, costs.index, costs.table
    cpu_rows = [row for row in rows if not is_gpu[row]]
    depth = _depths(graph, cpu_rows)
    children, child_flops, child_bytes = (
        array("l", bytes(8 * size)),
        array("q", bytes(8 * size)),
        array("q", bytes(8 * size)),
    )
    out = _Own(size)
    for row in sorted(cpu_rows, key=depth.__getitem__, reverse=True):
        below_flops, below_bytes = child_flops[row], child_bytes[row]
        at = index[row]
        if at < 0:  # unreadable: its children's work only
            flops, moved = below_flops, below_bytes
        else:
            cost = table[at]
            if cost.op_class is OpClass.NONE or (cost.op_class is OpClass.UNKNOWN and children[row]):
                flops, moved = below_flops, below_bytes
                out.set(row, cost.op_class, 0, 0)
            else:
                flops, moved = max(min(cost.flops, _CAP), below_flops), max(min(cost.bytes, _CAP), below_bytes)
                out.set(row, cost.op_class, flops - below_flops, moved - below_bytes)
        parent = parent_row(row)
        if parent >= 0 and parent != row:
            children[parent] += 1
            child_flops[parent] = min(child_flops[parent] + flops, _CAP)
            child_bytes[parent] = min(child_bytes[parent] + moved, _CAP)
    return out


def _depths(graph: TraceGraph, rows: list[int]) -> array[int]:
    """Each row's depth in the ctrl_deps tree (iteratively; a parent chain that loops ends there)."""
    depth = array("l", [-1]) * len(graph)
    on_chain = bytearray(len(graph))
    parent_row = graph.parent_row
    for row in rows:
        chain: list[int] = []
        node = row
        while node >= 0 and depth[node] < 0 and not on_chain[node]:
            on_chain[node] = 1
            chain.append(node)
            node = parent_row(node)
        base = depth[node] if node >= 0 else -1
        for member in reversed(chain):
            base += 1
            depth[member] = base
            on_chain[member] = 0
    return depth


def _share(
    kernels: list[int],
    cost: Cost,
    durations: array[int],
    put: Callable[[int, str, int, int], None],
    summary: RooflineSummary,
) -> None:
    """The launcher's cost split between its kernels by their durations (evenly if all are 0)."""
    weights = [durations[k] for k in kernels]
    total = sum(weights)
    if total <= 0:
        weights, total = [1] * len(kernels), len(kernels)
    for kernel, weight in zip(kernels, weights, strict=True):
        put(kernel, cost.op_class.value, cost.flops * weight // total, cost.bytes * weight // total)
        summary.kernels += 1
