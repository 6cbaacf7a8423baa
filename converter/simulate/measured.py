"""The measured step a ``.et`` file records, to hold a replay against, and which one it is.

A Kineto conversion (``kineto/write.py``, schema ``kineto-replay.*``) writes the step it converted
as the GlobalMetadata's ``start_ts`` (the ProfilerStep's start) and ``finish_ts`` (the later of its
end and the end of the GPU work it launched), in microseconds: the *traced* step is their
difference. Both front ends (the Kineto one, and the host path with ``--astra-sim``) also write
what the replay is to be judged against (``baseline.py``): whether the profiler's time was taken
out, and the *untraced* step of the same run where a calibration was beside the trace.

A replay whose profiler time was taken out is held against the untraced step where it is known;
against the traced step otherwise, and then a line says so (``note``): the "error" is then
mostly the tracing's share. ``--tracing-overhead none`` kept the traced durations: the traced
step is then the right comparison. The user's own figure (``simulate --measured-ms``) comes first.
Other files (the reference's host-trace conversions) record no step: nothing is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import baseline as _baseline
from ..baseline import Baseline
from ..errors import ConverterError
from ..et.decode import read_metadata
from ..overhead import UNCERTAIN
from .job import Job

KINETO_SCHEMA_PREFIX = "kineto-replay."
#: What the measured step is: the untraced step of the same run, the traced one, the user's figure
UNTRACED, TRACED, YOURS = "untraced", "traced", "yours"


@dataclass(frozen=True)
class Recorded:
    """What a rank's file records: its traced step (ns; None where not known), whether that is a
    Kineto conversion's ProfilerStep span, and the conversion's baseline note."""

    traced_ns: int | None
    kineto: bool
    baseline: Baseline | None


@dataclass(frozen=True)
class Measured:
    """A rank's step to hold its simulated step against (``ns``, None where none is known) and what
    it is (``kind``), with the traced and untraced steps beside it."""

    ns: int | None
    kind: str
    traced_ns: int | None
    untraced_ns: int | None
    recorded: Recorded | None

    def as_json(self) -> dict[str, Any]:
        return {
            "measured_ns": self.ns,
            "measured_as": self.kind if self.ns else None,
            "traced_ns": self.traced_ns,
            "untraced_ns": self.untraced_ns,
        }


def recorded_steps(job: Job) -> dict[int, Recorded]:
    """rank -> what its file records, for the ranks whose file records a step or a baseline."""
    found: dict[int, Recorded] = {}
    for rank in range(job.ranks):
        try:
            metadata = read_metadata(job.rank_file(rank))
        except (ConverterError, OSError):
            continue
        schema, start, finish = metadata.get("schema"), metadata.get("start_ts"), metadata.get("finish_ts")
        kineto = isinstance(schema, str) and schema.startswith(KINETO_SCHEMA_PREFIX)
        note = _baseline.read(metadata)
        traced: int | None = None
        if kineto and type(start) is int and type(finish) is int and finish >= start:
            traced = (finish - start) * 1000
        elif not kineto and note is not None and note.traced_us is not None:
            traced = round(note.traced_us * 1000)
        if traced is not None or (note is not None and not kineto):
            found[rank] = Recorded(traced, kineto and traced is not None, note)
    return found


def judge(recorded: dict[int, Recorded], ranks: list[int], yours_ns: int | None = None) -> dict[int, Measured]:
    """rank -> the step its replay is held against: ``yours_ns`` (every rank), else the untraced
    step where the profiler's time was taken out and it is known, else the traced step."""
    out: dict[int, Measured] = {}
    for rank in ranks:
        rec = recorded.get(rank)
        note = rec.baseline if rec is not None else None
        traced = rec.traced_ns if rec is not None else None
        untraced = round(note.untraced_us * 1000) if note is not None and note.untraced_us is not None else None
        if yours_ns is not None:
            out[rank] = Measured(yours_ns, YOURS, traced, untraced, rec)
        elif note is not None and note.removed and untraced is not None:
            out[rank] = Measured(untraced, UNTRACED, traced, untraced, rec)
        elif rec is not None:
            out[rank] = Measured(traced, TRACED, traced, untraced, rec)
    return out


def job_measured(measured: dict[int, Measured]) -> Measured | None:
    """The job's: the rank with the longest measured step (else the first with a baseline)."""
    with_step = [m for m in measured.values() if m.ns]
    if with_step:
        return max(with_step, key=lambda m: m.ns or 0)
    return next((m for m in measured.values() if m.recorded is not None and m.recorded.baseline), None)


def traced_said(m: Measured) -> str:
    """Where the traced step comes from."""
    if m.recorded is not None and m.recorded.kineto:
        return "the slowest rank's ProfilerStep to the end of its GPU work, tracing included"
    return "chakra-profile's traced step, tracing included"


def note(measured: dict[int, Measured], what_if: bool = False) -> str | None:
    """The one line a replay needs where its measured step is not the step it should be held
    against: the profiler's time was taken out but no untraced step is known (``what_if``: a
    roofline timed the step, which is then no replay and has no error, only a difference)."""
    m = job_measured(measured)
    if m is None or m.kind != TRACED or m.recorded is None or m.recorded.baseline is None:
        return None
    b = m.recorded.baseline
    if not b.removed:
        return None
    fix = (
        "capture with chakra-profile (its calibration beside the trace gives the untraced step) or give the "
        "untraced step: simulate --measured-ms MS"
    )
    word, this = ("difference", "this what-if's host") if what_if else ("error", "this replay")
    removed = f"{b.removed_us / 1e3:,.3f} ms of profiler time removed ({b.source})"
    if not m.ns:
        return (
            f"no measured step: the files record neither the traced nor the untraced step; {this} has {removed}"
            f"{_estimate(b)}; to see its {word}, {fix}"
        )
    shorter = "" if what_if else ", so it should come out shorter than the traced step"
    said = f"{this} has {removed}{shorter}{_estimate(b)}"
    return f"the {word} is against the traced step, tracing included: {said}; {fix}"


def _estimate(b: Baseline) -> str:
    """What the conversion estimated of its step, and how sure it was (``overhead.Removed``)."""
    if b.estimate_us is None or not b.estimate_us[0]:
        return ""
    at, least, most = b.estimate_us
    if max(at - least, most - at) <= UNCERTAIN * at:
        return f"; the conversion estimated this rank's untraced step at {at / 1e3:,.3f} ms, and was sure of it"
    return (
        f"; the conversion estimated this rank's untraced step at {at / 1e3:,.3f} ms, uncertain: "
        f"{least / 1e3:,.3f}-{most / 1e3:,.3f} ms (the host is on the step's critical path)"
    )
