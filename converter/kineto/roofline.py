"""``--roofline`` for a Kineto trace alone: ``num_ops`` and ``tensor_size`` on the GPU compute nodes.

A Kineto kernel carries no FLOP count; the CPU op that launched it often carries its inputs' shapes
and dtypes (``Input Dims``, ``Input type``: ``record_shapes``) and, with ``with_flops`` on older
PyTorch, the profiler's own ``flops``. So each GPU compute node takes the cost of its launching op:
the innermost op open around its launch that has shapes or ``flops`` (``aten::addmm`` under
``aten::linear``), computed by the host path's rules (``schema/opcost.py``: the op's class and
formula; Kineto records no outputs, so bytes are the inputs' and a matmul's FLOPs come from its
operands), with the profiler's ``flops`` taking the place of the formula's where recorded. Split
between that op's kernels in proportion to their traced durations, as the host path does
(``convert/roofline.py``), and written as ``num_ops`` = max(FLOPs, 1), ``tensor_size`` =
max(bytes, ``MIN_BYTES``). A memcpy or memset is ``num_ops`` 1 and its own ``bytes``.

The nodes that get none (no launching op with shapes, shapes that cannot be read, the backlog of
GPU work launched before the step) are counted and warned about. With ``accelerator``
(``--target accelerator``) they are written as CPU ops, replayed for their traced durations, since
ASTRA-sim's roofline cannot time a non-CPU node without ``num_ops`` (a CPU op takes the CPU slot:
on a trace without shapes, most kernels then run on the host's timeline); without it they stay GPU
nodes without values (ASTRA-sim's roofline refuses them; the replay does not need them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..convert.roofline import MIN_BYTES
from ..schema.opcost import BadShapes, Cost, dtype_bytes, op_cost
from .events import Event

_CAP = (1 << 63) - 1
_EXAMPLES = 3


@dataclass
class KinetoRoofline:
    """What ``--roofline`` gave the GPU compute nodes of one step."""

    accelerator: bool = False
    kernels: int = 0  # GPU compute nodes (kernels, memcpy, memset)
    costed: int = 0  # of them, given num_ops and tensor_size
    flops: int = 0
    bytes: int = 0
    from_profiler: int = 0  # of the costed, FLOPs from the profiler's own ``flops``
    none: int = 0  # given none
    replayed_us: int = 0  # with accelerator: the traced time of those, written as CPU ops
    reasons: dict[str, int] = field(default_factory=dict)  # why, with counts

    def warnings(self) -> list[str]:
        if not self.none:
            return []
        why = "; ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items(), key=lambda r: -r[1]))
        fate = (
            "written as CPU ops replayed for their traced durations (ASTRA-sim's roofline cannot time them)"
            if self.accelerator
            else "ASTRA-sim's roofline refuses such a GPU node (`target` accelerator replays them as CPU ops)"
        )
        return [
            f"`roofline`: {self.none:,} of {self.kernels:,} GPU compute node(s) got no num_ops/tensor_size "
            f"({why}): {fate}"
        ]


def kineto_types(types: list[Any]) -> list[Any]:
    """Kineto's ``Input type`` (``float``, ``c10::Half``, ``Scalar``, ``TensorList``, ``""``) as the
    host trace's (``Tensor(float)``; anything else is no tensor: left out of the bytes)."""
    out: list[Any] = []
    for name in types:
        if isinstance(name, str) and dtype_bytes(name) is not None:
            out.append(f"Tensor({name})")
        else:
            out.append("")  # a scalar, a list of tensors (one dtype for the list is not recorded), None
    return out


def op_cost_of(op: Event) -> Cost | str:
    """The cost of a launching op from its recorded shapes (and the profiler's ``flops``), or why not."""
    args = op.args
    dims, types = args.input_dims, args.input_type
    flops = args.flops if type(args.flops) is int and args.flops >= 0 else None
    if not isinstance(dims, list) or not isinstance(types, list):
        return "launching op without recorded shapes"
    try:
        cost = op_cost(op.name, dims, kineto_types(types), [], [])
    except BadShapes as exc:
        return f"shapes that cannot be read ({str(exc)[:80]})"
    return cost._replace(flops=flops) if flops is not None else cost


def launching_op(around: list[Event]) -> Event | None:
    """The innermost op open around a launch that recorded shapes or FLOPs."""
    for op in around:
        if op.args.input_dims is not None or op.args.flops is not None:
            return op
    return None


class Costs:
    """Collects, while the graph is built, each GPU compute node's launching op; ``assign`` then
    splits each op's cost between its nodes."""

    def __init__(self, accelerator: bool) -> None:
        self.summary = KinetoRoofline(accelerator=accelerator)
        self.by_op: dict[int, tuple[Event, list[tuple[Any, float]]]] = {}
        self.memcopies: list[tuple[Any, Any, Event | None]] = []
        self.none: list[tuple[Any, str]] = []

    def kernel(self, node: Any, gpu: Event, around: list[Event]) -> None:
        self.summary.kernels += 1
        op = launching_op(around)
        if gpu.args.bytes is not None or _is_copy(gpu):
            self.memcopies.append((node, gpu.args.bytes, op))
        elif op is None:
            self.none.append((node, "launched by no op with recorded shapes"))
        else:
            self.by_op.setdefault(op.index, (op, []))[1].append((node, gpu.dur))

    def backlog(self, node: Any) -> None:
        self.summary.kernels += 1
        self.none.append((node, "GPU work launched before the step"))

    def assign(self) -> KinetoRoofline:
        summary = self.summary
        for node, moved, op in self.memcopies:
            if type(moved) is int and moved >= 0:
                self._put(node, 1, moved)
            elif op is not None and not isinstance(cost := op_cost_of(op), str):
                self._put(node, 1, cost.bytes)
            else:
                self.none.append((node, "a copy without 'bytes'"))
        for op, nodes in self.by_op.values():
            cost = op_cost_of(op)
            if isinstance(cost, str):
                self.none.extend((node, cost) for node, _ in nodes)
                continue
            if op.args.flops is not None and type(op.args.flops) is int:
                summary.from_profiler += len(nodes)
            weights = [max(0.0, d) for _, d in nodes]
            total = sum(weights)
            if total <= 0:
                weights, total = [1.0] * len(nodes), float(len(nodes))
            flops, moved = min(cost.flops, _CAP), min(cost.bytes, _CAP)  # a float product stays finite
            for (node, _), weight in zip(nodes, weights, strict=True):
                self._put(node, int(flops * weight // total), int(moved * weight // total))
        for node, reason in self.none:
            summary.none += 1
            summary.reasons[reason] = summary.reasons.get(reason, 0) + 1
            if summary.accelerator:
                node.cpu = True  # replayed for its traced duration
                summary.replayed_us += node.dur
        return summary

    def _put(self, node: Any, flops: int, moved: int) -> None:
        node.roofline = (min(max(flops, 1), _CAP), min(max(moved, MIN_BYTES), _CAP))
        self.summary.costed += 1
        self.summary.flops += node.roofline[0]
        self.summary.bytes += node.roofline[1]


def _is_copy(gpu: Event) -> bool:
    """A memcpy or memset (``Memcpy HtoD (Pageable -> Device)``, ``Memset (Device)``)."""
    return gpu.name.lower().startswith(("memcpy", "memset"))
