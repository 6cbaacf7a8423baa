"""``--device-profile``: a Kineto trace's step re-timed for a device from its profile (the what-if).

Each GPU kernel takes the time the target's profile (``devices/profile.py``) gives its launching
op at its recorded shape, split between that op's kernels in proportion to their traced times (as
the roofline splits FLOPs); where the profile has no point of the op's class and dtype, the
datasheet roofline (the profile's ``peak_tflops`` and ``mem_bandwidth_gbps``); where neither
applies (no launching op with shapes), the traced time. With a *source* profile (the GPU the trace
was captured on), each kernel's traced time is scaled instead, by the target's over the source's
time at its shape, or, without shapes, by the ratio of the two profiles' median throughput for the
launching op's class, or for the whole device: a trace without shapes still gets an answer, and
the summary says how many kernels took each road.

The host: a traced step's host time is mostly the tracer's (``bench/results/gpu.md``); the
profile's ``host`` costs replace it: each host op ``op_us``, each runtime call ``launch_us``, the
gaps and the step's own span nothing (their untraced cost is folded into the two). The GPU: each
kernel, memcpy and memset also takes the profile's ``gpu.kernel_gap_us``, the device's own time
between two kernels queued back to back, which CUPTI's kernel times leave out (about 1.3 us on
the H100 and H200: 2.5 ms of a 1,800-kernel step that the GPU bounds). Durations are
whole microseconds in a ``.et``: each chain (the host timeline, each GPU stream) is rounded on its
running sum, so thousands of 2 us ops do not drift.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..devices.profile import DeviceProfile, OpKey, Point, memcpy_key, op_key
from ..errors import OptionError
from ..schema.opcost import OpClass, op_class
from .events import HOST, RUNTIME, Event
from .roofline import kineto_types, launching_op

PROFILE, ROOFLINE, TRACED = "profile", "roofline", "traced"
BY_SHAPE, BY_CLASS, BY_DEVICE = "scaled by shape", "scaled by class", "scaled by device"
NO_OP = "no launching op"


@dataclass
class ModelTotals:
    kernels: int = 0
    traced_us: float = 0.0
    whatif_us: float = 0.0


@dataclass
class WhatIfSummary:
    """What the what-if did: per class of launching op and model, kernels and time; the host."""

    device: str
    profile: str
    source: str | None = None  # the capture's GPU's profile, when kernels were scaled
    source_device: str | None = None  # that profile's device
    classes: dict[str, dict[str, ModelTotals]] = field(default_factory=dict)
    host_events: int = 0
    host_traced_us: float = 0.0
    host_whatif_us: float | None = None  # None: host kept its traced time (the profile has no host costs)
    kernel_gap_us: float = 0.0  # the GPU's time between queued kernels, added to each GPU op
    gpu_ops: int = 0  # the GPU ops (kernels, memcpy, memset) that took it
    warnings: list[str] = field(default_factory=list)

    def add(self, cls: str, model: str, kernels: int, traced: float, whatif: float) -> None:
        entry = self.classes.setdefault(cls, {}).setdefault(model, ModelTotals())
        entry.kernels += kernels
        entry.traced_us += traced
        entry.whatif_us += whatif

    def totals(self, model: str | None = None) -> ModelTotals:
        out = ModelTotals()
        for models in self.classes.values():
            for name, t in models.items():
                if model is None or name == model:
                    out.kernels += t.kernels
                    out.traced_us += t.traced_us
                    out.whatif_us += t.whatif_us
        return out

    def class_lines(self) -> list[str]:
        """One line per class: kernels, traced and what-if time, and the model(s) used."""
        lines = []
        order = sorted(self.classes, key=lambda c: -sum(t.traced_us for t in self.classes[c].values()))
        for cls in order:
            models = self.classes[cls]
            traced = sum(t.traced_us for t in models.values())
            whatif = sum(t.whatif_us for t in models.values())
            kernels = sum(t.kernels for t in models.values())
            used = ", ".join(f"{m} {t.kernels}" for m, t in sorted(models.items(), key=lambda m: -m[1].kernels))
            lines.append(
                f"  {cls:<14} {kernels:>6,} kernel(s): traced {traced / 1e3:9.3f} ms -> {whatif / 1e3:9.3f} ms ({used})"
            )
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "profile": self.profile,
            "source": self.source,
            "host_events": self.host_events,
            "host_traced_us": round(self.host_traced_us, 3),
            "host_whatif_us": None if self.host_whatif_us is None else round(self.host_whatif_us, 3),
            "kernel_gap_us": self.kernel_gap_us,
            "gpu_ops": self.gpu_ops,
            "classes": {
                cls: {
                    m: {"kernels": t.kernels, "traced_us": round(t.traced_us, 3), "whatif_us": round(t.whatif_us, 3)}
                    for m, t in models.items()
                }
                for cls, models in self.classes.items()
            },
        }


class WhatIf:
    """Collects, while the graph is built, each kernel's launching op and each host node's kind;
    ``finish`` re-times them."""

    def __init__(self, target: DeviceProfile, source: DeviceProfile | None = None) -> None:
        self.target = target
        self.source = source
        self.summary = WhatIfSummary(
            target.device, target.name, source.name if source else None, source.device if source else None
        )
        self.by_op: dict[int, tuple[Event, list[tuple[Any, float]]]] = {}
        #: memcpy/memset (by their bytes, where recorded) and kernels without a launching op: node, time, key, class
        self.loose: list[tuple[Any, float, OpKey | None, str]] = []
        self.host_kinds: dict[int, int] = {}
        self._device_ratio: float | None = None
        self._class_ratios: dict[str, float | None] = {}

    # -- collecting -------------------------------------------------------------------------------
    def kernel(self, node: Any, gpu: Event, around: list[Event]) -> None:
        if gpu.name.lower().startswith(("memcpy", "memset")):
            moved = gpu.args.bytes
            key = memcpy_key(moved) if type(moved) is int and moved >= 0 else None
            self.loose.append((node, float(node.dur), key, "memcpy"))
            return
        op = launching_op(around)
        if op is None:
            self.loose.append((node, float(node.dur), None, _named_class(around)))
        else:
            self.by_op.setdefault(op.index, (op, []))[1].append((node, float(node.dur)))

    def host(self, node: Any, kind: int | None) -> None:
        if kind is not None:
            self.host_kinds[id(node)] = kind

    # -- re-timing --------------------------------------------------------------------------------
    def finish(self, nodes: list[Any]) -> WhatIfSummary:
        if not self.by_op and not self.loose:
            raise OptionError(
                "`device_profile`: the step has no GPU kernel (a CPU capture?): the what-if re-times kernels "
                "and would only change the host; a CPU capture's what-if for a GPU is `roofline` with `accelerator` "
                "(docs/roofline.md)"
            )
        exact: dict[int, float] = {}  # id(node) -> its what-if time (node ids may be renumbered), us (before rounding)
        for op, kernels in self.by_op.values():
            key = key_of(op)
            cls = key.op_class if isinstance(key, OpKey) else op_class(op.name).value
            traced = sum(d for _, d in kernels)
            whatif, model = self._time(key if isinstance(key, OpKey) else None, cls, traced)
            self.summary.add(cls, model, len(kernels), traced, whatif)
            weights = [d for _, d in kernels] if traced > 0 else [1.0] * len(kernels)
            total = sum(weights)
            for (node, _), w in zip(kernels, weights, strict=True):
                exact[id(node)] = whatif * w / total
        for node, traced, copy, cls in self.loose:
            whatif, model = self._time(copy, cls, traced)
            self.summary.add(cls, model, 1, traced, whatif)
            exact[id(node)] = whatif
        self._gpu_gaps(exact)
        self._host(nodes, exact)
        _round_chains(nodes, exact)
        self._warn()
        return self.summary

    def _time(self, key: OpKey | None, cls: str, traced: float) -> tuple[float, str]:
        target, source = self.target, self.source
        if source is None:
            if key is not None:
                found = target.predict(key)
                if found is not None:
                    return found, PROFILE
                found = target.roofline_us(key)
                if found is not None:
                    return found, ROOFLINE
            return traced, TRACED
        if key is not None:
            a, b = source.predict(key), target.predict(key)
            if a and b:
                return traced * b / a, BY_SHAPE
        ratio = self.class_ratio(cls)
        if ratio is not None:
            return traced * ratio, BY_CLASS
        return traced * self.device_ratio(), BY_DEVICE

    def class_ratio(self, cls: str) -> float | None:
        """The target's over the source's time for the class: over the points both profiles have (same
        op, dtype and shape), their summed times (the kernels that take the time weigh the most); else
        the ratio of the two profiles' median throughputs; None where either has no point."""
        if cls not in self._class_ratios:
            assert self.source is not None
            self._class_ratios[cls] = _paired(self.source.ops.get(cls, ()), self.target.ops.get(cls, ()))
            if self._class_ratios[cls] is None:
                ra, rb = self.source.class_rate(cls), self.target.class_rate(cls)
                self._class_ratios[cls] = ra / rb if ra and rb else None
        return self._class_ratios[cls]

    def device_ratio(self) -> float:
        """The target's over the source's time over every point both profiles have; else the median
        of the classes' ratios; else 1."""
        if self._device_ratio is None:
            assert self.source is not None
            source, target = self.source, self.target
            both = set(source.ops) & set(target.ops)
            paired = _paired(
                [p for c in both for p in _tagged(c, source.ops[c])],
                [p for c in both for p in _tagged(c, target.ops[c])],
            )
            ratios = [r for c in both if (r := self.class_ratio(c)) is not None]
            self._device_ratio = paired or (statistics.median(ratios) if ratios else 1.0)
        return self._device_ratio

    def _gpu_gaps(self, exact: dict[int, float]) -> None:
        """Each GPU op (every entry so far) also holds the GPU for the profile's ``kernel_gap_us``."""
        gap = self.target.kernel_gap_us
        self.summary.gpu_ops = len(exact)
        if not gap:
            return
        self.summary.kernel_gap_us = gap
        for key in exact:
            exact[key] += gap

    def _host(self, nodes: list[Any], exact: dict[int, float]) -> None:
        summary, target = self.summary, self.target
        host = [n for n in nodes if n.cpu and id(n) not in exact]
        summary.host_events = sum(1 for n in host if self.host_kinds.get(id(n)) in (HOST, RUNTIME))
        summary.host_traced_us = float(sum(n.dur for n in host))
        if target.host_op_us is None or target.host_launch_us is None:
            return
        costs = {HOST: target.host_op_us, RUNTIME: target.host_launch_us}
        for n in host:
            exact[id(n)] = costs.get(self.host_kinds.get(id(n), -1), 0.0)
        summary.host_whatif_us = sum(exact[id(n)] for n in host)

    def _warn(self) -> None:
        s = self.summary
        kept = s.totals(TRACED)
        if kept.kernels and self.source is None:
            s.warnings.append(
                f"`device_profile`: {kept.kernels:,} kernel(s) ({kept.traced_us / 1e3:,.3f} ms) keep their traced "
                f"times: no launching op with recorded shapes, and {s.profile} has no point or roofline for them "
                "(right for a what-if of the GPU the trace was captured on; for another GPU give `source_profile`)"
            )
        scaled = {m: s.totals(m) for m in (BY_CLASS, BY_DEVICE)}
        if any(t.kernels for t in scaled.values()):
            ways = {
                BY_CLASS: "the two profiles' ratio for the class of the op around the launch",
                BY_DEVICE: f"x{self.device_ratio():.3g}, the two profiles' ratio over all their points",
            }
            how = "; ".join(f"{t.kernels:,} {m} ({ways[m]})" for m, t in scaled.items() if t.kernels)
            s.warnings.append(
                f"`device_profile`: kernel(s) without shapes were scaled from {s.source} to {s.device} "
                f"without their shapes: {how}; record shapes (record_shapes=True) for a what-if by shape"
            )
        if s.host_whatif_us is None:
            s.warnings.append(
                f"`device_profile`: {s.profile} has no host costs: the host keeps its traced time "
                f"({s.host_traced_us / 1e3:,.3f} ms, tracing overhead included)"
            )


def _named_class(around: list[Event]) -> str:
    """The class of the innermost ``aten::`` op open around a launch that recorded no shapes (its
    name tells the class: ``aten::mm`` is a matmul); ``NO_OP`` where there is none."""
    for event in around:
        if event.name.startswith("aten::"):
            cls = op_class(event.name)
            return NO_OP if cls is OpClass.NONE else cls.value
    return NO_OP


def _tagged(cls: str, points: Sequence[Point]) -> list[Point]:
    """Points with their class in the op name, so that two classes' points never pair."""
    return [Point(p.dtype, p.shape, p.us, p.count, f"{cls}:{p.op}") for p in points]


def _paired(source: Sequence[Point], target: Sequence[Point]) -> float | None:
    """Summed target over summed source time over the points both have (op, dtype, shape)."""
    times = {(p.op, p.dtype, p.shape): p.us for p in source}
    pairs = [(times[p.op, p.dtype, p.shape], p.us) for p in target if (p.op, p.dtype, p.shape) in times]
    if not pairs or sum(a for a, _ in pairs) <= 0:
        return None
    return sum(b for _, b in pairs) / sum(a for a, _ in pairs)


def key_of(op: Event) -> OpKey | str:
    """The profile's key of a launching op from its recorded shapes, or why there is none."""
    dims, types = op.args.input_dims, op.args.input_type
    if not isinstance(dims, list) or not isinstance(types, list):
        return "launching op without recorded shapes"
    return op_key(op.name, dims, kineto_types(types))


def _round_chains(nodes: list[Any], exact: dict[int, float]) -> None:
    """Whole microseconds, each chain rounded on its running sum (the host timeline one chain, the
    GPU nodes one): the sums stay within half a microsecond of the exact ones."""
    sums: dict[bool, float] = defaultdict(float)
    for node in nodes:
        time = exact.get(id(node))
        if time is None:
            continue
        chain = bool(node.cpu)
        before = sums[chain]
        sums[chain] = before + max(0.0, time)
        node.dur = max(0, round(sums[chain]) - round(before))
