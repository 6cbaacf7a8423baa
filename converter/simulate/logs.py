"""ASTRA-sim's log, read as it is written: per rank the ``finished`` line, and per node the
``issue`` and ``callback`` lines that ``trace-enabled`` makes it write (one each per node, with
the simulated tick: a nanosecond), into the numbers of a simulation.

What the lines are (``astra-sim/workload/Workload.cc``): ``issue,sys->id=R, tick=T, node->id=I,
node->name=N, node->type=K`` when rank R starts node I, ``callback,...`` when it completes;
``sys[R] finished, C cycles, exposed communication E cycles.`` when rank R has no node left, where
E is C minus the time of its non-CPU compute nodes (so for a CPU capture E is all of C). A node
whose issue throws (a missing attribute, say) is logged by the system as ``warning! a callable is
removed before call ...`` and never completes: its rank then never finishes, and the process
still exits 0. Both the default log format (``[time] [logger] [level] text``) and the one of a
``--logging-configuration`` (``[time] [L] <logger>: text``) are read; node names may hold commas,
so a line is anchored at its end.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

_EVENT = re.compile(r"(issue|callback),sys->id=(\d+), tick=(\d+), node->id=(\d+), node->name=(.*), node->type=(\d+)$")
_FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles")
_PROBLEM = re.compile(r"\] \[(?:C|E|critical|error)\] (?:<[^>]*>: |)(.*)$")
#: Raised while a CPU capture's statistics are made, after its rank finished: not a problem.
BENIGN = "Only GPU and COMM types are supported for overlap extraction"

#: Chakra node types (``et_def.proto``) by how a simulation counts them.
COMMUNICATION = {5: "send", 6: "recv", 7: "collective"}
WORK = {2, 3, 4}  # memory load/store, compute
_COLLECTIVE = 7
KIND = {
    0: "invalid",
    1: "metadata",
    2: "memory",
    3: "memory",
    4: "compute",
    5: "communication",
    6: "communication",
    7: "communication",
}


@dataclass(frozen=True)
class Span:
    """One node as simulated: rank, id, name, Chakra node type, start and end tick (ns)."""

    rank: int
    node_id: int
    name: str
    node_type: int
    start: int
    end: int

    @property
    def kind(self) -> str:
        return KIND.get(self.node_type, "other")


@dataclass(frozen=True)
class Dropped:
    """A node a rank issued and never completed."""

    rank: int
    node_id: int
    name: str
    node_type: int
    issued_at: int


@dataclass
class RankLog:
    """What the log says of one rank (times in ticks, i.e. ns)."""

    rank: int
    finished: bool = False
    cycles: int = 0
    astra_exposed: int = 0
    nodes_done: int = 0
    comm_done: dict[str, int] = field(default_factory=dict)  # "collective"/"send"/"recv" -> count
    comm_time: int = 0  # the communication nodes' durations, summed
    comm_busy: int = 0  # time in which at least one communication node runs
    exposed_comm: int = 0  # ... and no compute or memory node does
    #: the collectives in issue order: [node id, issue tick, callback tick (-1 until it comes)]
    collectives: list[list[int]] = field(default_factory=list)
    _open: dict[int, int] = field(default_factory=dict)  # collective node id -> its index, until its callback
    _work: int = 0
    _comm: int = 0
    _last: int = 0

    def advance(self, tick: int) -> None:
        if self._comm and tick > self._last:
            self.comm_busy += tick - self._last
            if not self._work:
                self.exposed_comm += tick - self._last
        self._last = max(self._last, tick)


#: The longest log line read (characters); ASTRA-sim's are under a few hundred.
MAX_LINE = 1 << 16


class LogReader:
    """Feed it the log's lines as they come (``feed`` takes any chunk of text); ``on_span`` hears
    of every node as it completes. Holds only the nodes in flight."""

    def __init__(self, ranks: int, on_span: Callable[[Span], None] | None = None) -> None:
        self.ranks = [RankLog(r) for r in range(ranks)]
        self.problems: list[str] = []
        self.unknown_ranks: set[int] = set()
        self._on_span = on_span
        self._in_flight: dict[tuple[int, int], tuple[int, str, int, int]] = {}  # -> tick, name, type, order
        self._order = 0
        self._partial: list[str] = []  # the pieces of the line not yet ended, joined once it ends
        self._partial_size = 0
        self._overlong = False  # the line not yet ended is longer than MAX_LINE: dropped
        self.nodes_done = 0
        self.ranks_finished = 0
        self.last_tick = 0

    def feed(self, text: str) -> None:
        """Read ``text``, any piece of the log: each character is looked at a bounded number of
        times whatever the lines' lengths (a line's pieces are kept and joined once, when it
        ends), and a line longer than ``MAX_LINE`` (none of ASTRA-sim's) is dropped unread."""
        cut = text.rfind("\n") + 1
        if cut:
            lines = text[: cut - 1].split("\n")
            if self._overlong:
                lines.pop(0)  # the end of a line too long to be one of ASTRA-sim's
                self._overlong = False
            elif self._partial:
                lines[0] = "".join(self._partial) + lines[0]
            self._partial, self._partial_size = [], 0
            for line in lines:
                self.line(line)
        rest = text[cut:]
        if rest and not self._overlong:
            self._partial.append(rest)
            self._partial_size += len(rest)
            if self._partial_size > MAX_LINE:
                self._partial, self._partial_size, self._overlong = [], 0, True

    def close(self) -> None:
        if self._partial and not self._overlong:
            self.line("".join(self._partial))
        self._partial, self._partial_size, self._overlong = [], 0, False

    def line(self, line: str) -> None:
        line = line.rstrip("\r")
        if "sys->id=" in line:
            match = _EVENT.search(line)
            if match is not None:
                self._event(match)
                return
        if "finished," in line:
            done = _FINISHED.search(line)
            if done is not None:
                self._finished(int(done.group(1)), int(done.group(2)), int(done.group(3)))
                return
        problem = _PROBLEM.search(line)
        if problem is not None and BENIGN not in problem.group(1) and len(self.problems) < 20:
            self.problems.append(problem.group(1).strip())

    def _event(self, match: re.Match[str]) -> None:
        rank, tick, node, node_type = int(match.group(2)), int(match.group(3)), int(match.group(4)), int(match.group(6))
        if rank >= len(self.ranks):
            self.unknown_ranks.add(rank)
            return
        run = self.ranks[rank]
        run.advance(tick)
        self.last_tick = max(self.last_tick, tick)
        is_comm = node_type in COMMUNICATION
        if match.group(1) == "issue":
            self._order += 1
            self._in_flight[(rank, node)] = (tick, match.group(5), node_type, self._order)
            if is_comm:
                run._comm += 1
                if node_type == _COLLECTIVE:
                    run._open[node] = len(run.collectives)
                    run.collectives.append([node, tick, -1])
            elif node_type in WORK:
                run._work += 1
            return
        started = self._in_flight.pop((rank, node), None)
        start, name = (tick, match.group(5)) if started is None else started[:2]
        if started is not None:
            if is_comm:
                run._comm -= 1
            elif node_type in WORK:
                run._work -= 1
        run.nodes_done += 1
        self.nodes_done += 1
        if is_comm:
            opened = run._open.pop(node, None) if node_type == _COLLECTIVE else None
            if opened is not None:
                run.collectives[opened][2] = tick
            kind = COMMUNICATION[node_type]
            run.comm_done[kind] = run.comm_done.get(kind, 0) + 1
            run.comm_time += tick - start
        if self._on_span is not None:
            self._on_span(Span(rank, node, name, node_type, start, tick))

    def _finished(self, rank: int, cycles: int, exposed: int) -> None:
        if rank >= len(self.ranks):
            self.unknown_ranks.add(rank)
            return
        run = self.ranks[rank]
        if not run.finished:
            self.ranks_finished += 1
        run.finished, run.cycles, run.astra_exposed = True, cycles, exposed
        run.advance(cycles)

    def dropped(self) -> list[Dropped]:
        """Per rank that did not finish, the first node it issued and never completed (by issue
        tick, then log order); ranks with none in flight are left out."""
        first: dict[int, tuple[int, int, int, str, int]] = {}
        for (rank, node), (tick, name, node_type, order) in self._in_flight.items():
            if self.ranks[rank].finished:
                continue
            key = (tick, order, node, name, node_type)
            if rank not in first or key < first[rank]:
                first[rank] = key
        return [
            Dropped(rank, node, name, node_type, tick)
            for rank, (tick, _, node, name, node_type) in sorted(first.items())
        ]


def read_lines(ranks: int, lines: Iterable[str], on_span: Callable[[Span], None] | None = None) -> LogReader:
    """A whole log at once (e.g. ASTRA-sim's own ``log.log``, oldest rotated file first)."""
    reader = LogReader(ranks, on_span)
    for line in lines:
        reader.line(line)
    return reader
