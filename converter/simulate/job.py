"""A job on disk as ASTRA-sim reads it: ``PREFIX.<rank>.et`` for ranks 0..N-1, and its
communicator group file.

The group file is, in this order: the one named (``--comm-groups``), ``PREFIX.comm_group.json``
beside the ranks (the convention of ``chakra-profile --convert`` and ``scale``), the older
``comm_group.json`` of ``convert-all`` in the same folder; none means only the default group.
It must be ``{"<id>": [ranks]}`` with ids > 0 and ranks of this job (ASTRA-sim asserts the
first, and indexes its NPUs with the second).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import ConverterError, TraceFormatError
from ..et.decode import count_nodes
from ..job.files import job_rank_files
from ..ranks import commgroups

_SAMPLE = 8  # files whose nodes are counted to estimate the job's (progress only)


@dataclass(frozen=True)
class Job:
    prefix: str
    ranks: int
    comm_groups: str | None  # the group file, if any
    groups: dict[str, list[int]]
    #: The rank files where they are not ``PREFIX.<rank>.et``: the one file ``PREFIX.<r>.et`` of a
    #: job captured on rank r alone (``job.files.job_rank_files``), its rank 0 here.
    files: tuple[str, ...] = ()

    def rank_file(self, rank: int) -> str:
        return self.files[rank] if self.files else f"{self.prefix}.{rank}.et"

    def estimate_nodes(self) -> int:
        """The job's node count: exact up to 8 ranks, else the counted ranks' nodes per byte times
        the job's bytes (for a progress bar; never an error: whether a terminal shows the bar
        must not change what is refused)."""
        count = min(_SAMPLE, self.ranks)
        picks = sorted({round(k * (self.ranks - 1) / max(1, count - 1)) for k in range(count)})
        counted = sum(_nodes_or_none(self.rank_file(r)) for r in picks)
        if len(picks) == self.ranks:
            return counted
        sampled = sum(os.path.getsize(self.rank_file(r)) for r in picks)
        total = sum(os.path.getsize(self.rank_file(r)) for r in range(self.ranks))
        return round(counted * total / max(1, sampled))


def _nodes_or_none(path: str) -> int:
    """The nodes of a rank file, for an estimate: 0 for a file that cannot be read through (the
    check, ``preflight.check_job``, judges the files, the same with or without a progress bar)."""
    try:
        return count_nodes(path)
    except TraceFormatError:
        return 0


def find_job(prefix: str, comm_groups: str | None = None) -> Job:
    """The ranks of ``prefix`` (all of 0..N-1 must be there: ``job.files.job_rank_files``)
    and its communicator groups."""
    if not prefix:
        raise ConverterError("the job prefix is empty (PREFIX of PREFIX.<rank>.et)")
    if os.path.isdir(prefix):
        raise TraceFormatError(prefix, f"a folder, not a job: name a job in it ({_jobs_in(prefix)})")
    directory, base = os.path.split(prefix)
    directory = directory or "."
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        raise TraceFormatError(prefix, f"no such directory {directory}") from None
    except NotADirectoryError:
        raise TraceFormatError(prefix, f"{directory} is not a directory") from None
    except OSError as exc:
        raise TraceFormatError(prefix, f"cannot list {directory}: {exc.strerror or exc}") from None
    pattern = re.compile(re.escape(base) + r"\.(0|[1-9]\d*)\.et$")
    ranks = sorted(int(m.group(1)) for m in map(pattern.match, names) if m is not None)
    if not ranks:
        raise TraceFormatError(prefix, _nothing_matches(prefix, directory, base, names))
    paths = job_rank_files(prefix)
    for path in paths:  # a gap (a stray PREFIX.30000000.et) refused by name, at no cost
        if not os.path.isfile(path):
            raise TraceFormatError(path, "not a regular file")
        if not os.access(path, os.R_OK):
            raise TraceFormatError(path, "cannot open: Permission denied")
    count = len(ranks)
    groups_path = comm_groups if comm_groups is not None else commgroups.find(prefix)
    option = "`comm_groups`" if comm_groups is not None else "communicator group file"
    groups = {} if groups_path is None else read_groups(groups_path, count, option)
    return Job(prefix, count, groups_path, groups, tuple(paths) if paths != [f"{prefix}.0.et"][: len(paths)] else ())


_RANK_FILE = re.compile(r"(.+)\.(?:0|[1-9]\d*)\.et$")


def prefixes(names: list[str]) -> list[str]:
    """The job prefixes among file ``names`` (those of ``<prefix>.<rank>.et`` files), sorted."""
    return sorted({m.group(1) for m in map(_RANK_FILE.match, names) if m is not None})


def _jobs_in(directory: str) -> str:
    try:
        names = os.listdir(directory)
    except OSError as exc:
        return f"cannot list it: {exc.strerror or exc}"
    found = prefixes(names)
    if not found:
        return "it holds no <prefix>.<rank>.et files"
    return "its jobs: " + _listed([os.path.join(directory, p) for p in found])


def _listed(items: list[str], most: int = 6) -> str:
    return ", ".join(items[:most]) + (f", ... ({len(items)} in all)" if len(items) > most else "")


def _nothing_matches(prefix: str, directory: str, base: str, names: list[str]) -> str:
    """Why a prefix names no rank file, and what the folder holds instead."""
    said = f"no {base}.<rank>.et files in {directory}"
    rank_file = re.fullmatch(r"(.+)\.(?:0|[1-9]\d*)\.et", prefix)
    if rank_file is not None:
        return f"{said}: name the job, not a rank's file (PREFIX of PREFIX.<rank>.et: {rank_file.group(1)})"
    if os.path.isfile(prefix):
        hint = (
            " (a trace to convert first: convert --astra-sim, or convert-all --astra-sim)"
            if prefix.endswith((".json", ".json.gz"))
            else ""
        )
        return f"{said}: {prefix} is one file{hint}, not a job prefix"
    found = prefixes(names)
    if found:
        return f"{said}; the jobs there: " + _listed(
            [os.path.join(directory, p) if directory != "." else p for p in found]
        )
    return f"{said}, nor any other job's"


def read_groups(path: str, ranks: int, option: str = "communicator group file") -> dict[str, list[int]]:
    """A communicator group file (named by ``option`` in messages), checked against a job of ``ranks`` ranks."""
    data = commgroups.read(path, option)
    groups: dict[str, list[int]] = {}
    for key, members in data.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) > 0):
            raise TraceFormatError(path, f"group id {key!r}: ASTRA-sim needs whole numbers > 0")
        if not (
            isinstance(members, list)
            and members
            and all(isinstance(m, int) and not isinstance(m, bool) for m in members)
        ):
            raise TraceFormatError(path, f"group {key}: expected a non-empty list of ranks")
        outside = [m for m in members if not 0 <= m < ranks]
        if outside:
            raise TraceFormatError(
                path,
                f"group {key} names rank {outside[0]}, but the job has ranks 0..{ranks - 1} "
                "(a group file of another job?)",
            )
        if len(set(members)) != len(members):
            raise TraceFormatError(path, f"group {key} lists a rank twice")
        groups[key] = list(members)
    return groups
