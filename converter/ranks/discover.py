"""Finding each rank's host and Kineto traces in a directory, and the job's process groups.

A file is a Kineto (device) trace if its first kilobytes look like one, a host trace if they
look like a Chakra host trace. The rank of a Kineto trace comes from its ``distributedInfo``,
else from the file name (``rank3``, ``rank-3``, or the last number); a host trace's from its name.
Outputs of an earlier link (names with ``merged`` or ``linked``) are not inputs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConverterError
from ..io import open_trace
from ..jsonstream import JsonObjectStream

TRACE_SUFFIXES = (".json", ".json.gz")
_SKIPPED_NAMES = ("merged", "linked")  # outputs of an earlier link: host-like, but not inputs
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


@dataclass
class FoundTraces:
    """Trace paths by rank (several per rank is a problem the caller reports)."""

    hosts: dict[int, list[str]] = field(default_factory=dict)
    devices: dict[int, list[str]] = field(default_factory=dict)
    dist_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Why files that look like traces could not be read, by the rank in their name (or None).
    unreadable: dict[int | None, list[str]] = field(default_factory=dict)

    def ranks(self) -> list[int]:
        return sorted(set(self.hosts) | set(self.devices))


def discover(directory: str) -> FoundTraces:
    """Host and device traces in ``directory`` by rank (Kineto ``distributedInfo``, else the name)."""
    if not os.path.isdir(directory):
        raise ConverterError(f"{directory}: not a directory")
    found = FoundTraces()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if (
            not name.endswith(TRACE_SUFFIXES)
            or any(s in name for s in _SKIPPED_NAMES)
            or not os.path.isfile(path)
        ):
            continue
        try:
            kind = _sniff(path)
        except ConverterError as exc:  # one corrupt file must not stop the other ranks
            found.unreadable.setdefault(rank_from_name(name), []).append(str(exc))
            continue
        if kind == "device":
            info = _distributed_info(path)
            rank = info.get("rank") if isinstance(info.get("rank"), int) else rank_from_name(name)
            if rank is not None:
                found.devices.setdefault(rank, []).append(path)
                found.dist_info.setdefault(rank, info)
        elif kind == "host" and (rank := rank_from_name(name)) is not None:
            found.hosts.setdefault(rank, []).append(path)
    if not found.hosts and not found.devices:
        raise ConverterError(f"{directory}: no host or Kineto traces (*.json, *.json.gz) with a rank found")
    return found


def comm_groups(found: FoundTraces) -> dict[str, list[int]]:
    """``{pg_name: ranks}`` from the Kineto traces' process-group metadata (empty ranks: all)."""
    groups: dict[str, set[int]] = {}
    for info in found.dist_info.values():
        world = info.get("world_size")
        configs = info.get("pg_config")
        for pg in configs if isinstance(configs, list) else ():
            ranks = _group_ranks(pg, world)
            if ranks is not None:
                groups.setdefault(str(pg["pg_name"]), set()).update(ranks)
    return {name: sorted(ranks) for name, ranks in sorted(groups.items(), key=lambda kv: _natural(kv[0]))}


def _group_ranks(pg: Any, world: Any) -> list[int] | None:
    """A process group's ranks (all of them when it lists none), or None for a malformed entry."""
    if not isinstance(pg, dict) or "pg_name" not in pg:
        return None
    ranks, size = pg.get("ranks"), pg.get("pg_size") or world or 0
    if ranks:
        return ranks if isinstance(ranks, list) and all(type(r) is int for r in ranks) else None
    return list(range(size)) if type(size) is int and 0 <= size <= 1 << 20 else None


def _natural(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdecimal() and len(name) < 19 else (1, name)


def rank_from_name(name: str) -> int | None:
    stem = name[: -len(".gz")] if name.endswith(".gz") else name
    stem = stem[: -len(".json")]
    match = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem)
    return int(match.group(1)) if match else None


def _sniff(path: str) -> str | None:
    r"""'host', 'device' or None, from the first kilobytes of text; the opener's errors (gzip's
    included) are ``ConverterError``\ s."""
    with open_trace(path) as content:
        head = content.read(1 << 16).decode("utf-8", errors="replace")
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
