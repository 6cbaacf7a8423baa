"""Communicator groups for ASTRA-sim's ``--comm-group-configuration``, from the Kineto traces.

Each rank's Kineto trace lists, in ``distributedInfo.pg_config``, the process groups that rank
belongs to (name and ranks). The file ASTRA-sim reads is ``{"<id>": [ranks]}`` over the whole
job, with ids > 0: a node's ``pg_name`` names its group, and ``""`` or ``"0"`` (the default group,
every rank) needs no entry, so the default group is left out. Only decimal names can be ids;
other names are reported, since ASTRA-sim cannot use them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..io import atomic_text_output
from ..schema.astra import ALL_RANKS_GROUPS, group_id

COMM_GROUP_FILE = "comm_group.json"


@dataclass
class CommGroups:
    """Groups by id (sorted), and the names that could not be ids."""

    groups: dict[str, list[int]] = field(default_factory=dict)
    unusable: list[str] = field(default_factory=list)


def from_distributed_info(infos: Iterable[dict[str, Any]]) -> CommGroups:
    """The union over ranks of their ``pg_config`` entries (a group with no ranks listed spans
    ``pg_size`` or ``world_size`` ranks from 0)."""
    members: dict[str, set[int]] = {}
    for info in infos:
        world = info.get("world_size")
        for pg in info.get("pg_config") or ():
            if not isinstance(pg, dict) or "pg_name" not in pg:
                continue
            ranks = pg.get("ranks") or list(range(pg.get("pg_size") or world or 0))
            members.setdefault(str(pg["pg_name"]), set()).update(int(r) for r in ranks if type(r) is int)
    result = CommGroups()
    for name in sorted(members, key=lambda n: (group_id(n) is None, group_id(n) or 0, n)):
        if name in ALL_RANKS_GROUPS:
            continue
        if group_id(name) is None:
            result.unusable.append(name)
        else:
            result.groups[name] = sorted(members[name])
    return result


def write(groups: CommGroups, path: str) -> None:
    with atomic_text_output(path) as out:
        out.write(json.dumps(groups.groups, indent=2) + "\n")
