"""Checking ``.et`` files (one per rank) against what ASTRA-sim accepts, and describing them.

Per file: nodes by type, roots (nodes that wait for nothing), dependency ids that name no node,
duplicate ids, cycles, communication nodes by collective and process group, and each node
ASTRA-sim would abort or stall on (``schema/astra.py``). Across files (ranks): the communicator
groups, the same collectives in the same order per group on every rank of the group, the default
group's place among all collectives when sub-groups exist (ASTRA-sim numbers default-group
collectives with a counter shared by every collective a rank issues), and sends matched by
receives. A problem is *fatal* when ASTRA-sim would refuse, abort or hang on it; the others are
notes (it runs, maybe not as the user thinks).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cycles import cyclic_components
from ..et.decode import EtTrace
from ..schema.astra import REPLAYED_COLLECTIVES, RISKY_NODE_TYPES, RUNNABLE_NODE_TYPES, SIMULATED_COLLECTIVES, group_id
from ..schema.chakra import CollectiveCommType, NodeType
from ..schema.distributed import HOST_COLLECTIVES, MARKER_PREFIX, NCCL_RECORD_PREFIX, WORKER_OP_PREFIX, parse_marker

_RANK_IN_NAME = re.compile(r"\.(\d+)\.et$")
_EXAMPLES = 3
_COLL, _SEND, _RECV = NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE


@dataclass(frozen=True)
class Problem:
    """One line of the report's problems; ``path`` None for problems across files."""

    path: str | None
    message: str
    fatal: bool

    def line(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


@dataclass(frozen=True)
class Collective:
    """One communication node, in file (id) order."""

    node_id: int
    kind: str  # a CollectiveCommType name, or SEND / RECV
    size: int
    group: str
    peer: int | None = None  # sends: destination; receives: source
    tag: int | None = None


@dataclass
class FileReport:
    path: str
    rank: int
    nodes: int
    by_type: dict[str, int]
    roots: int
    dependencies: int
    missing_dependencies: int
    duplicate_ids: int
    cycles: int
    collectives: list[Collective] = field(default_factory=list)

    def collective_totals(self) -> list[dict[str, Any]]:
        """(kind, group) -> count and bytes, in order of first appearance."""
        totals: dict[tuple[str, str], dict[str, Any]] = {}
        for c in self.collectives:
            entry = totals.setdefault((c.kind, c.group), {"kind": c.kind, "group": c.group, "count": 0, "bytes": 0})
            entry["count"] += 1
            entry["bytes"] += c.size
        return list(totals.values())


@dataclass
class CheckReport:
    files: list[FileReport]
    problems: list[Problem]
    comm_groups: dict[str, list[int]] | None
    comm_group_path: str | None = None  # the file they were read from

    @property
    def ok(self) -> bool:
        return not any(p.fatal for p in self.problems)


def check(
    traces: Sequence[EtTrace], comm_groups: dict[str, Any] | None = None, ranks: Sequence[int] | None = None
) -> CheckReport:
    """Check ``traces`` (one per rank: the rank is the number in ``<prefix>.<rank>.et``, else the
    position; ``ranks`` gives them instead) and, if given, the communicator groups of
    ``--comm-group-configuration``."""
    problems: list[Problem] = []
    ranks = list(ranks) if ranks is not None else _ranks(traces, problems)
    files = [_check_file(trace, rank, problems) for trace, rank in zip(traces, ranks, strict=True)]
    groups = _check_groups(comm_groups, ranks, problems) if comm_groups is not None else None
    _check_across(files, groups, problems)
    return CheckReport(files, problems, groups)


def check_file(trace: EtTrace, rank: int) -> tuple[FileReport, list[Problem]]:
    """One file of a job, as rank ``rank``, alone (none of the checks across ranks)."""
    problems: list[Problem] = []
    return _check_file(trace, rank, problems), problems


def _ranks(traces: Sequence[EtTrace], problems: list[Problem]) -> list[int]:
    found = [_RANK_IN_NAME.search(os.path.basename(t.path)) for t in traces]
    if all(found):
        ranks = [int(m.group(1)) for m in found if m]
        if len(set(ranks)) == len(ranks):
            if sorted(ranks) != list(range(len(ranks))):
                problems.append(
                    Problem(
                        None,
                        f"ranks {sorted(ranks)} are not 0..{len(ranks) - 1}: ASTRA-sim loads "
                        "<prefix>.0.et to <prefix>.<N-1>.et",
                        True,
                    )
                )
            return ranks
        problems.append(Problem(None, "two files have the same rank number; ranks follow the argument order", False))
    return list(range(len(traces)))


# -- one file -------------------------------------------------------------------------------------
def _check_file(trace: EtTrace, rank: int, problems: list[Problem]) -> FileReport:
    path = trace.path

    def fail(message: str, fatal: bool = True) -> None:
        problems.append(Problem(path, message, fatal))

    size = len(trace)
    index: dict[int, int] = {}
    duplicates = 0
    for row, node_id in enumerate(trace.ids):
        if index.setdefault(node_id, row) != row:
            duplicates += 1
    by_type = Counter(trace.types)
    missing = [(trace.ids[row], dep) for row in range(size) for dep in trace.dependencies(row) if dep not in index]
    roots = sum(1 for row in range(size) if all(dep not in index for dep in trace.dependencies(row)))
    report = FileReport(
        path=path,
        rank=rank,
        nodes=size,
        by_type={_type_name(t): n for t, n in sorted(by_type.items())},
        roots=roots,
        dependencies=len(trace.deps),
        missing_dependencies=len(missing),
        duplicate_ids=duplicates,
        cycles=0,
    )
    if not size:
        fail("no nodes: ASTRA-sim finds no dependency-free node")
        return report
    if missing:
        shown = ", ".join(f"{node} -> {dep}" for node, dep in missing[:_EXAMPLES])
        fail(f"{len(missing)} dependencies name no node of the file (e.g. {shown}): the feeder aborts")
    if duplicates:
        fail(f"{duplicates} node ids appear more than once: ASTRA-sim keeps only the last of each")
    for node_type, count in sorted(by_type.items()):
        if node_type not in RUNNABLE_NODE_TYPES and node_type not in RISKY_NODE_TYPES:
            fail(f"{count} {_type_name(node_type)} node(s): ASTRA-sim's statistics abort on them")
        elif node_type in RISKY_NODE_TYPES:
            fail(
                f"{count} {_type_name(node_type)} node(s): they stall a rank with nothing else in flight "
                "(INVALID) or need remote memory (MEM_*)",
                False,
            )
    if not roots:
        fail("no node is free of dependencies: ASTRA-sim aborts (deadlock)")
    cycles = cyclic_components(range(size), lambda row: [index[d] for d in trace.dependencies(row) if d in index], size)
    report.cycles = len(cycles)
    if cycles:
        shown = ", ".join(str(trace.ids[c[0]]) for c in cycles[:_EXAMPLES])
        fail(f"{len(cycles)} dependency cycle(s) (through nodes {shown}): ASTRA-sim silently never runs them")
    tally = _Tally()
    for row in sorted(trace.comm):
        collective = _comm_node(trace, row, rank, tally.add)
        if collective is not None:
            report.collectives.append(collective)
    for message, fatal in tally.lines():
        fail(message, fatal)
    host = sum(
        1 for row in range(size) if trace.types[row] == NodeType.COMP_NODE and trace.names[row] in HOST_COLLECTIVES
    )
    host -= sum(1 for name in trace.names if _one_rank_marker(name))  # a one-rank group's: left compute
    if host and any(name.startswith(WORKER_OP_PREFIX) for name in trace.names):  # gloo ran them, not NCCL kernels
        fail(
            f"{host} host-side collective(s) (c10d ops run by gloo) are compute nodes: ASTRA-sim runs them, "
            "but never simulates the network (convert with `astra_sim`)",
            False,
        )
    elif not report.collectives:  # NCCL (or any) collective operators, no communication node
        operators = host or sum(
            1
            for row in range(size)
            if trace.types[row] == NodeType.COMP_NODE and trace.names[row].startswith(NCCL_RECORD_PREFIX)
        )
        if operators:
            fail(
                f"{operators} collective operator(s) ({'c10d' if host else 'nccl:'} ops) but no communication node: "
                "ASTRA-sim runs the file, but never simulates the network (a host trace without its Kineto "
                "trace: convert with `astra_sim`)",
                False,
            )
    return report


def _one_rank_marker(name: str) -> bool:
    label = parse_marker(name) if name.startswith(MARKER_PREFIX) else None
    return label is not None and len(label.ranks) == 1


def _comm_node(trace: EtTrace, row: int, rank: int, fail: Any) -> Collective | None:
    attrs, node_id, node_type = trace.comm[row], trace.ids[row], trace.types[row]
    where = f"node {node_id} '{trace.names[row]}'"
    if node_type not in (_COLL, _SEND, _RECV):
        return None
    if attrs.get("is_cpu_op"):
        fail(where, "a communication node marked is_cpu_op: ASTRA-sim stalls ('Comm node should not be on CPU')")
    size = attrs.get("comm_size")
    if type(size) is not int or size < 0:
        fail(where, f"comm_size {size!r} is not a byte count: ASTRA-sim stalls")
        size = 0
    pg_name = attrs.get("pg_name", "")
    if not isinstance(pg_name, str) or group_id(pg_name) is None:
        fail(where, f"pg_name {pg_name!r} is not a decimal group id: ASTRA-sim stalls")
        pg_name = str(pg_name)
    if node_type == _COLL:
        return _collective(attrs, node_id, where, size, pg_name, fail)
    src, dst, tag = attrs.get("comm_src"), attrs.get("comm_dst"), attrs.get("comm_tag")
    own, peer = (src, dst) if node_type == _SEND else (dst, src)
    kind = "SEND" if node_type == _SEND else "RECV"
    if peer is None or tag is None:
        missing = "comm_dst" if node_type == _SEND else "comm_src"
        fail(where, f"a {kind} without {missing if peer is None else 'comm_tag'}: ASTRA-sim stalls")
    if own is not None and own != rank:
        fail(where, f"a {kind} of rank {own} in rank {rank}'s file: ASTRA-sim aborts")
    return Collective(node_id, kind, size, pg_name, peer, tag)


def _collective(attrs: dict[str, Any], node_id: int, where: str, size: int, pg_name: str, fail: Any) -> Collective:
    comm_type = attrs.get("comm_type")
    try:
        kind = CollectiveCommType(comm_type).name if type(comm_type) is int else f"comm_type {comm_type!r}"
    except ValueError:
        kind = f"comm_type {comm_type!r}"
    if comm_type in REPLAYED_COLLECTIVES:
        fail(where, "BROADCAST is replayed for its duration, not simulated on the network", False)
    elif comm_type not in SIMULATED_COLLECTIVES:
        fail(where, f"{kind} is not a collective ASTRA-sim simulates: the rank stalls")
    return Collective(node_id, kind, size, pg_name)


class _Tally:
    """Problems of single nodes, one line per kind: the count and the first node."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, bool], list[Any]] = {}

    def add(self, where: str, message: str, fatal: bool = True) -> None:
        entry = self._seen.setdefault((message, fatal), [0, where])
        entry[0] += 1

    def lines(self) -> list[tuple[str, bool]]:
        return [
            (f"{where}: {message}" if count == 1 else f"{count} nodes ({where}, ...): {message}", fatal)
            for (message, fatal), (count, where) in self._seen.items()
        ]


def _type_name(node_type: int) -> str:
    try:
        return NodeType(node_type).name.removesuffix("_NODE")
    except ValueError:
        return f"type {node_type}"


# -- across files ---------------------------------------------------------------------------------
def _check_groups(raw: dict[str, Any], ranks: list[int], problems: list[Problem]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for key, members in raw.items():
        number = group_id(key) if isinstance(key, str) else None
        if number is None or number == 0 or key != str(number):
            problems.append(
                Problem(
                    None,
                    f"communicator group {key!r}: ids must be decimal integers > 0 (ASTRA-sim asserts id > 0)",
                    True,
                )
            )
            continue
        if not isinstance(members, list) or not all(type(r) is int for r in members):
            problems.append(Problem(None, f"communicator group {key}: its ranks must be a list of integers", True))
            continue
        unknown = sorted(set(members) - set(ranks))
        if unknown:
            problems.append(Problem(None, f"communicator group {key} names ranks {unknown} that have no file", False))
        groups[key] = members
    return groups


def _check_across(files: list[FileReport], groups: dict[str, list[int]] | None, problems: list[Problem]) -> None:
    all_ranks = [f.rank for f in files]
    by_group: dict[str, dict[int, list[Collective]]] = {}
    has_subgroups = False
    for f in files:
        for c in f.collectives:
            if c.kind in ("SEND", "RECV"):
                continue
            default = c.group in ("", "0")
            has_subgroups |= not default
            key = "0" if default else c.group
            by_group.setdefault(key, {r: [] for r in _members(key, groups, all_ranks)}).setdefault(f.rank, []).append(c)
    for key, per_rank in sorted(by_group.items()):
        members = _members(key, groups, all_ranks)
        if key != "0" and groups is None:
            problems.append(
                Problem(
                    None,
                    f"group {key} is used but no communicator group file was given: "
                    "ASTRA-sim exits ('communicator group not found')",
                    True,
                )
            )
        elif key != "0" and key not in (groups or {}):
            problems.append(
                Problem(None, f"group {key} is used but not in the communicator group file: ASTRA-sim exits", True)
            )
        outsiders = sorted(set(per_rank) - set(members))
        if outsiders:
            problems.append(
                Problem(
                    None,
                    f"ranks {outsiders} issue collectives on group {key} without being in it: ASTRA-sim aborts",
                    True,
                )
            )
        _same_sequences(f"group {key}", {r: per_rank.get(r, []) for r in members if r in all_ranks}, problems)
    if has_subgroups:
        _default_group_positions(files, problems)
    _matched_point_to_point(files, problems)


def _members(key: str, groups: dict[str, list[int]] | None, all_ranks: list[int]) -> list[int]:
    if key == "0" or groups is None or key not in groups:
        return all_ranks if key == "0" else []
    return groups[key]


def _same_sequences(what: str, per_rank: dict[int, list[Collective]], problems: list[Problem]) -> None:
    """The n-th collective of a group must be the same on every rank of it."""
    if len(per_rank) < 2:
        return
    first_rank = min(per_rank)
    reference = per_rank[first_rank]
    for rank, sequence in sorted(per_rank.items()):
        if len(sequence) != len(reference):
            problems.append(
                Problem(
                    None,
                    f"{what}: rank {rank} issues {len(sequence)} collectives, rank {first_rank} "
                    f"{len(reference)}: ASTRA-sim hangs",
                    True,
                )
            )
            continue
        for position, (ours, theirs) in enumerate(zip(sequence, reference, strict=True)):
            if (ours.kind, ours.size) != (theirs.kind, theirs.size):
                problems.append(
                    Problem(
                        None,
                        f"{what}: collective #{position + 1} is {ours.kind} of {ours.size:,} "
                        f"bytes on rank {rank} (node {ours.node_id}) but {theirs.kind} of "
                        f"{theirs.size:,} bytes on rank {first_rank}: ASTRA-sim hangs",
                        True,
                    )
                )
                break


def _default_group_positions(files: list[FileReport], problems: list[Problem]) -> None:
    """With sub-groups, the n-th default-group collective must follow the same number of
    collectives (of any group) on every rank: ASTRA-sim matches them by that count."""
    positions: dict[int, list[int]] = {}
    for f in files:
        count = 0
        for c in f.collectives:
            if c.kind in ("SEND", "RECV"):
                continue
            if c.group in ("", "0"):
                positions.setdefault(f.rank, []).append(count)
            count += 1
    if len({tuple(p) for p in positions.values()}) > 1:
        problems.append(
            Problem(
                None,
                "default-group collectives follow different numbers of sub-group collectives "
                "on different ranks: ASTRA-sim matches them by that count and hangs; give the "
                "world group an explicit id",
                True,
            )
        )


def _matched_point_to_point(files: list[FileReport], problems: list[Problem]) -> None:
    sends: Counter[tuple[int, int, int | None, int]] = Counter()
    recvs: Counter[tuple[int, int, int | None, int]] = Counter()
    for f in files:
        for c in f.collectives:
            if c.kind == "SEND" and c.peer is not None:
                sends[(f.rank, c.peer, c.tag, c.size)] += 1
            elif c.kind == "RECV" and c.peer is not None:
                recvs[(c.peer, f.rank, c.tag, c.size)] += 1
    ranks = {f.rank for f in files}
    for (src, dst, tag, size), count in sorted((sends - recvs).items(), key=str):
        if dst in ranks:
            problems.append(
                Problem(
                    None,
                    f"{count} send(s) {src} -> {dst} (tag {tag}, {size:,} bytes) with no "
                    "matching receive: ASTRA-sim hangs",
                    True,
                )
            )
    for (src, dst, tag, size), count in sorted((recvs - sends).items(), key=str):
        if src in ranks:
            problems.append(
                Problem(
                    None,
                    f"{count} receive(s) {src} -> {dst} (tag {tag}, {size:,} bytes) with no "
                    "matching send: ASTRA-sim hangs",
                    True,
                )
            )
