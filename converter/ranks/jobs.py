"""Keeping jobs apart: the traces of one folder, grouped by the job each records (``convert-all``).

A folder may hold the traces of several jobs (a 2-rank V100 job beside an 8-rank A100 one). What
each trace records of its job (``discover.JobMark``) tells them apart:

* Kineto traces by their ``distributedInfo`` world size and backend and their device's name;
* host traces by their default process group's size (``## process_group:init ##``) and schema;
* a trace whose rank is not below its own job's world size is not of a job with these ranks;
* where a rank has several traces of one kind and nothing recorded parts them, by the file names
  (what they share once the rank and the kind are taken out, ``discover.job_name``'s rule).

A trace that records nothing (no world size, say) joins the one job it agrees with. ``convert-all``
refuses a folder of several jobs, naming the files of each: one job of mixed ranks is never written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ..errors import ConverterError
from ..job.discover import FoundTraces, JobMark, job_stem

#: The fields compared, and how a message names them.
_FIELDS = (("world_size", "world size {}"), ("backend", "{}"), ("device", "{}"), ("schema", "schema {}"))
_SHOWN_FILES = 4  # per job, in the refusal; the rest are counted
_RECORDED = {"host": ("world_size", "schema"), "device": ("world_size", "backend", "device")}


def _key(mark: JobMark) -> tuple[object, ...]:
    return (mark.kind, *(getattr(mark, name) for name in _RECORDED.get(mark.kind, ())))


def _agrees(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def _by_marks(paths: Iterable[str], found: FoundTraces) -> list[list[str]]:
    """Traces of one kind grouped by what they record: exact keys first, then each trace that
    records less joined to the one group it agrees with (its own group where it agrees with
    several or none)."""
    groups: dict[tuple[object, ...], list[str]] = {}
    for path in paths:
        mark = found.marks.get(path)
        groups.setdefault(_key(mark) if mark is not None else ("?",), []).append(path)
    full = {k: v for k, v in groups.items() if None not in k and k != ("?",)}
    out = {k: list(v) for k, v in full.items()}
    for key, members in groups.items():
        if key in full:
            continue
        matching = [k for k in full if key == ("?",) or (len(key) == len(k) and _agrees(key, k))]
        if len(matching) == 1:
            out[matching[0]].extend(members)
        else:
            out[key] = list(members)
    return list(out.values())


def _rank_of(path: str, found: FoundTraces) -> int:
    for table in (found.hosts, found.devices):
        for rank, paths in table.items():
            if path in paths:
                return rank
    return -1


def _by_names(paths: list[str], found: FoundTraces) -> list[list[str]]:
    """``paths`` parted by their file names' job stems, where one rank has several traces and the
    stems part them into groups with one trace per rank each; else one group."""
    ranks = [_rank_of(p, found) for p in paths]
    if len(set(ranks)) == len(ranks):
        return [paths]
    stems: dict[str, list[str]] = {}
    for path in paths:
        stems.setdefault(job_stem(os.path.basename(path)), []).append(path)
    parts = list(stems.values())
    if len(parts) < 2 or any(len({_rank_of(p, found) for p in part}) != len(part) for part in parts):
        return [paths]
    return parts


def split(found: FoundTraces) -> list[list[str]]:
    """The folder's traces grouped by job (each job's host and device traces together)."""
    hosts = [p for paths in found.hosts.values() for p in paths]
    devices = [p for paths in found.devices.values() for p in paths]
    jobs: list[list[str]] = []
    for kind in (hosts, devices):
        for group in _by_marks(kind, found):
            jobs.extend(_by_names(sorted(group), found))
    jobs.extend(_beyond_world(found, jobs))
    if not hosts or not devices:
        return [j for j in jobs if j]
    return _pair_kinds(jobs, found)


def _beyond_world(found: FoundTraces, jobs: list[list[str]]) -> list[list[str]]:
    """Traces whose rank is not below their recorded world size, taken out of ``jobs`` (in place)
    as jobs of their own."""
    out: list[list[str]] = []
    for job in jobs:
        stray = [p for p in job if (m := found.marks.get(p)) and m.world_size and _rank_of(p, found) >= m.world_size]
        for path in stray:
            job.remove(path)
            out.append([path])
    return out


def _pair_kinds(jobs: list[list[str]], found: FoundTraces) -> list[list[str]]:
    """Host-trace jobs joined with the device-trace jobs of the same world size (where there is one
    of each, they are one job unless both record world sizes that differ)."""
    host_jobs = [j for j in jobs if j and found.marks.get(j[0], JobMark("host")).kind == "host"]
    device_jobs = [j for j in jobs if j and j not in host_jobs]
    if len(host_jobs) == 1 and len(device_jobs) == 1:
        worlds = (_world(host_jobs[0], found), _world(device_jobs[0], found))
        if None in worlds or worlds[0] == worlds[1]:
            return [[*host_jobs[0], *device_jobs[0]]]
    merged: list[list[str]] = []
    left = list(device_jobs)
    for job in host_jobs:
        world = _world(job, found)
        same = [d for d in left if world is not None and _world(d, found) == world]
        if len(same) == 1:
            left.remove(same[0])
            job = [*job, *same[0]]
        merged.append(job)
    return merged + left


def _world(job: list[str], found: FoundTraces) -> int | None:
    sizes = {m.world_size for p in job if (m := found.marks.get(p)) is not None and m.world_size}
    return sizes.pop() if len(sizes) == 1 else None


def describe(job: list[str], found: FoundTraces) -> str:
    """``world size 2, nccl, NVIDIA A100: a.json, b.json`` (what the job records, its files)."""
    said: list[str] = []
    for name, form in _FIELDS:
        values = sorted({str(v) for p in job if (m := found.marks.get(p)) is not None and (v := getattr(m, name))})
        if len(values) == 1:
            said.append(form.format(values[0]))
    names = sorted(os.path.basename(p) for p in job)
    shown = ", ".join(names[:_SHOWN_FILES]) + (
        f" (+{len(names) - _SHOWN_FILES} more)" if len(names) > _SHOWN_FILES else ""
    )
    ranks = sorted({_rank_of(p, found) for p in job})
    head = ", ".join([f"rank{'s' if len(ranks) > 1 else ''} {_ranges(ranks)}", *said])
    return f"{head}: {shown}"


def _ranges(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}..{ranks[-1]}"
    return ",".join(map(str, ranks))


def refuse_mixed(found: FoundTraces, directory: str) -> None:
    """Raise a ``ConverterError`` naming the files of each job where ``found`` holds several."""
    jobs = split(found)
    if len(jobs) < 2:
        return
    parts = "; ".join(f"job {n} ({describe(job, found)})" for n, job in enumerate(jobs, 1))
    raise ConverterError(
        f"{directory}: holds the traces of {len(jobs)} jobs, not one: {parts}; "
        "put each job's traces in a folder of its own and convert each folder"
    )
