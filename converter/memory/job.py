"""A job's memory, rank by rank: from its raw traces (a folder, as ``convert-all`` takes) or from a
converted job's ``PREFIX.<rank>.memory.json`` sidecars (``convert --memory``, ``convert-all
--memory``, ``scale``, ``compact`` write them)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import ConverterError, TraceFormatError
from ..io import atomic_output, check_output
from ..job import discover, files
from .host import read_host
from .kineto import read_memory
from .profile import (
    NO_MEMORY_FACTS,
    RankMemory,
    check_rank,
    encode,
    et_sidecar_path,
    from_host,
    from_kineto,
    read_sidecar,
    sidecar_path,
)


def rank_memory(rank: int, host: str | None, device: str | None) -> RankMemory:
    """One rank's memory from its host trace and/or Kineto trace (either may be None): Kineto's
    memory events over the host's pre-existing storages where both are there. Raises a
    ``ConverterError`` saying what is missing and how to capture it when neither holds any."""
    kineto = read_memory(device) if device is not None else None
    tensors = read_host(host) if host is not None else None
    if tensors is not None and not tensors.storages:
        tensors = None
    if kineto is not None and kineto.events:
        return from_kineto(rank, kineto, tensors)
    if tensors is not None:
        return from_host(rank, tensors)
    named = ", ".join(p for p in (host, device) if p)
    if device is not None and host is None:
        raise TraceFormatError(
            named,
            "no memory events: capture with Kineto's profile_memory=True (chakra-profile --profile-memory), "
            "or give the host execution trace too",
        )
    raise TraceFormatError(named or f"rank {rank}", NO_MEMORY_FACTS)


def from_folder(folder: str) -> list[RankMemory]:
    """Every rank of the raw traces in ``folder`` (one host and/or one Kineto trace per rank)."""
    found = discover.discover(folder)
    out = []
    for rank in found.ranks():
        hosts, devices = found.hosts.get(rank, []), found.devices.get(rank, [])
        if len(hosts) > 1 or len(devices) > 1:
            raise ConverterError(f"{folder}: rank {rank} has several traces of one kind: {[*hosts, *devices]}")
        out.append(rank_memory(rank, hosts[0] if hosts else None, devices[0] if devices else None))
    return out


def from_sidecars(prefix: str) -> list[RankMemory]:
    """Every rank of the converted job ``PREFIX.<r>.et`` from its memory sidecars."""
    ranks = files.job_rank_files(prefix)
    out = []
    for r in range(len(ranks)):
        path = sidecar_path(prefix, r)
        if not os.path.isfile(path):
            raise TraceFormatError(
                path,
                "missing: the job's memory facts are written beside each rank by convert and convert-all "
                "with `memory`, by scale and by compact (or give the folder of raw traces)",
            )
        memory = read_sidecar(path)
        check_rank(path, memory, r)
        if os.stat(ranks[r]).st_mtime > os.stat(path).st_mtime + 2:
            raise TraceFormatError(
                path,
                f"older than {ranks[r]}: written for an earlier job (convert, scale or compact again)",
            )
        out.append(memory)
    return out


def job_memory(source: str) -> list[RankMemory]:
    """A folder of raw traces, or the prefix of a converted job."""
    if os.path.isdir(source):
        return from_folder(source)
    return from_sidecars(source)


def write_sidecar(et_path: str, memory: RankMemory) -> str:
    """Write ``memory`` beside the converted rank ``et_path`` (atomically); returns its path."""
    path = et_sidecar_path(et_path)
    with atomic_output(check_output(path, et_path)) as out:
        out.write(encode(memory))
    return path


def write_job_sidecars(memories: Sequence[RankMemory], outdir: str, prefix: str, ranks: Sequence[int]) -> list[str]:
    """The sidecars of ``convert-all --memory`` (``memories`` from ``from_folder``, read before
    the conversion): each converted rank's beside its ``.et``."""
    by_rank = {m.rank: m for m in memories}
    return [write_sidecar(os.path.join(outdir, f"{prefix}.{r}.et"), by_rank[r]) for r in ranks if r in by_rank]


def copy_sidecar(in_et: str, out_et: str) -> str | None:
    """``compact``'s: the same memory beside the compacted rank (None where ``in_et`` has none)."""
    source = et_sidecar_path(in_et)
    if not os.path.isfile(source):
        return None
    return write_sidecar(out_et, read_sidecar(source))
