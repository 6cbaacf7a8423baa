"""The size of the job a trace comes from, as the traces record it.

A rank's Kineto trace says it in ``distributedInfo.world_size``; its host trace in the
``## process_group:init ##`` node (the default group's ``group_size``, PyTorch 2.2+). A rank
converted with ``--astra-sim`` keeps it in its GlobalMetadata record (``world_size``), so that a
job traced on rank 0 alone still says how many ranks it had: ``scale`` takes it as its default
rank count, and ``simulate`` of fewer rank files than that simulates the job at its size.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import ConverterError
from ..et.decode import iter_records, metadata_of
from ..et.encode import PROCESS_GROUPS, WORLD_SIZE
from ..job.metadata import et_job as et_job
from ..job.metadata import job_metadata as job_metadata
from .commgroups import host_process_groups

if TYPE_CHECKING:
    from ..convert.pipeline import ConvertOptions


_RANK_SUFFIX = re.compile(r"\.(0|[1-9][0-9]*)\.et")


def rank_output(output: str, rank: int | None, world: int | None) -> str:
    """The output named for its rank, as ASTRA-sim and ``simulate`` read a job
    (``PREFIX.<rank>.et``): ``out.et`` or ``out`` -> ``out.<rank>.et`` for a trace of one rank of a
    job of several; ``output`` itself where it names a rank already or the trace records no job."""
    if rank is None or world is None or world < 2 or _RANK_SUFFIX.search(output[-24:]) is not None:
        return output
    base = output[: -len(".et")] if output.endswith(".et") else output
    return output if not os.path.basename(base) else f"{base}.{rank}.et"


def host_job_options(options: ConvertOptions, path: str) -> ConvertOptions:
    """``options`` with the job a host (or merged) trace records, for ``astra_sim`` output: the
    default group's size as ``world_size`` and the groups of its ``## process_group:init ##``
    node as ``process_groups`` (its own rank it does not record: ``rank`` says it)."""
    if not options.astra_sim:
        return options
    try:
        info = host_process_groups(path)
    except ConverterError:  # the conversion reports what is wrong with the file
        return options
    world = options.world_size or host_world_size(path)
    job = job_metadata({**info, "world_size": world}, options.rank)
    return replace(
        options,
        world_size=job.get(WORLD_SIZE, options.world_size),
        process_groups=options.process_groups or job.get(PROCESS_GROUPS),
    )


def host_world_size(host_path: str) -> int | None:
    """The default process group's size in a host trace's ``## process_group:init ##`` node, else
    the largest group's; None where the trace records none."""
    try:
        groups = host_process_groups(host_path).get("pg_config") or []
    except ConverterError:
        return None
    sizes = {str(g.get("pg_name")): g.get("pg_size") for g in groups if type(g.get("pg_size")) is int}
    if not sizes:
        return None
    size = sizes.get("0", max(sizes.values()))
    return size if type(size) is int and size >= 1 else None


def et_world_size(path: str) -> int | None:
    """The ``world_size`` a .et file's GlobalMetadata record holds (None without one)."""
    for _, message in iter_records(path):
        value: Any = metadata_of(path, message).get(WORLD_SIZE)
        return value if type(value) is int and value >= 1 else None
    return None
