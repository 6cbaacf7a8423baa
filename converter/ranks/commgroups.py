"""Communicator groups for ASTRA-sim's ``--comm-group-configuration``, from the Kineto traces
(or, for a job of host traces alone, from their ``## process_group:init ##`` nodes).

Each rank's Kineto trace lists, in ``distributedInfo.pg_config``, the process groups that rank
belongs to (name and ranks). The file ASTRA-sim reads is ``{"<id>": [ranks]}`` over the whole
job, with ids > 0: a node's ``pg_name`` names its group, and ``""`` or ``"0"`` (the default group,
every rank) needs no entry, so the default group is left out. Only decimal names can be ids;
other names are reported, since ASTRA-sim cannot use them.

One naming for every command that writes or reads such a file: ``PREFIX.comm_group.json`` beside
the job's ``PREFIX.<rank>.et`` (``path_for``); ``find`` looks for that name first, then for the
old ``comm_group.json`` in the same folder (what ``convert-all`` wrote before); ``read`` reads one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..convert.groups import PROCESS_GROUP_INIT, init_groups
from ..errors import TraceFormatError
from ..io import OutputTarget, atomic_text_output, check_output, read_side_input
from ..job.metadata import group_ranks as group_ranks
from ..jsonstream import JsonObjectStream
from ..schema.astra import ALL_RANKS_GROUPS, MAX_GROUP_ID, group_id
from .discover import distributed_info

#: The file beside ``PREFIX.<rank>.et``: ``PREFIX`` + this.
COMM_GROUP_SUFFIX = ".comm_group.json"
#: The name ``convert-all`` used before (``OUTDIR/comm_group.json``), still read.
LEGACY_COMM_GROUP_FILE = "comm_group.json"


def path_for(prefix: str | os.PathLike[str]) -> str:
    """The communicator group file of the job whose ranks are ``PREFIX.<rank>.et``."""
    return f"{os.fspath(prefix)}{COMM_GROUP_SUFFIX}"


def find(prefix: str | os.PathLike[str]) -> str | None:
    """The communicator group file of the job ``PREFIX.<rank>.et``: ``PREFIX.comm_group.json``,
    else ``comm_group.json`` in the same folder, else None."""
    prefix = os.fspath(prefix)
    for candidate in (path_for(prefix), os.path.join(os.path.dirname(prefix), LEGACY_COMM_GROUP_FILE)):
        if os.path.isfile(candidate):
            return candidate
    return None


def read(
    path: str | os.PathLike[str], option: str = "communicator group file", *, check_ids: bool = True
) -> dict[str, Any]:
    """A communicator group file as it is (``{"<id>": [ranks]}`` expected; the caller checks the
    members), read as a side input (``io.read_side_input``: a FIFO, device, directory or a file
    over its size bound is refused naming ``option``); raises ``TraceFormatError`` if it cannot be
    read, is not a JSON object, or (``check_ids``) has a key that is not a group id ASTRA-sim takes
    (``schema.astra.group_id``: ASCII decimal, 1 to 2,147,483,647: "²", "٣" and 10^23 are not)."""
    path = os.fspath(path)
    try:
        groups = json.loads(read_side_input(path, option))
    except (ValueError, RecursionError) as exc:
        raise TraceFormatError(path, f"not a JSON communicator group file: {exc}") from None
    if not isinstance(groups, dict):
        raise TraceFormatError(path, 'not a communicator group file: expected {"<id>": [ranks], ...}')
    for key in groups if check_ids else ():
        if not group_id(key):
            raise TraceFormatError(
                path,
                f"group id {shown(key)}: ASTRA-sim needs whole numbers > 0, in ASCII "
                f"decimal digits, at most {MAX_GROUP_ID:,}",
            )
    return groups


def shown(key: str, limit: int = 40) -> str:
    """A group id as a message quotes it: ``repr``, cut after ``limit`` characters."""
    return repr(key) if len(key) <= limit else f"{key[:limit]!r}... ({len(key):,} characters)"


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
            ranks = group_ranks(pg, world)
            if ranks is not None:
                members.setdefault(str(pg["pg_name"]), set()).update(ranks)
    result = CommGroups()
    for name in sorted(members, key=lambda n: (group_id(n) is None, group_id(n) or 0, n)):
        if name in ALL_RANKS_GROUPS:
            continue
        if group_id(name) is None:
            result.unusable.append(name)
        else:
            result.groups[name] = sorted(members[name])
    return result


def host_process_groups(path: str) -> dict[str, Any]:
    """The process groups a host trace's ``## process_group:init ##`` node lists (PyTorch 2.2+),
    as a ``distributedInfo`` (``pg_config`` entries of ``pg_name``, ``ranks``, ``pg_size``); {} if
    the trace has none. The nodes are read only up to that node (the observer writes it first)."""
    with JsonObjectStream(path, stream_keys={"nodes"}) as stream:
        for key, value in stream.items():
            if key != "nodes":
                continue
            for node in value:
                if isinstance(node, dict) and PROCESS_GROUP_INIT in str(node.get("name", "")):
                    return {"pg_config": init_groups(node)}
    return {}


def write(groups: CommGroups, path: str | OutputTarget) -> None:
    with atomic_text_output(path) as out:
        out.write(json.dumps(groups.groups, indent=2) + "\n")


def write_for_job(device_traces: Sequence[str], output_path: str) -> CommGroups:
    """The groups of a job's Kineto traces, written to ``output_path`` (checked first, never one of
    the traces)."""
    target = check_output(output_path, *device_traces)
    groups = from_distributed_info(distributed_info(path) for path in device_traces)
    write(groups, target)
    return groups
