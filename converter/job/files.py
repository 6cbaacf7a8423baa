"""A job's rank files on disk: ``PREFIX.0.et`` .. ``PREFIX.<N-1>.et``, found by one listing, every
rank there or the one file of a job captured on one rank; rank files of another job refused."""

from __future__ import annotations

import os
import re

from ..errors import ConverterError, OutputError, TraceFormatError
from .metadata import et_job


def et_ranks(folder: str, base: str) -> list[int]:
    """The ranks ``r`` of the files ``base.<r>.et`` in ``folder`` (decimal, no leading zero),
    sorted: one listing, no file opened. Raises ``OSError`` if the folder cannot be listed."""
    pattern = re.compile(re.escape(base) + r"\.(0|[1-9][0-9]*)\.et")
    return sorted(int(m.group(1)) for m in map(pattern.fullmatch, os.listdir(folder or ".")) if m)


def job_rank_files(prefix: str) -> list[str]:
    """``PREFIX.0.et`` .. ``PREFIX.<N-1>.et``, every one of them; or the one file ``PREFIX.<r>.et``
    that records (GlobalMetadata ``rank`` and ``world_size``) being rank r of a bigger job.

    A gap is refused, naming the first missing rank and the first file after it (a stray
    ``PREFIX.30000000.et`` beside ranks 0 and 1 is named as such): the cost is the listing and a
    sort, never anything of the size of the largest rank number (``set(range(N))`` took 3 GB)."""
    folder, base = os.path.split(prefix)
    if not base:
        raise ConverterError(f"{prefix!r}: name a prefix of .et files (PREFIX for PREFIX.0.et, PREFIX.1.et, ...)")
    try:
        ranks = et_ranks(folder, base)
    except OSError as exc:
        raise TraceFormatError(folder or ".", f"cannot list: {exc.strerror or exc}") from None
    if not ranks:
        named = re.fullmatch(r"(.+)\.[0-9]+\.et", base)
        hint = f" (name the job's prefix, {named.group(1)}, not one of its files)" if named else ""
        raise TraceFormatError(prefix, f"no ranks found: no {base}.<rank>.et in {folder or '.'}{hint}")
    gap = first_gap(ranks)
    if gap is not None and len(ranks) == 1 and one_rank_of_job(f"{prefix}.{ranks[0]}.et", ranks[0]):
        return [f"{prefix}.{ranks[0]}.et"]  # one captured rank of a bigger job: its replicas run the job
    if gap is not None:
        last, after = ranks[-1], ranks[gap]
        there = f"ranks 0..{gap - 1} are there, then" if gap else "the first rank file is"
        raise TraceFormatError(
            f"{prefix}.{gap}.et",
            f"rank {gap} of 0..{last} is missing ({last + 1 - len(ranks):,} missing): {there} "
            f"{base}.{after}.et (a job's ranks are {base}.0.et .. {base}.<N-1>.et; "
            "a stray or another job's rank file?)",
        )
    return [f"{prefix}.{rank}.et" for rank in ranks]


def one_rank_of_job(path: str, rank: int) -> bool:
    """Whether ``path`` records (GlobalMetadata ``rank``, ``world_size``) that it is rank ``rank``
    of a job of more ranks: a job captured on that rank alone (``ranks/fullsize.py``)."""
    try:
        job = et_job(path)
    except ConverterError:
        return False
    world = job.get("world_size")
    return job.get("rank") == rank and type(world) is int and world > rank


def first_gap(ranks: list[int]) -> int | None:
    """The first number missing from the sorted, distinct ``ranks`` (None: they are 0..N-1)."""
    if not ranks or ranks[-1] == len(ranks) - 1:
        return None
    low, high = 0, len(ranks) - 1  # ranks[i] == i holds for a prefix of the list: find its end
    while low < high:
        middle = (low + high) // 2
        if ranks[middle] == middle:
            low = middle + 1
        else:
            high = middle
    return low


def foreign_rank_files(out_prefix: str, ranks: int, option: str) -> None:
    """Refuse ``OUT.<r>.et`` files with ``r >= ranks``: another job's rank files left beside the
    ``ranks`` new ones would make one job of the two (``option`` says where the count came from)."""
    folder, base = os.path.split(out_prefix)
    try:
        stale = [r for r in et_ranks(folder, base) if r >= ranks]
    except OSError:  # the output checks say what is wrong with the folder
        return
    if stale:
        raise OutputError(
            f"{out_prefix}.{stale[0]}.et",
            f"exists ({len(stale)} rank file(s) of {base} beyond "
            f"{option}): remove them or choose another prefix, so two jobs do not mix",
        )
