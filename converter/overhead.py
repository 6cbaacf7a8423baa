"""The profiler's own time, taken out of a trace's host timeline (``--tracing-overhead``).

A traced step is slower than the step the job runs: every op the profiler records runs its entry
and exit callbacks (the ExecutionTraceObserver's, ``record_shapes``', Kineto's CPU activity) on
the thread that runs the op, so each recorded op's time, and the time between ops, holds the
profiler's work. ``simulate --replay`` reproduces the *traced* step unless that time is removed.

The correction is a cost per recorded host op (``per_op_us``) and per runtime call (Kineto's
``cuda_runtime``/``cuda_driver`` events, ``per_call_us``). It is taken out of the host timeline
in order, as a running debt (``untrace``): each recorded op adds its cost, and each CPU node from
there on (the op's own time, the gaps and the parent's time after it) pays what it can, down to
zero (a host trace's ops down to 1 us, ``convert/untrace.py``); a wait for the GPU forgives the
debt.
GPU kernels, memcpys and memsets keep their traced durations (CUPTI's timing), and so do the
waits for the GPU and communication: where the GPU waited for the host, the shorter host path
brings the launches, and so the kernels, earlier through the dependencies.

Where the figure comes from (``choose``), first found first:

1. ``--tracing-overhead US``: the user's own figure, microseconds per recorded op;
2. a calibration ``chakra-profile`` measured in the same run, beside the trace
   (``{name}_rank{N}_overhead.json``, ``calibration_path``; a Kineto trace's or a host trace's):
   the traced step's time and the median untraced step's. On a GPU the front end estimates its
   graph's step as ASTRA-sim replays it (``critical_path``: one CPU, one GPU, one communication
   node at a time) and finds the per-op cost at which that estimate comes down to the untraced
   step: the profiler's time that was on the step's critical path, where a share of it hidden
   behind the GPU counts for nothing. A CPU capture's host path gives its CPU ops the rank's
   untraced step outside its collectives (``convert/untrace.py``). Either lands the replay on the
   untraced step by construction (the same run's number): ``docs/overhead.md`` says what that
   proves and what it does not;
3. on the host path, the cost measured in the trace itself (``measured``, from
   ``convert/selfmeasure.py``): a multiple of what its view-family ops spent around the one op
   each wraps, one recorded op's worth of the profiler's time on the trace's own machine and run;
4. the default model for the tracing the trace records (``DEFAULT_MODELS``): fitted to this
   project's H200 captures (``docs/overhead.md`` says how, and its error there and, held out, on
   the H100 captures).

``--tracing-overhead none`` keeps the traced replay.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .errors import TraceContentError

#: ``--tracing-overhead``'s word for the default (a calibration beside the trace, else the model)
AUTO = "auto"
#: ``--tracing-overhead``'s word for the traced replay (nothing removed)
NONE = "none"
#: A calibration file's suffix beside the trace's ``{name}_rank{N}_{host,device}.json[.gz]``
CALIBRATION_SUFFIX = "_overhead.json"
CALIBRATION_SCHEMA = "chakra-profile-overhead.1"
_HINT = "fix or remove it, or set `tracing_overhead` to none or a figure in microseconds"
_TRACE_NAME = re.compile(r"^(?P<stem>.+_rank\d+)_(host|device)\.json(\.gz)?$")
#: The default models' figures (``DEFAULT_MODELS``), microseconds per recorded op
HOST_PER_OP_US = 23.0
KINETO_PER_OP_US = 2.3
#: The measured model (``measured``): the profiler's cost per op of a host trace, this many times
#: the mean exclusive time of its view-family wrappers (``convert/selfmeasure.py``); chosen on the
#: H200's host + Kineto captures, where the H100's would have chosen nearly the same (``docs/overhead.md``)
MEASURED_FACTOR = 1.05
#: How far off each figure may be (``Model.spread``: that many times more, or less), from what each
#: committed capture wants of it: the measured factor 1.0-1.12 around its 1.05; the default models'
#: figures 0.6-7.4 us (Kineto alone) and 9.3-23.7 us (host) per op, around 2.3 and 23
#: (``docs/overhead.md``)
MEASURED_SPREAD = 1.1
DEFAULT_SPREAD = 3.0
#: A step estimate that moves more than this either way within the figure's spread is said to be
#: uncertain (``Removed.line``)
UNCERTAIN = 0.05
#: How a measured model's source begins (``Model.source``)
MEASURED_SOURCE = "measured in the trace"
#: Which correction a model is (``Model.kind``): the calibration's, measured in the trace, a default
#: model's, the user's figure
CALIBRATED, MEASURED, DEFAULT, USER = "calibrated", "measured", "default", "user"
#: Fewer wrappers than this measure nothing (the default model is used)
MEASURED_MIN_SAMPLES = 50
#: A wrapper that took more than this many times their median was descheduled (a loaded CPU host:
#: 4-9 ms among 10 us ones), not held by the profiler: left out of the mean
MEASURED_OUTLIER = 10.0


@dataclass(frozen=True)
class Tracing:
    """The tracing a trace records: the host execution trace (the observer) and shapes."""

    observer: bool
    record_shapes: bool

    def describe(self) -> str:
        return ("host trace + Kineto" if self.observer else "Kineto alone") + (
            ", record_shapes" if self.record_shapes else ""
        )


@dataclass(frozen=True)
class Model:
    """Microseconds of profiler time per recorded host op and per recorded runtime call; or, from
    a calibration, the host time to take out of the step (``target_us``: the traced step less the
    untraced one), the per-op cost that removes it found on the timeline (``untrace``), and the
    untraced step itself (``untraced_us``): where a front end can estimate the step from its graph,
    the per-op cost that brings that estimate down to it."""

    per_op_us: float
    per_call_us: float
    source: str  # where the figure comes from, for the one-line message
    target_us: float | None = None
    traced_us: float | None = None  # a calibration's traced step (us)
    untraced_us: float | None = None  # a calibration's untraced step (us): the step to land on
    by_thread: Mapping[int, float] | None = None  # a measured model's cost per op, by thread
    spread: float | None = None  # how far off the figure may be: this many times more, or less (not a calibration's)
    kind: str = USER  # CALIBRATED, MEASURED, DEFAULT or USER: which correction it is

    def cost(self, runtime: bool) -> float:
        return self.per_call_us if runtime else self.per_op_us


#: The default per-op model for each tracing (``docs/overhead.md``): torch 2.11 on an H200 host,
#: fitted to the committed captures' untraced steps. Host trace + Kineto: the observer and
#: ``record_shapes`` (per op of the host trace); Kineto alone: per recorded event (``cpu_op``,
#: ``user_annotation`` and runtime call alike).
DEFAULT_MODELS: dict[Tracing, tuple[float, float]] = {
    Tracing(observer=True, record_shapes=True): (HOST_PER_OP_US, 0.0),
    Tracing(observer=True, record_shapes=False): (HOST_PER_OP_US, 0.0),
    Tracing(observer=False, record_shapes=True): (KINETO_PER_OP_US, KINETO_PER_OP_US),
    Tracing(observer=False, record_shapes=False): (KINETO_PER_OP_US, KINETO_PER_OP_US),
}


def parse(text: str) -> str | float:
    """``--tracing-overhead``: ``auto``, ``none`` or microseconds per recorded op (>= 0)."""
    word = text.strip().lower()
    if word in (AUTO, NONE):
        return word
    try:
        value = float(word.removesuffix("us"))
    except ValueError:
        raise ValueError(f"{text!r}: give auto, none, or microseconds per recorded op (e.g. 12.5)") from None
    if not 0 <= value < 1e6:
        raise ValueError(f"{text!r}: microseconds per recorded op are 0 or more")
    return value


def calibration_path(trace: str | os.PathLike[str]) -> Path | None:
    """``{name}_rank{N}_overhead.json`` beside ``{name}_rank{N}_{host,device}.json[.gz]``, if the
    trace is named so (``chakra-profile``'s names)."""
    path = Path(trace)
    match = _TRACE_NAME.match(path.name)
    return path.with_name(match["stem"] + CALIBRATION_SUFFIX) if match else None


def calibration(rank: int, step_times_s: list[float], phases: list[str], **facts: Any) -> dict[str, Any] | None:
    """What ``chakra-profile`` stores beside a rank's traces: the traced step's time and the median
    of its untraced ones (the first step, which pays for lazy initialisation, left out), measured
    in the same run; None without both."""
    untraced = [t for i, (t, p) in enumerate(zip(step_times_s, phases, strict=True)) if i and p in ("wait", "untraced")]
    traced = [t for t, p in zip(step_times_s, phases, strict=True) if p == "active"]
    if not untraced or not traced:
        return None
    return {
        "schema": CALIBRATION_SCHEMA,
        "rank": rank,
        "traced_step_us": round(statistics.median(traced) * 1e6, 1),
        "untraced_step_us": round(statistics.median(untraced) * 1e6, 1),
        "untraced_steps": len(untraced),
        **facts,
    }


def read_calibration(path: Path) -> Model | None:
    """The calibration stored at ``path``, if it is there; one that is there but unreadable is
    refused (``TraceContentError``)."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TraceContentError(str(path), f"not a readable tracing-overhead calibration ({exc})", hint=_HINT) from None
    if not isinstance(data, dict) or data.get("schema") != CALIBRATION_SCHEMA:
        raise TraceContentError(
            str(path), f"not a tracing-overhead calibration (schema {CALIBRATION_SCHEMA})", hint=_HINT
        )
    traced: Any = data.get("traced_step_us")
    untraced: Any = data.get("untraced_step_us")
    if not all(type(v) in (int, float) and 0 < v < 1e12 for v in (traced, untraced)):
        raise TraceContentError(str(path), "traced_step_us/untraced_step_us are not microseconds", hint=_HINT)
    target = max(0.0, float(traced) - float(untraced))
    source = f"calibrated in the same run, {path.name}"
    return Model(0.0, 0.0, source, target, traced_us=float(traced), untraced_us=float(untraced), kind=CALIBRATED)


def measured(by_thread: Mapping[int, Sequence[int]], factor: float = MEASURED_FACTOR) -> Model | None:
    """The cost per op measured in a host trace: ``factor`` times the mean exclusive time (us) of
    its view-family wrappers (``convert/selfmeasure.py``), by thread (``by_thread``: thread ->
    samples; a thread with too few gets the figure of all); None with too few in all."""
    pooled = [s for samples in by_thread.values() for s in samples]
    if len(pooled) < MEASURED_MIN_SAMPLES:
        return None
    mean = _mean_of(pooled)
    enough = {t: samples for t, samples in by_thread.items() if len(samples) >= MEASURED_MIN_SAMPLES}
    own = {t: (len(samples), _mean_of(samples)) for t, samples in enough.items()}
    if len(own) > 1:
        said = " and ".join(f"{m:.3g} us ({count:,})" for count, m in sorted(own.values(), reverse=True))
        costs = {t: factor * own[t][1] if t in own else factor * mean for t in by_thread}
    else:
        said, costs = "", None
    source = f"{MEASURED_SOURCE}: {factor:g} x what its view-family ops spent around the op each wraps, " + (
        f"by thread: {said}" if said else f"{mean:.3g} us ({len(pooled):,})"
    )
    return Model(factor * mean, 0.0, source, by_thread=costs, spread=MEASURED_SPREAD, kind=MEASURED)


def _mean_of(samples: Sequence[int]) -> float:
    """The samples' mean, those beyond ``MEASURED_OUTLIER`` times their median left out."""
    bound = MEASURED_OUTLIER * statistics.median(samples)  # the thread descheduled: not the profiler
    return statistics.fmean(s for s in samples if s <= bound)


def choose(
    setting: str | float,
    tracing: Tracing,
    trace: str | os.PathLike[str] | None,
    measure: Callable[[], Model | None] | None = None,
) -> Model | None:
    """The model ``setting`` (``--tracing-overhead``) picks for a trace; None keeps it traced.
    ``trace``: where to look for a calibration beside it (None: none is used); ``measure``: the
    figure the trace measures of itself (``measured``), if the front end can, before the default."""
    if setting == NONE:
        return None
    if isinstance(setting, float):
        return Model(setting, setting, "--tracing-overhead", kind=USER)
    found = calibration_path(trace) if trace is not None else None
    if found is not None:
        calibrated = read_calibration(found)
        if calibrated is not None:
            return calibrated
    found_model = measure() if measure is not None else None
    if found_model is not None:
        return found_model
    op, call = DEFAULT_MODELS[tracing]
    return Model(op, call, f"default model for {tracing.describe()}", spread=DEFAULT_SPREAD, kind=DEFAULT)


@dataclass
class Removed:
    """What the correction took out."""

    model: Model
    ops: int = 0  # recorded host ops
    calls: int = 0  # recorded runtime calls
    removed_us: float = 0.0  # host time taken out
    host_us: float = 0.0  # host time before
    #: the step estimate (us) at the figure, and at the figure's spread either way (its least and
    #: its most: more per op, less step), where the front end estimates the step (a GPU capture's)
    step_us: tuple[float, float, float] | None = None

    def uncertain(self) -> bool:
        """Whether the step estimate moves more than ``UNCERTAIN`` either way within the figure's
        spread (``Model.spread``): the replay is only as good as the figure."""
        if self.step_us is None or not self.step_us[0]:
            return False
        at, least, most = self.step_us
        return max(at - least, most - at) > UNCERTAIN * at

    def line(self) -> str:
        """The one line the conversion says."""
        m = self.model
        counted = f"{self.ops:,} recorded ops" + (f" and {self.calls:,} runtime calls" if self.calls else "")
        if m.by_thread and len(set(m.by_thread.values())) > 1:
            per = f"{min(m.by_thread.values()):.3g}-{max(m.by_thread.values()):.3g} us each, by thread"
        elif not self.calls or m.per_call_us == m.per_op_us:
            per = f"{m.per_op_us:.3g} us each"
        else:
            per = f"{m.per_op_us:.3g} us per op, {m.per_call_us:.3g} us per runtime call"
        return (
            f"tracing overhead: removed {self.removed_us / 1000:,.1f} ms of {self.host_us / 1000:,.1f} ms host time "
            f"({counted} x {per}; {m.source}); --tracing-overhead none keeps the traced durations" + self._range()
        )

    def _range(self) -> str:
        if not self.uncertain() or self.step_us is None or self.model.spread is None:
            return ""
        at, least, most = self.step_us
        per, spread = self.model.per_op_us, self.model.spread
        return (
            f"; uncertain: the step comes to {at / 1000:,.1f} ms, {least / 1000:,.1f}-{most / 1000:,.1f} ms for "
            f"{per / spread:.3g}-{per * spread:.3g} us per op (as far off as this model has been on the committed "
            "captures; the host is on the step's critical path): give your figure, or capture with chakra-profile, "
            "whose calibration is used"
        )


#: What a node of the host timeline is to the correction (``untrace``)
OP, CALL, GAP, WAIT = 0, 1, 2, 3


class Debt:
    """The running debt over a host timeline, walked in order: ``charge`` at each recorded op (its
    cost), ``pay`` at each CPU node from there on (the op's own, the gaps and its parent's time
    after it), which gives up what it can of its duration, down to zero."""

    def __init__(self, model: Model) -> None:
        self.removed = Removed(model)
        self.owed = 0.0

    def charge(self, runtime: bool, cost: float | None = None) -> None:
        """A recorded op (or runtime call): the model's cost, or ``cost`` where given."""
        model = self.removed.model
        if runtime:
            self.removed.calls += 1
        else:
            self.removed.ops += 1
        self.owed += model.cost(runtime) if cost is None else cost

    def forgive(self) -> None:
        """The host waited for the GPU here: what is still owed was no time on the critical path."""
        self.owed = 0.0

    def pay(self, duration: int, floor: int = 0) -> int:
        """The node's new duration (whole microseconds, as written), ``floor`` at least (where it
        had that much)."""
        self.removed.host_us += duration
        paid = max(0, min(duration - floor, int(self.owed)))
        self.owed -= paid
        self.removed.removed_us += paid
        return duration - paid


def untrace(
    timeline: Sequence[tuple[int, int]],
    model: Model,
    op_floor: int = 0,
    step: Callable[[Sequence[int]], float] | None = None,
    costs: Sequence[float] | None = None,
) -> tuple[list[int], Removed]:
    """The host timeline's new durations, and what was removed: ``timeline`` is (duration in us,
    ``OP``/``CALL``/``GAP``/``WAIT``) in order; a ``WAIT`` keeps its duration and forgives the
    debt; an ``OP`` keeps ``op_floor`` of its duration. A calibrated model (its ``target_us``)
    gets the per-op cost that takes that much off the host time, or, where ``step`` estimates the
    step from the timeline's durations (``critical_path``), the cost at which the estimate comes
    down to the calibration's untraced step (found by bisection: both grow with the cost), or as
    near as the trace allows (the GPU's own time is a floor). ``costs``: each recorded op's own
    cost, for a model that is not calibrated (a measured model's, by thread)."""
    if model.target_us is None:
        durations, removed = _walk(timeline, model, op_floor, costs)
        if step is not None and model.spread:
            removed.step_us = (step(durations), *_steps_within(timeline, model, op_floor, step, costs))
        return durations, removed
    target = model.target_us
    if step is None or model.untraced_us is None:

        def shortened(cost: float) -> float:
            return _walk(timeline, _per_op(model, cost), op_floor)[1].removed_us

    else:
        traced = step([duration for duration, _ in timeline])
        target = max(0.0, traced - model.untraced_us)

        def shortened(cost: float) -> float:
            return traced - step(_walk(timeline, _per_op(model, cost), op_floor)[0])

    ops = sum(1 for _, kind in timeline if kind == OP)
    most = shortened(_NO_LIMIT_US)  # everything a node can give taken out
    goal = min(target, most - _TOLERANCE_US)
    if goal <= 0:  # nothing to take off (a GPU-bound step, or one already at the untraced step)
        return _walk(timeline, _per_op(model, 0.0), op_floor)
    low, high = 0.0, max(target / max(ops, 1), 1e-3)
    while shortened(high) < goal and high < _NO_LIMIT_US:
        high *= 2
    while high - low > _PRECISION_US:
        middle = (low + high) / 2
        if shortened(middle) < goal:
            low = middle
        else:
            high = middle
    return _walk(timeline, _per_op(model, high), op_floor)


#: A cost per op no node can pay (the bound of the search), and how near a step estimate must come
_NO_LIMIT_US = 1e7
_TOLERANCE_US = 1.0
#: how near the cost per op found is to the exact one (a thousandth of a microsecond a recorded op)
_PRECISION_US = 1e-3


def critical_path(
    durations: Sequence[int], deps: Sequence[Sequence[int]], resources: Sequence[int]
) -> Callable[[Sequence[int], Sequence[int]], float]:
    """A step estimate as ASTRA-sim replays a graph (``docs/overhead.md``): nodes in a topological
    order (``deps``: earlier positions), each starting when its dependencies have ended and its
    resource (``resources``: one CPU, one GPU compute, one communication per NPU, as
    ``HardwareResource`` holds them) is free. The function returned takes new durations for the
    positions ``at`` and gives the step's end (us)."""
    frozen = [tuple(d) for d in deps]

    def estimate(at: Sequence[int], new: Sequence[int]) -> float:
        dur = list(durations)
        for position, value in zip(at, new, strict=True):
            dur[position] = value
        end = [0] * len(dur)
        free = [0, 0, 0, 0]
        for i, (before, resource) in enumerate(zip(frozen, resources, strict=True)):
            ready = max([end[d] for d in before], default=0)
            finish = max(ready, free[resource]) + dur[i]
            free[resource] = finish
            end[i] = finish
        return float(max(end, default=0))

    return estimate


def _steps_within(
    timeline: Sequence[tuple[int, int]],
    model: Model,
    op_floor: int,
    step: Callable[[Sequence[int]], float],
    costs: Sequence[float] | None,
) -> tuple[float, float]:
    """The step estimate with every cost ``model.spread`` times more and less: (least, most)."""
    out = []
    spread = model.spread or 1.0
    for scale in (spread, 1 / spread):
        scaled = replace(model, per_op_us=model.per_op_us * scale, per_call_us=model.per_call_us * scale)
        each = None if costs is None else [cost * scale for cost in costs]
        out.append(step(_walk(timeline, scaled, op_floor, each)[0]))
    return out[0], out[1]


def _per_op(model: Model, cost: float) -> Model:
    return replace(model, per_op_us=cost, per_call_us=cost)


def _walk(
    timeline: Sequence[tuple[int, int]], model: Model, op_floor: int, costs: Sequence[float] | None = None
) -> tuple[list[int], Removed]:
    debt = Debt(model)
    out = []
    for i, (duration, kind) in enumerate(timeline):
        if kind == WAIT:
            debt.forgive()
            out.append(duration)
            continue
        if kind != GAP:
            debt.charge(kind == CALL, None if costs is None else costs[i])
        out.append(debt.pay(duration, op_floor if kind == OP else 0))
    return out, debt.removed
