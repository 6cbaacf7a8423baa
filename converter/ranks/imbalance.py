"""Ranks that differ in compute: measured from the job's files, said in one line, and evened out.

A rank's *compute* is the summed duration of its compute nodes (CPU and GPU, ``COMP_NODE``):
what it does between communications. Captured ranks differ in it (capture noise, a straggler,
uneven data), and a simulation replays the difference: the faster ranks wait in every collective
for the slowest, and every copy of a scaled job copies that wait. ``simulate`` and ``scale`` say
so (``describe``), and ``--ranks-as`` chooses what the job's ranks are replayed as:

- ``captured`` (default): each rank as captured;
- ``slowest``: every rank with the compute of the rank with the most compute;
- ``median``: every rank with the compute of the median rank (the lower median: with two ranks,
  the faster one), a real rank, never an average.

"With the compute of rank K": the n-th compute node of a given name on a rank takes the duration
of the n-th compute node of that name on K (matched by name and occurrence, not by position: the
ranks of one job run the same ops, but their threads interleave differently, so the same op sits
at different places in their files). A node with no counterpart on K keeps its own duration, and
the result says how many there were. Where the ranks' nodes differ a little (a rank with a few
more host gaps than K), the rank's compute nodes are then scaled by one factor so that they add up
to K's compute exactly (rounded cumulatively). Communication nodes, dependencies and every other
attribute stay the rank's own. The job is written to a temporary folder, with its
communicator group and layout files, and removed after.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import OptionError, OutputError
from ..et import wire
from ..et.decode import EtTrace, field_spans, read_et
from ..et.encode import duration
from ..io.read import reason_of
from ..schema.chakra import NodeType
from . import commgroups, discover, layoutscale

RANKS_AS = ("captured", "slowest", "median")
#: Ranks whose compute is this far apart (of the slowest's) are said to differ.
NOTABLE = 0.05
_COMP = int(NodeType.COMP_NODE)
_DURATION_FIELD = 7  # Node.duration_micros


@dataclass(frozen=True)
class Imbalance:
    """Per captured rank, its compute (us); ``replicas``: the ranks are data-parallel replicas
    (not the ranks of a tensor or pipeline layout, ``PREFIX.layout.json``, which do different work
    by design: they are never said to differ, nor evened out)."""

    compute_us: tuple[int, ...]
    replicas: bool = True

    @property
    def slowest(self) -> int:
        return max(range(len(self.compute_us)), key=lambda r: (self.compute_us[r], -r))

    @property
    def fastest(self) -> int:
        return min(range(len(self.compute_us)), key=lambda r: (self.compute_us[r], r))

    @property
    def median(self) -> int:
        """The rank of the lower median compute."""
        value = statistics.median_low(self.compute_us)
        return self.compute_us.index(value)

    @property
    def spread_us(self) -> int:
        return self.compute_us[self.slowest] - self.compute_us[self.fastest]

    @property
    def share(self) -> float:
        """The spread, of the slowest rank's compute."""
        top = self.compute_us[self.slowest]
        return self.spread_us / top if top else 0.0

    @property
    def notable(self) -> bool:
        return self.replicas and len(self.compute_us) > 1 and self.share >= NOTABLE

    def reference(self, how: str) -> int | None:
        """The rank every rank is replayed as (None: ``captured``)."""
        return {"captured": None, "slowest": self.slowest, "median": self.median}[how]

    def describe(self, waiting: tuple[int, int, int] | None = None) -> str:
        """One line; ``waiting``: (rank, ns waiting for peers, its step ns) of the rank that waited
        most in a simulation."""
        c = self.compute_us
        head = (
            f"ranks differ in compute: rank {self.slowest} {c[self.slowest] / 1000:,.3f} ms, rank {self.fastest} "
            f"{c[self.fastest] / 1000:,.3f} ms ({self.share:.1%} apart"
            + (f"; median rank {self.median} {c[self.median] / 1000:,.3f} ms" if len(c) > 2 else "")
            + ")"
        )
        if waiting is not None:
            rank, waited, step = waiting
            head += (
                f"; rank {rank} spends {waited / 1e6:,.3f} ms of its {step / 1e6:,.3f} ms step "
                f"({waited / step if step else 0:.1%}) waiting for peers"
            )
        else:
            head += f"; the faster ranks wait up to {self.spread_us / 1000:,.3f} ms a step for the slowest"
        return head + " (replay every rank alike: `ranks_as` slowest or median)"

    def as_json(self, waiting: tuple[int, int, int] | None, ranks_as: str, lines: list[str]) -> dict[str, Any]:
        """The facts ``describe`` says, for ``simulate``'s JSON (``imbalance``): each rank's compute,
        the slowest, fastest and median ranks, their spread (us and share of the slowest's compute),
        whether that is said (``notable``); ``waiting``: (rank, ns waiting for peers, its step ns) of
        the rank that waited most in the simulation; ``lines``: what was said (none: nothing)."""
        rank, waited, step = waiting if waiting is not None else (None, 0, 0)
        return {
            "compute_us": list(self.compute_us),
            "replicas": self.replicas,
            "slowest_rank": self.slowest,
            "fastest_rank": self.fastest,
            "median_rank": self.median,
            "spread_us": self.spread_us,
            "share": round(self.share, 6),
            "notable": self.notable,
            "waiting": None
            if rank is None
            else {
                "rank": rank,
                "waiting_ns": waited,
                "step_ns": step,
                "share": round(waited / step, 6) if step else 0.0,
            },
            "ranks_as": ranks_as,
            "lines": lines,
        }


def compute_of(trace: EtTrace) -> int:
    return sum(trace.durations[r] for r in range(len(trace)) if trace.types[r] == _COMP)


def measure(paths: Sequence[str], prefix: str | None = None) -> Imbalance:
    """The compute of each rank file (of the job ``prefix``, where given: a layout job's ranks are
    not replicas)."""
    replicas = prefix is None or layoutscale.find(prefix) is None
    return Imbalance(tuple(compute_of(read_et(p)) for p in paths), replicas)


@dataclass(frozen=True)
class RanksAs:
    """What ``ranks_as`` wrote: the new job's prefix, the rank every rank is as, the imbalance it
    evened out, and the compute nodes (over every rank) with no counterpart on that rank."""

    prefix: str
    how: str
    reference: int
    imbalance: Imbalance
    unmatched: int

    def describe(self) -> str:
        c = self.imbalance.compute_us[self.reference]
        scaled = (
            f"; {self.unmatched:,} compute node(s) with no counterpart on it kept their own duration"
            if self.unmatched
            else ""
        )
        return (
            f"`ranks_as` {self.how}: every rank replayed with the compute of rank {self.reference} "
            f"({c / 1000:,.3f} ms){scaled}"
        )


@contextmanager
def ranks_as(prefix: str, how: str, work_dir: str | None = None) -> Iterator[RanksAs]:
    """The job ``PREFIX.<rank>.et`` written with every rank as ``how`` (module docstring) in a
    temporary folder (in ``work_dir``, default the system's), removed on leaving."""
    if how not in RANKS_AS or how == "captured":
        raise ValueError(f"ranks_as: {how!r} is not one of slowest, median")
    paths = discover.job_rank_files(prefix)
    if layoutscale.find(prefix) is not None:
        raise OptionError(
            f"`ranks_as` {how}: {prefix} is a tensor/pipeline layout job ({layoutscale.path_for(prefix)}): "
            "its ranks do different work by design, so none stands for the others",
            hint="leave `ranks_as` out for a layout job",
        )
    try:
        folder = tempfile.mkdtemp(prefix="chakra-ranks-as-", dir=work_dir)
    except OSError as exc:
        raise OutputError(
            work_dir or tempfile.gettempdir(), f"cannot make a folder for the job: {reason_of(exc)}"
        ) from None
    try:
        yield _written(prefix, paths, how, os.path.join(folder, "job"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _written(prefix: str, paths: list[str], how: str, out: str) -> RanksAs:
    try:
        return _write(prefix, paths, how, out)
    except OSError as exc:  # a full disk, a file-size limit
        raise OutputError(out, f"cannot write the job with every rank as the {how} one: {reason_of(exc)}") from None


def _write(prefix: str, paths: list[str], how: str, out: str) -> RanksAs:
    """Every rank of the job with the compute of the rank ``how`` names, as ``OUT.<rank>.et``, and its
    group and layout files beside them."""
    imbalance = measure(paths)  # one rank in memory at a time, here and below
    reference = imbalance.reference(how)
    assert reference is not None
    durations = _by_occurrence(read_et(paths[reference]))
    unmatched = 0
    for rank, path in enumerate(paths):
        records: list[bytes] = []
        trace = read_et(path, records=records)
        target, missing = _matched(trace, durations)
        unmatched += missing
        _scale_to(trace, target, imbalance.compute_us[reference])
        with open(f"{out}.{rank}.et", "wb") as handle:
            handle.write(wire.delimited_message(records[0]))
            for row in range(len(trace)):
                record = records[row + 1]
                if trace.types[row] == _COMP and target[row] != trace.durations[row]:
                    record = with_duration(record, target[row])
                handle.write(wire.delimited_message(record))
    for side, new in ((commgroups.find(prefix), commgroups.path_for(out)), (layoutscale.find(prefix), None)):
        if side is not None:
            shutil.copyfile(side, new or layoutscale.path_for(out))
    return RanksAs(out, how, reference, imbalance, unmatched)


def _by_occurrence(trace: EtTrace) -> dict[tuple[str, int], int]:
    """(name, n) -> the duration of the n-th compute node of that name."""
    seen: dict[str, int] = {}
    found: dict[tuple[str, int], int] = {}
    for row in range(len(trace)):
        if trace.types[row] == _COMP:
            name = trace.names[row]
            n = seen[name] = seen.get(name, -1) + 1
            found[(name, n)] = trace.durations[row]
    return found


def _matched(trace: EtTrace, durations: dict[tuple[str, int], int]) -> tuple[list[int], int]:
    """The trace's durations, each compute node's taken from ``durations`` by (name, occurrence);
    and how many compute nodes had none there (they keep theirs)."""
    seen: dict[str, int] = {}
    found = list(trace.durations)
    missing = 0
    for row in range(len(trace)):
        if trace.types[row] == _COMP:
            name = trace.names[row]
            n = seen[name] = seen.get(name, -1) + 1
            value = durations.get((name, n))
            if value is None:
                missing += 1
            else:
                found[row] = value
    return found, missing


def _scale_to(trace: EtTrace, durations: list[int], total: int) -> None:
    """Scale the compute nodes' ``durations`` (in place) to add up to ``total``."""
    rows = [r for r in range(len(trace)) if trace.types[r] == _COMP]
    own = sum(durations[r] for r in rows)
    if own == total or not own:
        return
    factor = total / own
    done = 0.0
    for row in rows:
        before = round(done)
        done += durations[row] * factor
        durations[row] = round(done) - before


def with_duration(record: bytes, value: int) -> bytes:
    """A node record with its ``duration_micros`` set to ``value`` (the field replaced, or added)."""
    for number, start, end, _ in field_spans(record):
        if number == _DURATION_FIELD:
            return record[:start] + duration(value) + record[end:]
    return record + duration(value)
