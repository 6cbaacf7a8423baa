"""Finding each rank's traces: the host and Kineto traces in a directory (``discover``), the job
each records (``JobMark``), and a trace's kind and ``distributedInfo`` (a job's ``.et`` rank
files are ``files.py``'s).

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

from ..arguments import MAX_RANKS
from ..errors import ConverterError, TraceFormatError
from ..jsonstream import JsonObjectStream
from ..schema.distributed import PROCESS_GROUP_INIT, init_groups

TRACE_SUFFIXES = (".json", ".json.gz")
_SKIPPED_NAMES = ("merged", "linked")  # outputs of an earlier link: host-like, but not inputs
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[_-]?(\d+)", re.IGNORECASE)
#: The last number of a name, standing alone (``dlrm_eg_3``): not the end of a word (``rocm62``,
#: ``gpt2``), which names a version or a model, not a rank.
_LAST_NUMBER = re.compile(r"(?<![A-Za-z0-9])(\d+)(?!.*\d)")


@dataclass(frozen=True)
class JobMark:
    """What a trace records of the job it belongs to (None where it records nothing): a Kineto
    trace's ``distributedInfo`` world size and backend and its first device's name; a host
    trace's default process group size (``## process_group:init ##``) and schema."""

    kind: str  # "host" | "device"
    world_size: int | None = None
    backend: str | None = None
    device: str | None = None
    schema: str | None = None


@dataclass
class FoundTraces:
    """Trace paths by rank (several per rank is a problem the caller reports)."""

    hosts: dict[int, list[str]] = field(default_factory=dict)
    devices: dict[int, list[str]] = field(default_factory=dict)
    dist_info: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: What each trace says of its job (``JobMark``), by path: ``ranks/jobs.py`` keeps jobs apart.
    marks: dict[str, JobMark] = field(default_factory=dict)
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
        if not name.endswith(TRACE_SUFFIXES) or any(s in name for s in _SKIPPED_NAMES) or not os.path.isfile(path):
            continue
        try:
            kind, info, mark = _sniff_job(path)
        except ConverterError as exc:  # one corrupt file must not stop the other ranks
            found.unreadable.setdefault(rank_from_name(name), []).append(str(exc))
            continue
        if mark is not None:
            found.marks[path] = mark
        if kind == "device":
            rank = info.get("rank") if isinstance(info.get("rank"), int) else rank_from_name(name)
            if rank is not None and not 0 <= rank < MAX_RANKS:
                shown = rank if abs(rank) < 10**9 else f"{rank:.3g}"
                raise TraceFormatError(path, f"distributedInfo's rank {shown} is not a rank (0 to {MAX_RANKS - 1:,})")
            if rank is not None:
                found.devices.setdefault(rank, []).append(path)
                found.dist_info.setdefault(rank, info)
        elif kind == "host" and (rank := rank_from_name(name)) is not None:
            found.hosts.setdefault(rank, []).append(path)
    if not found.hosts and not found.devices:
        raise ConverterError(
            f"{directory}: no host or Kineto traces (*.json, *.json.gz) with a rank found "
            "(a Kineto trace's distributedInfo gives it, else a name like rank3_host.json, worker3.json, job_3.json)"
        )
    return found


#: What a trace's file name says besides the job: its kind, its format, the words around them.
_KIND_WORD = re.compile(r"(?:^|(?<=[_.-]))(?:host|device|kineto|et|trace|pt|chakra)(?=$|[_.-])", re.IGNORECASE)
DEFAULT_JOB_NAME = "trace"


def job_name(found: FoundTraces) -> str:
    """The capture's name, for its outputs: what its host traces' file names share once the rank
    and the kind are taken out (``gpt2_np2_rank0_host.json`` -> ``gpt2_np2``, ``dlrm_eg_3.json`` ->
    ``dlrm_eg``); ``trace`` where that leaves nothing (``rank0_host.json``) or the names disagree."""
    stems = {job_stem(os.path.basename(p)) for paths in found.hosts.values() for p in paths}
    stem = stems.pop() if len(stems) == 1 else ""
    return stem if stem and stem not in (".", "..") else DEFAULT_JOB_NAME


def job_stem(name: str) -> str:
    stem = name[: -len(".gz")] if name.endswith(".gz") else name
    stem = stem[: -len(".json")] if stem.endswith(".json") else stem
    match = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem)
    if match:
        stem = stem[: match.start()] + "_" + stem[match.end() :]
    stem = _KIND_WORD.sub("", stem)
    return re.sub(r"[_.-]{2,}", "_", stem).strip("_.- ")


def rank_from_name(name: str) -> int | None:
    stem = name[: -len(".gz")] if name.endswith(".gz") else name
    stem = stem[: -len(".json")]
    match = _RANK_IN_NAME.search(stem) or _LAST_NUMBER.search(stem)
    if match is None or len(match.group(1)) > len(str(MAX_RANKS)):  # a timestamp, an id: no rank
        return None
    rank = int(match.group(1))
    return rank if rank < MAX_RANKS else None


def distributed_info(path: str) -> dict[str, Any]:
    """A Kineto trace's ``distributedInfo`` (rank, world size, process groups); {} if none."""
    kind, info = _sniff(path)
    if kind != "device":
        raise ConverterError(f"{path}: not a Kineto device trace (no 'traceEvents')")
    return info


def trace_kind(path: str) -> str | None:
    """``"host"`` (a host or merged trace), ``"device"`` (a Kineto trace) or None, from the file's
    top-level keys (read up to the big array only)."""
    return _sniff(path)[0]


def _sniff(path: str) -> tuple[str | None, dict[str, Any]]:
    r"""('host' | 'device' | None, the Kineto trace's distributedInfo) from its top-level keys,
    read up to the big array (which is not decoded). A file that cannot be read or parsed up to
    there (a corrupt gzip, malformed JSON) raises ``ConverterError``\ s."""
    kind, info, _ = _sniff_job(path, nodes=0)
    return kind, info


#: How many of a host trace's first nodes are searched for ``## process_group:init ##`` (the
#: observer writes it first: node 1 or 2 of every host trace in tests/data).
_INIT_WITHIN = 16


def _sniff_job(path: str, nodes: int = _INIT_WITHIN) -> tuple[str | None, dict[str, Any], JobMark | None]:
    """``_sniff`` and the ``JobMark`` of the trace (from its first ``nodes`` nodes for a host trace)."""
    info: dict[str, Any] = {}
    top: dict[str, Any] = {}
    with JsonObjectStream(path, stream_keys={"traceEvents", "nodes"}) as stream:
        for key, value in stream.items():
            if key == "distributedInfo" and isinstance(value, dict):
                info = value
            elif key == "nodes":
                return "host", info, _host_mark(top, value, nodes)
            elif key == "traceEvents":  # Kineto writes distributedInfo before it
                return "device", info, _device_mark(top, info)
            elif key in ("deviceProperties", "schema"):
                top[key] = value
    return None, info, None


def _whole(value: Any) -> int | None:
    return value if type(value) is int and value >= 1 else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _device_mark(top: dict[str, Any], info: dict[str, Any]) -> JobMark:
    devices = top.get("deviceProperties")
    first = devices[0] if isinstance(devices, list) and devices and isinstance(devices[0], dict) else {}
    return JobMark("device", _whole(info.get("world_size")), _text(info.get("backend")), _text(first.get("name")))


def _host_mark(top: dict[str, Any], nodes: Any, within: int) -> JobMark:
    world = None
    for n, node in enumerate(nodes):
        if n >= within:
            break
        if isinstance(node, dict) and PROCESS_GROUP_INIT in str(node.get("name", "")):
            sizes = {str(g.get("pg_name")): g.get("pg_size") for g in init_groups(node) if isinstance(g, dict)}
            world = _whole(sizes.get("0", max((s for s in sizes.values() if type(s) is int), default=None)))
            break
    return JobMark("host", world, schema=_text(top.get("schema")))
