"""What a replay of a converted step is to be judged against, as the conversion knows it.

A conversion that takes the profiler's time out (``overhead.py``) makes a ``.et`` whose replay
gives the step the job takes *untraced*; the step the trace records is the *traced* one. Holding
the replay against the traced step would call the tracing's share an error. So each front end
writes, beside its other GlobalMetadata notes (``et/encode.NOTE_ATTRS``), the note ``BASELINE``
(a JSON string) and ``simulate`` reads it back (``simulate/measured.py``):

* ``traced_us``: the traced step (a Kineto conversion's ProfilerStep to the end of its GPU work;
  a host-trace conversion's, the calibration's traced step), null where not known;
* ``untraced_us``: the untraced step of the same run (the calibration ``chakra-profile`` wrote
  beside the trace, ``{name}_rank{N}_overhead.json``), null where none is there;
* ``correction``: how the profiler's time was handled: ``calibrated`` (found from that
  calibration), ``measured`` (the figure the host trace measured of itself), ``default`` (the
  default model for the tracing), ``user`` (the user's figure,
  ``--tracing-overhead US``) or ``none`` (``--tracing-overhead none``: traced durations kept);
* ``removed_us``: the host time taken out; ``source``: where the figure came from;
* ``estimate_us``: without a calibration, the conversion's own estimate of its step at its
  figure, and at the figure's spread either way (``overhead.Removed.step_us``).

The reference's own output (``convert`` without ``--astra-sim``) carries no note: its bytes are
pinned by the parity tests.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from . import overhead
from .errors import TraceContentError

#: The GlobalMetadata note's name (a string attribute: JSON)
BASELINE = "replay_baseline"
CALIBRATED, MEASURED, DEFAULT, USER = overhead.CALIBRATED, overhead.MEASURED, overhead.DEFAULT, overhead.USER
NONE = "none"
CORRECTIONS = (CALIBRATED, MEASURED, DEFAULT, USER, NONE)


@dataclass(frozen=True)
class Baseline:
    """What a rank's replay is to be judged against (microseconds; None where not known)."""

    correction: str
    traced_us: float | None = None
    untraced_us: float | None = None
    removed_us: float = 0.0
    source: str = ""
    calibration: str | None = None  # the calibration file's name, where its untraced step is known
    #: without a calibration, the conversion's own estimate of its step (us) at its figure and at
    #: the figure's spread either way (least, most: ``overhead.Removed.step_us``), where it made one
    estimate_us: tuple[float, float, float] | None = None

    def note(self) -> str:
        """The GlobalMetadata note (``BASELINE``)."""
        fields = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        if self.estimate_us is not None:
            fields["estimate_us"] = [round(v, 1) for v in self.estimate_us]
        return json.dumps(fields, separators=(",", ":"))

    @property
    def removed(self) -> bool:
        """Whether the profiler's time was taken out of the replayed durations."""
        return self.correction != NONE


def correction_of(model: overhead.Model | None) -> str:
    """Which correction ``model`` (``overhead.choose``'s; None: the traced durations kept) is."""
    return NONE if model is None else model.kind


def untraced_beside(trace: str | os.PathLike[str] | None) -> tuple[float, float, str] | None:
    """(traced step, untraced step in us, file name) of the calibration beside ``trace``, if one
    is there and readable (a conversion that did not use it, with a figure of the user's or none,
    is not refused for a broken one: its step is then not known)."""
    path = overhead.calibration_path(trace) if trace is not None else None
    if path is None:
        return None
    try:
        found = overhead.read_calibration(path)
    except TraceContentError:
        return None
    if found is None or found.traced_us is None or found.untraced_us is None:
        return None
    return found.traced_us, found.untraced_us, path.name


def of(
    model: overhead.Model | None,
    removed: overhead.Removed | None,
    trace: str | os.PathLike[str] | None,
    traced_us: float | None = None,
) -> Baseline:
    """The baseline of a conversion of ``trace`` that used ``model`` and took ``removed`` out;
    ``traced_us``: the traced step the output records (a Kineto conversion's), else the
    calibration's."""
    found = untraced_beside(trace)
    return Baseline(
        correction=correction_of(model),
        traced_us=traced_us if traced_us is not None else (found[0] if found else None),
        untraced_us=found[1] if found else None,
        removed_us=removed.removed_us if removed is not None else 0.0,
        source=model.source if model is not None else "--tracing-overhead none",
        calibration=found[2] if found else None,
        estimate_us=removed.step_us if removed is not None else None,
    )


def read(metadata: dict[str, Any]) -> Baseline | None:
    """The note in a file's GlobalMetadata; None where it has none, or one that does not parse
    (a file of another version, or edited: nothing is then claimed)."""
    text = metadata.get(BASELINE)
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("correction") not in CORRECTIONS:
        return None
    traced, untraced, removed = data.get("traced_us"), data.get("untraced_us"), data.get("removed_us", 0.0)
    if not all(v is None or (_number(v) and v > 0) for v in (traced, untraced)) or not _number(removed):
        return None
    source, calibration, estimate = data.get("source"), data.get("calibration"), data.get("estimate_us")
    if not (isinstance(estimate, list) and len(estimate) == 3 and all(_number(v) and v >= 0 for v in estimate)):
        estimate = None
    return Baseline(
        correction=data["correction"],
        traced_us=None if traced is None else float(traced),
        untraced_us=None if untraced is None else float(untraced),
        removed_us=max(0.0, float(removed)),
        source=source if isinstance(source, str) else "",
        calibration=calibration if isinstance(calibration, str) else None,
        estimate_us=None if estimate is None else (float(estimate[0]), float(estimate[1]), float(estimate[2])),
    )


def _number(value: Any) -> bool:
    return type(value) in (int, float) and value == value and abs(value) < 1e15
