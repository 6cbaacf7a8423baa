"""Link a cut-off host trace (salvaged by ``repair``): adopt the ops whose parents were lost.

The observer writes a node when its op ends, so when a job dies mid-step the nodes of the ops
still running (the ``ProfilerStep`` itself, the process node) and the last buffered ones are
lost, and the ops under them name parents that are not in the file. ``repair`` keeps every
complete node and marks the trace (``"finish_ts": null``); here:

* a missing process node (id 1) is made again, so that the thread nodes hang from it;
* each op whose parent was lost goes to a step by its record-function id (ids grow as ops start:
  an op belongs to the last step that started before it, a step's id taken from its host node or
  the Kineto trace's annotation); under that step's node if the step is linked (a node made
  from the Kineto trace's annotation if the step's own was lost), else it is left out, whole;
* how much of the Kineto trace's step was recovered is counted after linking: its CPU ops that
  found their host op.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from ..schema.host import OBSERVER_NODE_PREFIX
from ..schema.kineto import STEP_PREFIX, step_number
from .hostindex import NO_CTRL_DEPS, ROOT_ID, HostIndex
from .kineto import KinetoTrace
from .steps import StepSelection

PROCESS_NODE = "[pytorch|profiler|execution_trace|process]"
THREAD_NODE = "[pytorch|profiler|execution_trace|thread]"


def is_cut_off(index: HostIndex) -> bool:
    """A trace ``repair`` salvaged (``finish_ts`` null: the observer never closed it), or one closed
    by hand (no ``finish_ts`` at all) whose nodes name parents that are not in it."""
    metadata = index.metadata
    if "finish_ts" in metadata:
        return metadata["finish_ts"] is None
    present = set(index.ids)
    return any(
        parent is not NO_CTRL_DEPS and parent != node_id and parent not in present
        for node_id, parent in zip(index.ids, index.ctrl_deps, strict=True)
    )


@dataclass
class CutOff:
    """What adopting a cut-off trace's orphans did, and what linking it recovered."""

    adopted: int = 0  # ops whose parent was lost, now under their step
    left_out: int = 0  # nodes whose parent was lost that lie outside the steps linked (with their subtrees)
    made: tuple[str, ...] = ()  # names of the nodes made again
    steps: tuple[int, ...] = ()  # the steps linked
    recovered: int = 0  # the Kineto trace's CPU ops in those steps that found their host op
    kineto_ops: int = 0  # the Kineto trace's CPU ops in those steps

    def describe(self) -> str:
        steps = ", ".join(f"{STEP_PREFIX}{s}" for s in self.steps) or "the trace"
        share = f" ({100 * self.recovered / self.kineto_ops:.1f}%)" if self.kineto_ops else ""
        made = f"; made again (lost): {', '.join(self.made)}" if self.made else ""
        left = f"; {self.left_out:,} outside the steps linked left out" if self.left_out else ""
        return (
            f"cut-off host trace: recovered {self.recovered:,} of the {self.kineto_ops:,} CPU ops the Kineto trace "
            f"records in {steps}{share}; {self.adopted:,} ops whose parents were lost placed under their "
            f"step{left}{made}"
        )


def _blank_node(node_id: int, name: str, parent: int, rf_id: Any, tid: Any) -> dict[str, Any]:
    """A node as the observer writes its process, thread and step nodes."""
    empty: dict[str, list[Any]] = {"values": [], "shapes": [], "types": [], "strides": []}
    attrs = [
        ("rf_id", "uint64", rf_id if isinstance(rf_id, int) else 0),
        ("fw_parent", "uint64", 0),
        ("seq_id", "int64", -1),
        ("scope", "uint64", 7),
        ("tid", "uint64", tid if isinstance(tid, int) else 0),
        ("fw_tid", "uint64", 0),
        ("op_schema", "string", ""),
        ("kernel_backend", "string", ""),
        ("kernel_file", "string", ""),
        ("tensor_range", "string", ""),
    ]
    return {
        "id": node_id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": dict(empty),
        "outputs": dict(empty),
        "attrs": [{"name": n, "type": t, "value": v} for n, t, v in attrs],
    }


def adopt_orphans(index: HostIndex, trace: KinetoTrace, selection: StepSelection) -> CutOff:
    """Re-parent the cut-off trace's orphans in ``index`` (its ``ctrl_deps``), add the nodes made
    again (``index.synthesized``) and widen ``index.left_out`` by the orphans outside the steps
    linked."""
    result = CutOff(steps=selection.kept)
    present = set(index.ids)
    next_id = max(present, default=0) + 1
    for parent in index.ctrl_deps:
        if type(parent) is int and parent >= next_id:
            next_id = parent + 1

    def make(name: str, parent: int, rf_id: Any, tid: Any, node_id: int | None = None) -> int:
        nonlocal next_id
        if node_id is None:
            node_id, next_id = next_id, next_id + 1
        node = _blank_node(node_id, name, parent, rf_id, tid)
        index.synthesized.append(node)
        index.ids.append(node_id)
        index.ctrl_deps.append(parent)
        index.rf_ids.append(rf_id if isinstance(rf_id, int) else None)
        index.names.append(name)
        index.tids.append(tid)
        if len(index.ids) > 1 and node_id <= index.ids[-2]:
            index.ascending = False
        result.made += (name,)
        return node_id

    if ROOT_ID not in present:
        make(PROCESS_NODE, ROOT_ID, 0, 0, ROOT_ID)
        present.add(ROOT_ID)
    # step starts by record-function id: the host's step nodes, else the Kineto trace's annotations
    starts: dict[int, Any] = {s: info[2] for s, info in trace.steps.items() if isinstance(info[2], int)}
    step_node: dict[int, int] = {}
    for position, name in enumerate(index.names):
        number = step_number(name)
        if number is not None and index.ids[position] not in index.left_out:
            step_node.setdefault(number, index.ids[position])
            if isinstance(index.rf_ids[position], int):
                starts[number] = index.rf_ids[position]
    order = sorted(starts, key=starts.__getitem__)
    bounds = [starts[s] for s in order]
    main_thread = next((i for i, n in zip(index.ids, index.names, strict=True) if n == THREAD_NODE), ROOT_ID)
    out: list[int] = []
    for position in range(len(index.ids) - len(index.synthesized)):
        parent, node_id = index.ctrl_deps[position], index.ids[position]
        if parent is NO_CTRL_DEPS or parent == node_id or parent in present or node_id in index.left_out:
            continue
        name = index.names[position]
        if name.startswith(OBSERVER_NODE_PREFIX):
            index.ctrl_deps[position] = ROOT_ID
            index.reparented = True
            continue
        rf_id = index.rf_ids[position]
        k = bisect_right(bounds, rf_id) - 1 if isinstance(rf_id, int) else -1
        step = order[k] if k >= 0 else None
        if step is None or step not in selection.kept:
            out.append(node_id)
            continue
        if step not in step_node:
            step_node[step] = make(f"{STEP_PREFIX}{step}", main_thread, starts.get(step), 1)
        index.ctrl_deps[position] = step_node[step]
        index.reparented = True
        result.adopted += 1
    if out:
        dropped = index.subtrees(out)
        result.left_out = len(out)
        index.left_out = index.left_out | frozenset(dropped)
    return result


def count_recovered(result: CutOff, trace: KinetoTrace) -> None:
    """The Kineto trace's CPU ops within the linked steps, and how many found their host op."""
    spans = [trace.steps[s][:2] for s in result.steps if s in trace.steps]
    for op in trace.cpu_ops:
        if any(start <= op.ts <= start + dur for start, dur in spans):
            result.kineto_ops += 1
            result.recovered += op.host_id is not None
