"""One rank's memory over the traced step: the peak, what held it, a timeline; and its sidecar file.

Sources, best first:

* ``kineto``: Kineto's ``[memory]`` events (every allocation and free of the window, in time
  order) on top of the bytes the step found live. On CPU, Kineto does not report those ("Total
  Allocated" counts only what was allocated while profiling): they come from the host trace's
  pre-existing storages (``host.py``), and without a host trace they are unknown
  (``kineto-only``: a lower bound, said so). A CUDA allocator's "Total Allocated" counts them:
  its total is kept, and the host trace only says what they are.
* ``host``: the host trace's tensors alone: each storage live from the node that made it to
  the last node that used it (what an allocator frees later, or the temporaries inside an op,
  it cannot see).

The facts travel beside a converted rank as ``PREFIX.<rank>.memory.json`` (a sidecar: the
``.et`` files stay byte-identical to the reference's), and ``scale`` writes the new job's
(``whatif.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import TraceContentError, TraceFormatError
from ..io import read_side_input
from .host import CATEGORIES, HostTensors
from .kineto import BACKWARD, COMMUNICATION, FORWARD, OPTIMIZER, KinetoMemory

SIDECAR_SUFFIX = ".memory.json"
FORMAT = "chakra-convert-fast memory 1"
_MAX_POINTS = 2000

#: What is missing, and how to capture it.
NO_MEMORY_FACTS = (
    "no memory events and no host trace tensors: capture with Kineto's profile_memory=True "
    "(chakra-profile --profile-memory) or with the host execution trace (ExecutionTraceObserver)"
)


@dataclass
class RankMemory:
    """One rank's memory; ``timeline`` is (x, bytes) with x in ms from the window's start
    (``kineto``) or the step's fraction (``host``)."""

    rank: int
    source: str
    device: str
    peak_bytes: int
    at_peak: dict[str, int]
    baseline: dict[str, int]
    timeline: list[tuple[float, int]] = field(default_factory=list)
    timeline_unit: str = "ms"
    notes: list[str] = field(default_factory=list)
    scaled_from: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["timeline"] = [[round(x, 4), b] for x, b in self.timeline]
        return out


def _sampled(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """At most ``_MAX_POINTS`` points, each bucket's highest kept (the peak survives)."""
    if len(points) <= _MAX_POINTS:
        return points
    step = len(points) / _MAX_POINTS
    out = []
    for i in range(_MAX_POINTS):
        bucket = points[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)]
        out.append(max(bucket, key=lambda p: p[1]))
    return out


def from_kineto(rank: int, kineto: KinetoMemory, host: HostTensors | None) -> RankMemory:
    """The peak over the window: the bytes live as it began plus the running sum of Kineto's
    allocations and frees. A free of a block allocated before the window: on CUDA it comes off
    the baseline, as it comes off the allocator's "Total Allocated" (so the running sum is that
    count, to the byte); on CPU it is left out, as Kineto's "Total Allocated" never had it."""
    events = kineto.events
    freed_at: dict[int, tuple[float, str]] = {}  # event index -> time and phase of its free
    open_allocs: dict[int, int] = {}
    for i, e in enumerate(events):
        if e.nbytes > 0:
            open_allocs[e.addr] = i
        elif e.nbytes < 0 and e.addr in open_allocs:
            freed_at[open_allocs.pop(e.addr)] = (e.ts, e.phase)

    def category(i: int) -> str:
        """By the phases that made and freed it: what the optimizer frees (``zero_grad``) or
        nothing frees is a gradient, where the backward pass or a collective (FSDP's
        reduce-scatter) made it."""
        e = events[i]
        free_phase = freed_at.get(i, (0.0, ""))[1] if i in freed_at else ""
        kept = free_phase in ("", OPTIMIZER)
        if e.phase == FORWARD:
            return "activations"
        if e.phase == BACKWARD:
            if free_phase == COMMUNICATION:
                return "communication"  # FSDP: the whole gradient a reduce-scatter takes in
            return "gradients" if kept else "activations"
        if e.phase == OPTIMIZER:
            return "optimizer"
        return "gradients" if kept else "communication"

    base = _window_baseline(events, host)
    start = sum(base.values())
    counted = bool(events) and events[0].total > events[0].nbytes  # the allocator's total counts the baseline
    live: dict[int, tuple[int, str]] = {}  # addr -> (bytes, category)
    by_cat = dict.fromkeys(CATEGORIES, 0)
    total = peak_run = 0
    gone = gone_at_peak = 0  # bytes of blocks allocated before the window and freed in it
    at_peak = dict(by_cat)
    t0 = events[0].ts if events else 0.0
    points: list[tuple[float, int]] = [(0.0, start)]
    for i, e in enumerate(events):
        if e.nbytes > 0:
            cat = category(i)
            live[e.addr] = (e.nbytes, cat)
            by_cat[cat] += e.nbytes
            total += e.nbytes
        elif e.nbytes < 0 and e.addr in live:
            nbytes, cat = live.pop(e.addr)
            by_cat[cat] -= nbytes
            total -= nbytes
        elif e.nbytes < 0 and counted:
            gone -= e.nbytes  # counted in the baseline: a CUDA allocator's total lets go of it too
        else:
            continue
        points.append(((e.ts - t0) / 1e3, start - gone + total))
        if total - gone > peak_run:
            peak_run, at_peak, gone_at_peak = total - gone, dict(by_cat), gone
    held = {c: base.get(c, 0) + at_peak.get(c, 0) for c in CATEGORIES}
    for c in ("other", "activations", "communication", "gradients", "optimizer", "parameters"):
        freed = min(held[c], gone_at_peak)  # what the window freed of the baseline, the least lasting first
        held[c] -= freed
        gone_at_peak -= freed
    notes = []
    source = "kineto"
    if host is None and not (events and events[0].total > events[0].nbytes):
        source = "kineto-only"
        notes.append(
            "no host trace: the bytes live before the traced window (parameters, optimizer state) "
            "are not in Kineto's memory events, so this peak is a lower bound; convert with the "
            "host trace for them"
        )
    elif host is None and base["other"] > 0:
        notes.append(
            f"no host trace: the {base['other'] / (1 << 20):,.1f} MiB live before the traced window are counted "
            "(the allocator's own total) but not named: they are filed as other, parameters and optimizer state "
            "among them; convert with the host trace to split them"
        )
    device = "cuda" if kineto.device_type == 1 else "cpu"
    return RankMemory(rank, source, device, start + peak_run, held, base, _sampled(points), "ms", notes)


def _window_baseline(events: list[Any], host: HostTensors | None) -> dict[str, int]:
    """The bytes live as the window began, by category. A CUDA allocator's "Total Allocated"
    counts them (the first event's total less its own bytes): that total is kept, split as the
    host trace's pre-existing storages say, the rest "other". The CPU's counts only what the
    window allocated (that difference is 0): the host trace's storages are all there is."""
    base = host.baseline() if host is not None else dict.fromkeys(CATEGORIES, 0)
    known = events[0].total - events[0].nbytes if events else 0
    if known <= 0:
        return base
    out = dict.fromkeys(CATEGORIES, 0)
    left = known
    for cat in ("parameters", "optimizer", "gradients", "communication", "activations", "other"):
        out[cat] = min(base.get(cat, 0), left)
        left -= out[cat]
    out["other"] += left
    return out


def from_host(rank: int, host: HostTensors) -> RankMemory:
    points, peak, at_peak = host.timeline()
    return RankMemory(
        rank,
        "host",
        "cuda" if host.device.startswith("cuda") else "cpu",
        peak,
        at_peak,
        host.baseline(),
        _sampled(points),
        "step",
        [
            "from the host trace's tensors (no Kineto memory events): each storage lives from the "
            "op that made it to the last op that used it; temporaries inside an op and the "
            "allocator's own timing are not seen (capture with profile_memory=True for the events)"
        ],
    )


def sidecar_path(prefix: str, rank: int) -> str:
    return f"{prefix}.{rank}{SIDECAR_SUFFIX}"


def et_sidecar_path(et_path: str) -> str:
    """``PREFIX.<r>.et`` -> ``PREFIX.<r>.memory.json``; any other name -> ``NAME.memory.json``."""
    stem = et_path[: -len(".et")] if et_path.endswith(".et") else et_path
    return stem + SIDECAR_SUFFIX


def encode(memory: RankMemory) -> bytes:
    return (json.dumps({"format": FORMAT, **memory.as_json()}) + "\n").encode("utf-8")


def read_sidecar(path: str) -> RankMemory:
    try:
        raw = json.loads(read_side_input(path, "memory file"))
        if raw.get("format") != FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {FORMAT!r}")
        return RankMemory(
            int(raw["rank"]),
            str(raw["source"]),
            str(raw["device"]),
            int(raw["peak_bytes"]),
            {str(k): int(v) for k, v in raw["at_peak"].items()},
            {str(k): int(v) for k, v in raw["baseline"].items()},
            [(float(x), int(b)) for x, b in raw.get("timeline", [])],
            str(raw.get("timeline_unit", "ms")),
            [str(n) for n in raw.get("notes", [])],
            raw.get("scaled_from"),
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise TraceFormatError(path, f"not a memory file of this tool: {exc}") from None


def check_rank(path: str, memory: RankMemory, rank: int) -> None:
    if memory.rank != rank:
        raise TraceContentError(path, f"holds rank {memory.rank}'s memory, not rank {rank}'s")
