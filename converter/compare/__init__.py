"""``compare``: two runs of one job, where the time went differently.

Each side is a Kineto trace (a file, or a folder of one per rank) or a simulated run (the
``simulate --timeline`` file); typically a simulated job against the trace it came from, or two
traces (a change against its baseline, as HTA's trace diff), or two simulated jobs (a what-if
against another). For each side, per rank (``sides.py``):

- **per rank**: the step; the time each resource was busy (CPU, GPU compute, communication: the
  union of its ops' intervals; the host timeline's idle and launch gaps are not CPU work); the
  communication *exposed*: running while no GPU compute runs (on a rank with no GPU work, no CPU
  op); communication split into *transfer* and *waiting for peers* (TraceLens's collective
  report: a collective cannot move data before every rank has issued it;
  the k-th collective of each rank is matched, as ``simulate`` does, ``simulate/waiting.py``: a
  rank waits from its issue to the last rank's issue, or to its own end if earlier; a side of one
  rank cannot say);
- **per lane** (a GPU stream, the CPU): the time it was busy;
- **per op class** (``classes.py``: GEMM, attention, elementwise, communication, host ops, host
  gaps, ...) and **per op** (name): total time and count.

Then the differences, B against A, sorted by size. Lanes, classes and ops are of one rank per side:
``rank`` where both have it, else each side's slowest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import OptionError
from .classes import COMMUNICATION, CPU, GPU_COMPUTE, IDLE
from .sides import SIMULATION, TRACE, Op, RankRun, Side, read_side, resolve

__all__ = ["Comparison", "Row", "compare"]
_TOP_OPS = 15


@dataclass(frozen=True)
class Row:
    """One line of a table: a value per side (None: not on that side), and a count per side."""

    key: str
    a: float | None
    b: float | None
    count_a: int | None = None
    count_b: int | None = None

    @property
    def diff(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def ratio(self) -> float | None:
        return None if self.diff is None or not self.a else self.diff / self.a

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"key": self.key, "a_us": self.a, "b_us": self.b, "diff_us": self.diff}
        if self.count_a is not None or self.count_b is not None:
            found.update(count_a=self.count_a, count_b=self.count_b)
        return found


@dataclass
class Comparison:
    a: Side
    b: Side
    rank_a: int
    rank_b: int
    ranks: dict[str, list[Row]]  # "rank R" -> its rows (step, busy per resource, transfer, waiting, exposed)
    lanes: list[Row]
    classes: list[Row]
    ops: list[Row]
    notes: list[str] = field(default_factory=list)

    @property
    def step(self) -> Row:
        return Row("step", self.a.ranks[self.rank_a].step_us, self.b.ranks[self.rank_b].step_us)

    def as_json(self) -> dict[str, Any]:
        return {
            "a": {"path": self.a.path, "kind": self.a.kind, "step": self.a.step, "ranks": sorted(self.a.ranks)},
            "b": {"path": self.b.path, "kind": self.b.kind, "step": self.b.step, "ranks": sorted(self.b.ranks)},
            "rank_a": self.rank_a,
            "rank_b": self.rank_b,
            "per_rank": {key: [r.as_json() for r in rows] for key, rows in self.ranks.items()},
            "per_lane": [r.as_json() for r in self.lanes],
            "per_class": [r.as_json() for r in self.classes],
            "per_op": [r.as_json() for r in self.ops],
            "notes": self.notes,
        }


def compare(a: str, b: str, *, step: int | None = None, rank: int | None = None) -> Comparison:
    """Compare the runs at paths ``a`` and ``b`` (module docstring); ``step``: the ProfilerStep of
    the trace side(s) (default: the last complete one), ``rank``: the rank whose lanes, classes and
    ops are compared (default: each side's slowest)."""
    side_a, side_b = read_side(a, step), read_side(b, step)
    for side, other in ((side_a, side_b), (side_b, side_a)):
        if side.kind == SIMULATION:
            resolve(side, other if other.kind == TRACE else None)
    if rank is not None and not (rank in side_a.ranks and rank in side_b.ranks):
        raise OptionError(
            f"rank {rank} is not on both sides (A has {_listed(side_a.ranks)}, B {_listed(side_b.ranks)})",
            hint="give a rank both have, or leave `rank` out: each side's slowest is compared",
        )
    rank_a = rank if rank is not None else _slowest(side_a)
    rank_b = rank if rank is not None else _slowest(side_b)
    run_a, run_b = side_a.ranks[rank_a], side_b.ranks[rank_b]
    waits_a, waits_b = _waiting(side_a), _waiting(side_b)
    per_rank = {}
    for r in sorted(set(side_a.ranks) | set(side_b.ranks)):
        per_rank[f"rank {r}"] = _rank_rows(side_a.ranks.get(r), side_b.ranks.get(r), waits_a.get(r), waits_b.get(r))
    return Comparison(
        side_a,
        side_b,
        rank_a,
        rank_b,
        per_rank,
        _by(run_a, run_b, lambda op: op.lane, busy=True),
        _by(run_a, run_b, lambda op: op.klass),
        _by(run_a, run_b, lambda op: op.name)[:_TOP_OPS],
        [*side_a.notes, *side_b.notes],
    )


def _listed(ranks: Iterable[int]) -> str:
    found = sorted(ranks)
    return ", ".join(map(str, found[:8])) + (" ..." if len(found) > 8 else "")


def _slowest(side: Side) -> int:
    return max(side.ranks.values(), key=lambda r: (r.step_us, -r.rank)).rank


def union(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``intervals``."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return union(a) + union(b) - union(a + b)


def _busy(run: RankRun, resources: tuple[str, ...]) -> list[tuple[float, float]]:
    """The intervals of the ops on ``resources`` (the host timeline's idle gaps are no work)."""
    return [(op.start, op.end) for op in run.ops if op.resource in resources and op.klass != IDLE]


#: The rows of a rank: "compute" is a simulated run's with no trace to tell CPU from GPU compute.
_RANK_KEYS = (
    "step",
    CPU,
    "compute",
    GPU_COMPUTE,
    COMMUNICATION,
    "exposed communication",
    "communication transfer",
    "communication waiting for peers",
)


def _rank_rows(a: RankRun | None, b: RankRun | None, wait_a: float | None, wait_b: float | None) -> list[Row]:
    rows = [Row(k, _rank_value(a, k, wait_a), _rank_value(b, k, wait_b)) for k in _RANK_KEYS]
    return [r for r in rows if r.key not in (CPU, "compute", GPU_COMPUTE) or r.a or r.b]


def _rank_value(run: RankRun | None, what: str, waited: float | None) -> float | None:
    if run is None:
        return None
    if what == "step":
        return run.step_us
    if what in (CPU, "compute", GPU_COMPUTE, COMMUNICATION):
        return union(_busy(run, (what,)))
    if what == "exposed communication":
        comm = _busy(run, (COMMUNICATION,))
        compute = _busy(run, ("compute", GPU_COMPUTE)) or _busy(run, (CPU,))
        return union(comm) - _intersection(comm, compute)
    if waited is None:  # transfer and waiting: a side of one rank cannot say
        return None
    if what == "communication waiting for peers":
        return waited
    return sum(op.end - op.start for op in run.ops if op.collective) - waited


def _waiting(side: Side) -> dict[int, float]:
    """Per rank, its collectives' time waiting for peers (``simulate/waiting.py``'s rule); none for
    a side of one rank."""
    if len(side.ranks) < 2:
        return {}
    sequences = {r: sorted((op.start, op.end) for op in run.ops if op.collective) for r, run in side.ranks.items()}
    waited = dict.fromkeys(sequences, 0.0)
    longest = max((len(s) for s in sequences.values()), default=0)
    for k in range(longest):
        issued = [(r, seq[k]) for r, seq in sequences.items() if k < len(seq)]
        last = max(start for _, (start, _) in issued)
        for r, (start, end) in issued:
            waited[r] += min(last, end) - start
    return waited


def _by(a: RankRun, b: RankRun, key: Callable[[Op], str], *, busy: bool = False) -> list[Row]:
    """Rows per ``key`` of the ops: total time (``busy``: the time any of them ran) and count,
    sorted by the size of the difference."""

    def totals(run: RankRun) -> dict[str, tuple[float, int]]:
        grouped: dict[str, list[tuple[float, float]]] = {}
        for op in run.ops:
            if not busy or op.klass != IDLE:  # a lane's idle gaps are not its work
                grouped.setdefault(key(op), []).append((op.start, op.end))
        return {k: (union(v) if busy else sum(e - s for s, e in v), len(v)) for k, v in grouped.items()}

    ta, tb = totals(a), totals(b)
    rows = [
        Row(k, ta[k][0] if k in ta else None, tb[k][0] if k in tb else None, ta.get(k, (0, 0))[1], tb.get(k, (0, 0))[1])
        for k in set(ta) | set(tb)
    ]
    return sorted(rows, key=lambda r: (-abs((r.b or 0.0) - (r.a or 0.0)), r.key))
