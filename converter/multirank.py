"""``convert-all``: every rank of a job, host + device pairs found in one directory, in parallel.

Writes ``OUTDIR/<prefix>.<rank>.et`` (the names ASTRA-sim's workload loader expects) and
``OUTDIR/comm_group.json`` (``{"<process group name>": [ranks...]}``). One rank failing does
not stop the others; each outcome is a row of the summary.
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .errors import ConverterError
from .jsonstream import JsonObjectStream, open_trace_file
from .merged import atomic_text_output

_TRACE_SUFFIXES = (".json", ".json.gz")
_SKIPPED_NAMES = ("merged", "linked")  # outputs of an earlier link: host-like, but not inputs
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")
COMM_GROUP_FILE = "comm_group.json"


@dataclass(frozen=True)
class RankOutcome:
    rank: int
    host: str | None
    device: str | None
    output: str | None
    ok: bool
    message: str  # the error, or the warnings joined
    nodes: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class MultiRankResult:
    outcomes: list[RankOutcome]
    comm_group_path: str | None
    comm_groups: dict[str, list[int]] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(not o.ok for o in self.outcomes)


@dataclass
class _Found:
    hosts: dict[int, list[str]] = field(default_factory=dict)
    devices: dict[int, list[str]] = field(default_factory=dict)
    dist_info: dict[int, dict[str, Any]] = field(default_factory=dict)


def convert_all(
    directory: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    *,
    jobs: int | None = None,
    prefix: str = "trace",
    allow_mismatch: bool = False,
) -> MultiRankResult:
    """Link and convert every rank found in ``directory``; see the module docstring."""
    found = discover(os.fspath(directory))
    out_dir = os.fspath(output_dir)
    os.makedirs(out_dir, exist_ok=True)
    tasks, outcomes = _plan(found, out_dir, prefix)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks) or 1))
    if tasks:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_convert_rank, *task, allow_mismatch) for task in tasks]
            outcomes += [f.result() for f in futures]
    outcomes.sort(key=lambda o: o.rank)
    groups = comm_groups(found)
    group_path = None
    if groups:
        group_path = os.path.join(out_dir, COMM_GROUP_FILE)
        with atomic_text_output(group_path) as out:
            out.write(json.dumps(groups, indent=2) + "\n")
    return MultiRankResult(outcomes, group_path, groups)


def discover(directory: str) -> _Found:
    """Host and device traces in ``directory`` by rank (Kineto ``distributedInfo``, else the name)."""
    if not os.path.isdir(directory):
        raise ConverterError(f"{directory}: not a directory")
    found = _Found()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if (
            not name.endswith(_TRACE_SUFFIXES)
            or any(s in name for s in _SKIPPED_NAMES)
            or not os.path.isfile(path)
        ):
            continue
        kind = _sniff(path)
        if kind == "device":
            info = _distributed_info(path)
            rank = info.get("rank") if isinstance(info.get("rank"), int) else _rank_from_name(name)
            if rank is not None:
                found.devices.setdefault(rank, []).append(path)
                found.dist_info.setdefault(rank, info)
        elif kind == "host" and (rank := _rank_from_name(name)) is not None:
            found.hosts.setdefault(rank, []).append(path)
    if not found.hosts and not found.devices:
        raise ConverterError(f"{directory}: no host or Kineto traces (*.json, *.json.gz) with a rank found")
    return found


def _plan(found: _Found, out_dir: str, prefix: str) -> tuple[list[tuple[Any, ...]], list[RankOutcome]]:
    tasks, failures = [], []
    for rank in sorted(set(found.hosts) | set(found.devices)):
        hosts, devices = found.hosts.get(rank, []), found.devices.get(rank, [])
        problem = _pair_problem(rank, hosts, devices)
        if problem:
            failures.append(RankOutcome(rank, _one(hosts), _one(devices), None, False, problem))
        else:
            tasks.append((rank, hosts[0], devices[0], os.path.join(out_dir, f"{prefix}.{rank}.et")))
    return tasks, failures


def _one(paths: list[str]) -> str | None:
    return paths[0] if len(paths) == 1 else None


def _pair_problem(rank: int, hosts: list[str], devices: list[str]) -> str | None:
    for kind, paths in (("host", hosts), ("device (Kineto)", devices)):
        if not paths:
            return f"rank {rank}: no {kind} trace found"
        if len(paths) > 1:
            return (
                f"rank {rank}: {len(paths)} {kind} traces found ({', '.join(map(os.path.basename, paths))})"
            )
    return None


def _convert_rank(rank: int, host: str, device: str, output: str, allow_mismatch: bool) -> RankOutcome:
    """One worker's job; every failure becomes a row rather than an exception."""
    from .api_link import convert_pair

    try:
        result = convert_pair(host, device, output, rank=rank, allow_mismatch=allow_mismatch)
    except ConverterError as exc:
        return RankOutcome(rank, host, device, None, False, str(exc))
    except Exception as exc:  # a bug must not take the other ranks down; it is reported as such
        return RankOutcome(rank, host, device, None, False, f"internal error: {exc!r}")
    link = result.link
    nodes = getattr(result.conversion, "nodes_written", link.nodes_written)
    return RankOutcome(rank, host, device, output, True, "; ".join(link.warnings), nodes, link.seconds)


def comm_groups(found: _Found) -> dict[str, list[int]]:
    """``{pg_name: ranks}`` from the Kineto traces' process-group metadata (empty ranks: all)."""
    groups: dict[str, set[int]] = {}
    for info in found.dist_info.values():
        world = info.get("world_size")
        for pg in info.get("pg_config") or ():
            if not isinstance(pg, dict) or "pg_name" not in pg:
                continue
            ranks = pg.get("ranks") or list(range(pg.get("pg_size") or world or 0))
            groups.setdefault(str(pg["pg_name"]), set()).update(int(r) for r in ranks)
    return {name: sorted(ranks) for name, ranks in sorted(groups.items(), key=lambda kv: _natural(kv[0]))}


def _natural(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdigit() else (1, name)


def _rank_from_name(name: str) -> int | None:
    stem = name[: -len(".gz")] if name.endswith(".gz") else name
    stem = stem[: -len(".json")]
    match = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem)
    return int(match.group(1)) if match else None


def _sniff(path: str) -> str | None:
    """'host', 'device' or None, from the first kilobytes of text."""
    try:
        with open_trace_file(path) as content:
            head = content.read(1 << 16).decode("utf-8", errors="replace")
    except (ConverterError, OSError, EOFError):
        return None
    if '"traceEvents"' in head or '"schemaVersion"' in head or '"deviceProperties"' in head:
        return "device"
    if '"nodes"' in head or '"schema"' in head:
        return "host"
    return None


def _distributed_info(path: str) -> dict[str, Any]:
    try:
        with JsonObjectStream(path, stream_keys={"traceEvents"}) as stream:
            for key, value in stream.items():
                if key == "distributedInfo" and isinstance(value, dict):
                    return value
                if key == "traceEvents":
                    break
    except ConverterError:
        return {}
    return {}
