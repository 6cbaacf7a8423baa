"""The host trace's tensors: which storages the traced step found live, which it made, and when
each was last used.

A host-trace tensor is ``[tensor id, storage id, offset, numel, itemsize, device]``; a storage's
bytes are the largest ``(offset + numel) x itemsize`` of its views. The trace is streamed twice
(``JsonObjectStream``): nodes are written as they end, a parent after its children, so the first
pass keeps each node's parent and the phase its name says, the second resolves each node's phase
from its ancestors and packs each node's tensor uses (three numbers each), which are then followed
in node id order (a compact record per storage, none per tensor view).

The observer names a storage by its data's address (a map from address to id): a freed block's id
comes back with the next tensor placed there, which the CUDA caching allocator does all the time
(and malloc on CPU). So a storage id written *fresh* (an output of a node that does not read it)
after a node other than one of that node's ancestors used it is a new storage, a *generation* of
the id, with its own bytes and lifetime: read as one storage, the ids of GPT-2 base on an H100
held 9-10% more than ``max_memory_allocated``. The second pass therefore keeps each node's tensor
uses and follows them in node id (start) order.

A storage is *pre-existing* when a node reads it no later than any node writes it (parameters,
optimizer state, DDP's buckets, the batch); else the step *made* it at the first node that
outputs it, and it lives until the last node that touches it. Categories:

==========================  =====================================================================
parameters                  pre-existing, used by the optimizer and by the forward pass or a collective
                            (not the backward pass alone: a tracer can file optimizer ops under it)
optimizer                   pre-existing and used only by the optimizer; or made by the optimizer
gradients                   made by the backward pass or a collective and used by the optimizer
activations                 made by the forward pass; made by the backward pass and not used by the optimizer
communication               made by a collective (not used by the optimizer); pre-existing, used only by collectives
other                       the rest (the batch, buffers, scalars)
==========================  =====================================================================
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..errors import TraceFormatError
from ..fastjson import ExactDecoder
from ..jsonstream import DecodedRun, JsonObjectStream
from .kineto import BACKWARD, COMMUNICATION, FORWARD, OPTIMIZER, phase_of_name

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "communication", "other")
_FW, _BW, _OPT, _COMM = 1, 2, 4, 8
_FLAG = {FORWARD: _FW, BACKWARD: _BW, OPTIMIZER: _OPT, COMMUNICATION: _COMM}


class _Values(msgspec.Struct, gc=False):
    values: Any = None
    types: Any = None
    shapes: Any = None
    strides: Any = None


class _Node(msgspec.Struct, gc=False):
    id: Any = None
    name: Any = None
    ctrl_deps: Any = None
    inputs: _Values | None = None
    outputs: _Values | None = None


_RUNS = ExactDecoder(msgspec.json.Decoder(list[_Node]))


@dataclass
class Storage:
    nbytes: int = 0
    first_read: int = 1 << 62  # node id
    first_write: int = 1 << 62
    last: int = -1
    made_by: int = 0  # phase flag of the node that first wrote it
    first_by: int = 0  # phase flag of the node that first touched it
    used_by: int = 0  # phase flags of every node that touched it


_UNSEEN = Storage()  # a storage id no node has used yet


@dataclass
class HostTensors:
    """The storages of one rank's host trace, on its training device."""

    path: str
    device: str
    storages: dict[tuple[int, int], Storage] = field(default_factory=dict)  # (storage id, generation)
    nodes: int = 0

    def pre_existing(self, s: Storage) -> bool:
        """Read no later than written, except a gradient: first touched by the backward pass and
        used by the optimizer, not by the forward pass (an in-place copy into a gradient that
        autograd made in an op the trace does not record reads it before any node writes it); and
        a buffer a collective both reads and writes where it first appears (its output)."""
        if s.first_by == _BW and s.used_by & _OPT and not s.used_by & _FW:
            return False
        if s.first_by == _COMM and s.first_read == s.first_write:
            return False  # a collective's output buffer (all_gather_into_tensor's ``output``)
        return s.first_read <= s.first_write

    @staticmethod
    def made_at(s: Storage) -> int:
        return min(s.first_read, s.first_write)

    def category(self, s: Storage) -> str:
        if self.pre_existing(s):
            if s.used_by & _OPT:
                return "parameters" if s.used_by & (_FW | _COMM) else "optimizer"
            return "communication" if s.used_by & _COMM else "other"
        if s.made_by == _OPT:
            return "optimizer"
        if (s.made_by or s.first_by) in (_BW, _COMM) and s.used_by & _OPT:
            return "gradients"
        if s.made_by == _COMM:
            return "communication"
        if s.made_by in (_FW, _BW):
            return "activations"
        return "other"

    def baseline(self) -> dict[str, int]:
        """Bytes live when the step began, by category."""
        out = dict.fromkeys(CATEGORIES, 0)
        for s in self.storages.values():
            if self.pre_existing(s):
                out[self.category(s)] += s.nbytes
        return out

    def timeline(self) -> tuple[list[tuple[float, int]], int, dict[str, int]]:
        """The live bytes after each node (x: the node's place in the step, 0 to 1), the peak, and
        what held it: the host trace's own estimate, for traces without memory events."""
        base = self.baseline()
        changes: dict[int, list[tuple[int, str]]] = {}
        for s in self.storages.values():
            if self.pre_existing(s) or s.nbytes == 0:
                continue
            cat = self.category(s)
            changes.setdefault(self.made_at(s), []).append((s.nbytes, cat))
            changes.setdefault(s.last + 1, []).append((-s.nbytes, cat))  # freed after its last use
        live = dict(base)
        total = sum(base.values())
        peak, at_peak = total, dict(live)
        points: list[tuple[float, int]] = [(0.0, total)]
        order = sorted(changes)
        span = max(1, (order[-1] - order[0]) if order else 1)
        for node_id in order:
            for nbytes, cat in changes[node_id]:
                live[cat] += nbytes
                total += nbytes
            points.append(((node_id - order[0]) / span, total))
            if total > peak:
                peak, at_peak = total, dict(live)
        return points, peak, at_peak


def _extent(numel: int, shape: Any, strides: Any) -> int:
    """Elements a view spans in its storage: an expanded view (stride 0) spans fewer than its
    ``numel``; without shapes and strides, ``numel``."""
    if (
        isinstance(shape, list)
        and isinstance(strides, list)
        and len(shape) == len(strides)
        and all(type(v) is int for v in shape)
        and all(type(v) is int for v in strides)
    ):
        if any(d == 0 for d in shape):
            return 0
        return 1 + sum(int((d - 1) * abs(st)) for d, st in zip(shape, strides, strict=True))
    return numel


def _tensors(part: Any) -> list[tuple[int, int, int, str]]:
    """(storage id, bytes spanned from the storage's start, -, device) of the tensors among an
    op's inputs or outputs (a tensor list's items too)."""
    found: list[tuple[int, int, int, str]] = []
    values, types = _get(part, "values"), _get(part, "types")
    shapes, strides = _get(part, "shapes"), _get(part, "strides")
    if not isinstance(values, list) or not isinstance(types, list):
        return found
    shapes = shapes if isinstance(shapes, list) and len(shapes) == len(values) else [None] * len(values)
    strides = strides if isinstance(strides, list) and len(strides) == len(values) else [None] * len(values)
    for value, kind, shape, stride in zip(values, types, shapes, strides, strict=False):
        if not isinstance(kind, str) or "Tensor" not in kind or not isinstance(value, list):
            continue
        many = bool(value) and isinstance(value[0], list)
        items = value if many else [value]
        item_shapes = shape if many and isinstance(shape, list) and len(shape) == len(items) else [shape] * len(items)
        item_strides = (
            stride if many and isinstance(stride, list) and len(stride) == len(items) else [stride] * len(items)
        )
        for item, sh, st in zip(items, item_shapes, item_strides, strict=True):
            if (
                isinstance(item, list)
                and len(item) == 6
                and all(type(v) is int for v in item[:5])
                and isinstance(item[5], str)
            ):
                _, sid, offset, numel, itemsize, device = item
                spanned = _extent(numel, sh if many else shape, st if many else stride)
                found.append((sid, (offset + spanned) * itemsize, 0, device))
    return found


def _nodes(path: str) -> Any:
    with JsonObjectStream(path, stream_keys={"nodes"}, batch=_RUNS) as stream:
        seen = False
        for key, value in stream.items():
            if key != "nodes":
                continue
            seen = True
            for element in value:
                yield from element if type(element) is DecodedRun else (element,)
        if not seen:
            raise TraceFormatError(path, "no 'nodes' array: not a host execution trace")


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else getattr(node, key, None)


def _io(node: Any, key: str) -> list[tuple[int, int, int, str]]:
    part = _get(node, key)
    return [] if part is None else _tensors(part)


def read_host(path: str | os.PathLike[str]) -> HostTensors:
    """The storages of ``path`` on its training device (CUDA where any tensor is, else CPU)."""
    path = os.fspath(path)
    parent: dict[int, int] = {}
    own: dict[int, str] = {}
    devices: dict[str, int] = {}
    steps: list[int] = []  # ids of the optimizer steps and of what ends one
    ends: list[int] = []
    for node in _nodes(path):
        nid, name, dep = _get(node, "id"), _get(node, "name"), _get(node, "ctrl_deps")
        if type(nid) is not int:
            continue
        if type(dep) is int:
            parent[nid] = dep
        if isinstance(name, str):
            phase = phase_of_name(name)
            if phase is not None:
                own[nid] = phase
            if name.startswith("Optimizer.step#"):
                steps.append(nid)
            elif name.startswith(("Optimizer.zero_grad#", "ProfilerStep#")):
                ends.append(nid)
        for t in _io(node, "outputs"):
            devices[t[3]] = devices.get(t[3], 0) + 1
    phases = _resolve(parent, own)
    _optimizer_ranges(phases, own, steps, ends)
    cuda = [d for d in devices if d.startswith("cuda")]
    device = max(cuda, key=lambda d: devices[d]) if cuda else "cpu"
    out = HostTensors(path, device)
    # Each node's tensor uses, packed (a node's reads, then its writes): storage id, bytes and kind,
    # 0 read, 1 written in place, 2 written fresh (an output that is none of the node's inputs).
    node_ids, first = array("q"), array("q", [0])
    sids, sizes, kinds = array("q"), array("q"), bytearray()
    for node in _nodes(path):
        nid = _get(node, "id")
        if type(nid) is not int:
            continue
        out.nodes += 1
        reads = [(sid, nbytes) for sid, nbytes, _, dev in _io(node, "inputs") if dev == device and sid > 0]
        read_ids = {sid for sid, _ in reads}
        writes = [
            (sid, nbytes, 1 if sid in read_ids else 2)
            for sid, nbytes, _, dev in _io(node, "outputs")
            if dev == device and sid > 0
        ]
        for sid, nbytes, kind in [(sid, nbytes, 0) for sid, nbytes in reads] + writes:
            sids.append(sid)
            sizes.append(nbytes)
            kinds.append(kind)
        node_ids.append(nid)
        first.append(len(sids))
    current: dict[int, tuple[int, Storage]] = {}  # storage id -> (generation, its record)
    for row in sorted(range(len(node_ids)), key=node_ids.__getitem__):  # start order
        nid = node_ids[row]
        flag = _FLAG[phases.get(nid, FORWARD)]
        for use in range(first[row], first[row + 1]):
            sid, kind = sids[use], kinds[use]
            gen, s = current.get(sid, (-1, _UNSEEN))
            if s is _UNSEEN or (kind == 2 and s.last != nid and not _encloses(parent, s.last, nid)):
                # a new allocation where a freed one was (the module's docstring)
                gen, s = gen + 1, Storage()
                current[sid] = (gen, s)
                out.storages[(sid, gen)] = s
            s.nbytes = max(s.nbytes, sizes[use])
            s.used_by |= flag
            s.last = max(s.last, nid)
            if nid <= min(s.first_read, s.first_write):
                s.first_by = flag
            if kind == 0:
                s.first_read = min(s.first_read, nid)
            elif nid < s.first_write:
                s.first_write = nid
                s.made_by = flag
    return out


def _encloses(parent: dict[int, int], outer: int, node: int) -> bool:
    """Whether node ``outer`` is ``node``'s ancestor (ids follow start order: an ancestor's is lower)."""
    while node > outer:
        up = parent.get(node)
        if up is None or up == node:
            return False
        node = up
    return node == outer


def _optimizer_ranges(phases: dict[int, str], own: dict[int, str], steps: list[int], ends: list[int]) -> None:
    """Every node from an ``Optimizer.step#`` node to the next ``zero_grad``, step or optimizer
    step is the optimizer's (a collective by its own name excepted): ids follow start order, and
    the observer has been seen filing the optimizer's ops under a gradient hook or a gloo
    collective of the backward pass instead (their ``ctrl_deps``)."""
    if not steps:
        return
    bounds = sorted([*steps, *ends])
    for start in steps:
        end = next((b for b in bounds if b > start), None)
        for nid in phases:
            if nid > start and (end is None or nid < end) and own.get(nid) != COMMUNICATION:
                phases[nid] = OPTIMIZER


def _resolve(parent: dict[int, int], own: dict[int, str]) -> dict[int, str]:
    """Each node's phase: what its nearest ancestor (itself included) whose name marks one says,
    iteratively, each node once. The nearest, not the outermost: a tracer can file the optimizer
    under a backward or communication node (seen on gloo ranks), while an op's own marker is true."""
    done: dict[int, str] = {}
    for start in parent.keys() | own.keys():
        chain: list[int] = []
        node: int | None = start
        while node is not None and node not in done and len(chain) <= len(parent) + 1:
            chain.append(node)
            nxt = parent.get(node)
            node = nxt if nxt != node else None
        inherited = done.get(node, FORWARD) if node is not None else FORWARD
        for n in reversed(chain):
            inherited = own.get(n, inherited)
            done[n] = inherited
    return done
