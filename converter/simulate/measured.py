"""The measured step a ``.et`` file records, to hold a replay against.

A Kineto conversion (``kineto/write.py``, schema ``kineto-replay.*``) writes the step it converted
as the GlobalMetadata's ``start_ts`` (the ProfilerStep's start) and ``finish_ts`` (the later of its
end and the end of the GPU work it launched), in microseconds: the measured step is their
difference. Other files (host-trace conversions) record no step: nothing is measured.
"""

from __future__ import annotations

from ..errors import ConverterError
from ..et.decode import read_metadata
from .job import Job

KINETO_SCHEMA_PREFIX = "kineto-replay."


def measured_steps(job: Job) -> dict[int, int]:
    """rank -> measured step in ns, for the ranks whose file records one."""
    found: dict[int, int] = {}
    for rank in range(job.ranks):
        try:
            metadata = read_metadata(job.rank_file(rank))
        except (ConverterError, OSError):
            continue
        schema, start, finish = metadata.get("schema"), metadata.get("start_ts"), metadata.get("finish_ts")
        if (
            isinstance(schema, str)
            and schema.startswith(KINETO_SCHEMA_PREFIX)
            and type(start) is int
            and type(finish) is int
            and finish >= start
        ):
            found[rank] = (finish - start) * 1000
    return found
