"""The size of the job a trace comes from, as the traces record it.

A rank's Kineto trace says it in ``distributedInfo.world_size``; its host trace in the
``## process_group:init ##`` node (the default group's ``group_size``, PyTorch 2.2+). A rank
converted with ``--astra-sim`` keeps it in its GlobalMetadata record (``world_size``), so that a
job traced on rank 0 alone still says how many ranks it had: ``scale`` takes it as its default
rank count, and ``simulate`` of fewer rank files than that simulates the job at its size.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConverterError
from ..et.decode import iter_records, metadata_of
from ..et.encode import WORLD_SIZE
from .commgroups import host_process_groups


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
