"""What a trace records of its job (world size, rank, process groups), as the ``.et`` file's
GlobalMetadata attributes: made from a ``distributedInfo`` (``job_metadata``), read back from a
``.et`` file (``et_job``)."""

from __future__ import annotations

import json
from typing import Any

from ..arguments import MAX_RANKS
from ..et.decode import iter_records, metadata_of
from ..et.encode import PROCESS_GROUPS, RANK, WORLD_SIZE


def job_metadata(info: dict[str, Any], rank: int | None) -> dict[str, Any]:
    """What a trace records of its job (a ``distributedInfo``: ``world_size``, ``pg_config``; and
    the trace's ``rank``), as GlobalMetadata attributes: ``world_size``, ``rank``, and
    ``process_groups`` (JSON ``{pg_name: [ranks]}``); each only where it is recorded and sane."""
    world = info.get("world_size")
    world = world if type(world) is int and 1 <= world <= MAX_RANKS else None
    out: dict[str, Any] = {}
    if world is not None:
        out[WORLD_SIZE] = world
    if type(rank) is int and 0 <= rank < (world or MAX_RANKS):
        out[RANK] = rank
    groups: dict[str, list[int]] = {}
    configs = info.get("pg_config")
    for pg in configs if isinstance(configs, list) else ():
        if isinstance(pg, dict) and isinstance(pg.get("pg_name"), (str, int)):
            members = group_ranks(pg, world)
            if members is not None and all(0 <= m < (world or MAX_RANKS) for m in members):
                groups[str(pg["pg_name"])] = members
    if groups:
        out[PROCESS_GROUPS] = json.dumps(groups, separators=(",", ":"))
    return out


def group_ranks(pg: dict[str, Any], world: Any) -> list[int] | None:
    """A process group's ranks (all of them when it lists none), or None for a malformed entry."""
    ranks, size = pg.get("ranks"), pg.get("pg_size") or world or 0
    if ranks:
        return ranks if isinstance(ranks, list) and all(type(r) is int for r in ranks) else None
    return list(range(size)) if type(size) is int and 0 <= size <= 1 << 20 else None


def et_job(path: str) -> dict[str, Any]:
    """The job attributes (``world_size``, ``rank``, ``process_groups``) of a .et file's
    GlobalMetadata record ({} without one)."""
    for _, message in iter_records(path):
        metadata = metadata_of(path, message)
        return {k: metadata[k] for k in (WORLD_SIZE, RANK, PROCESS_GROUPS) if k in metadata}
    return {}
