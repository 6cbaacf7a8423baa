"""Finding each rank's host and Kineto traces in a directory.

A file is a Kineto (device) trace if its top-level object has ``traceEvents``, a host trace if it
has ``nodes`` (other JSON files, such as ``chakra-profile``'s summary, are ignored). The rank of a
Kineto trace comes from its ``distributedInfo``, else from the file name (``rank3``, ``rank-3``, ``worker3``,
or the last number); a host trace's from its name. Outputs of an earlier link (names with
``merged`` or ``linked``) are not inputs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConverterError
from ..jsonstream import JsonObjectStream

TRACE_SUFFIXES = (".json", ".json.gz")
_SKIPPED_NAMES = ("merged", "linked")  # outputs of an earlier link: host-like, but not inputs
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)
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
            kind, info = _sniff(path)
        except ConverterError as exc:  # one corrupt file must not stop the other ranks
            found.unreadable.setdefault(rank_from_name(name), []).append(str(exc))
            continue
        if kind == "device":
            rank = info.get("rank") if isinstance(info.get("rank"), int) else rank_from_name(name)
            if rank is not None:
                found.devices.setdefault(rank, []).append(path)
                found.dist_info.setdefault(rank, info)
        elif kind == "host" and (rank := rank_from_name(name)) is not None:
            found.hosts.setdefault(rank, []).append(path)
    if not found.hosts and not found.devices:
        raise ConverterError(f"{directory}: no host or Kineto traces (*.json, *.json.gz) with a rank found")
    return found


def rank_from_name(name: str) -> int | None:
    stem = name[: -len(".gz")] if name.endswith(".gz") else name
    stem = stem[: -len(".json")]
    match = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem)
    return int(match.group(1)) if match else None


def distributed_info(path: str) -> dict[str, Any]:
    """A Kineto trace's ``distributedInfo`` (rank, world size, process groups); {} if none."""
    kind, info = _sniff(path)
    if kind != "device":
        raise ConverterError(f"{path}: not a Kineto device trace (no 'traceEvents')")
    return info


def _sniff(path: str) -> tuple[str | None, dict[str, Any]]:
    r"""('host' | 'device' | None, the Kineto trace's distributedInfo) from its top-level keys,
    read up to the big array (which is not decoded). A file that cannot be read or parsed up to
    there (a corrupt gzip, malformed JSON) raises ``ConverterError``\ s."""
    info: dict[str, Any] = {}
    with JsonObjectStream(path, stream_keys={"traceEvents", "nodes"}) as stream:
        for key, value in stream.items():
            if key == "distributedInfo" and isinstance(value, dict):
                info = value
            elif key == "nodes":
                return "host", info
            elif key == "traceEvents":  # Kineto writes distributedInfo before it
                return "device", info
    return None, info
