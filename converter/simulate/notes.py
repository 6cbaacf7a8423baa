"""What a simulated step cannot tell by itself: one line each, at ``simulate`` and in its JSON.

A what-if can look like an answer and be none (issue 35): an A100 and an H100 giving the same step
to the microsecond, a V100 job whose kernels mostly became CPU ops, 404 all-reduces of 0 bytes.
Read from the slowest rank's ``.et`` after the run:

* **kernels left as CPU ops**: a Kineto conversion with ``--roofline --target accelerator``
  records (GlobalMetadata ``gpu_as_cpu``) the kernels it could give no roofline values and wrote as
  CPU ops, replayed for their traced time on the host's timeline: no accelerator changes them; the
  line gives their number and their share of the simulated step;
* **collectives with no bytes**: the network moves nothing for them; their time is only latency;
* **a step bound by the host**: with a roofline or a device-profile what-if, when the CPU ops'
  durations make up nearly all of the step, a faster GPU cannot shorten it: that is the answer,
  not a failure;
* **a what-if** (``kineto-whatif`` files, ``--device-profile``): the device and profile it was
  made for; it is compared with the untraced step, not the traced one the file records.

Two accelerators giving the same step are caught by the sweep (``sweep.py``).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ConverterError
from ..et.decode import CPU_OP_TRUE, read_et
from ..schema.chakra import NodeType
from .job import Job

WHATIF_SCHEMA_PREFIX = "kineto-whatif."
HOST_BOUND = 0.9  # CPU ops' share of the step past which it is bound by the host


def step_notes(job: Job, rank: int, step_ns: int, roofline: bool) -> list[str]:
    """The notes on rank ``rank``'s simulated step of ``step_ns`` (``roofline``: a roofline timed it)."""
    try:
        trace = read_et(job.rank_file(rank))
    except (ConverterError, OSError):
        return []
    notes: list[str] = []
    metadata = trace.metadata
    whatif = _json(metadata.get("whatif"))
    as_cpu = _json(metadata.get("gpu_as_cpu"))
    if as_cpu is not None and type(as_cpu.get("kernels")) is int and type(as_cpu.get("us")) is int:
        share = as_cpu["us"] * 1000 / step_ns if step_ns else 0.0
        notes.append(
            f"rank {rank}: {as_cpu['kernels']:,} kernel(s) are CPU ops (no shapes to give them roofline values): "
            f"{as_cpu['us'] / 1e3:,.3f} ms of traced time on the host's timeline, {share:.0%} of the simulated step; "
            "no accelerator changes them (capture with record_shapes, or give a device profile's source_profile)"
        )
    colls = [row for row, t in enumerate(trace.types) if t == NodeType.COMM_COLL_NODE]
    empty = sum(1 for row in colls if not trace.comm.get(row, {}).get("comm_size"))
    if empty:
        notes.append(
            f"rank {rank}: {empty:,} of {len(colls):,} collective(s) record 0 bytes: the network moves nothing for "
            "them, so the communication time is understated (the trace recorded no message sizes)"
        )
    if (roofline or whatif is not None) and step_ns:
        cpu_ns = 1000 * sum(
            d
            for d, t, cpu in zip(trace.durations, trace.types, trace.cpu_ops, strict=True)
            if t == NodeType.COMP_NODE and cpu == CPU_OP_TRUE
        )
        if cpu_ns >= HOST_BOUND * step_ns:
            notes.append(
                f"rank {rank}: the step is bound by the host: its CPU ops take {cpu_ns / 1e6:,.3f} ms of the "
                f"{step_ns / 1e6:,.3f} ms simulated ({min(cpu_ns / step_ns, 1):.0%}); a faster GPU cannot shorten it "
                "(that is the answer, not a failure)"
            )
    schema = metadata.get("schema")
    if whatif is not None and isinstance(schema, str) and schema.startswith(WHATIF_SCHEMA_PREFIX):
        traced = metadata.get("finish_ts", 0) - metadata.get("start_ts", 0)
        notes.append(
            f"what-if for {whatif.get('device')} (device profile {whatif.get('profile')}"
            + (f", scaled from {whatif.get('source')}" if whatif.get("source") else "")
            + f"): the traced step was {traced / 1e3:,.3f} ms, tracing included; compare the what-if with the "
            "untraced step (chakra-profile's summary), not with it"
        )
    return notes


def _json(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def same_steps(points: list[tuple[str, int]]) -> list[str]:
    """Sweep points (value, step ns) of different accelerators that gave the same step."""
    by_step: dict[int, list[str]] = {}
    for value, step in points:
        by_step.setdefault(step, []).append(value)
    return [
        f"accelerators {', '.join(values)} give the same step ({step / 1e6:,.3f} ms): nothing in the job is "
        "timed by the roofline that differs between them (its compute nodes are CPU ops, or it is bound by the "
        "host or the network); see each point's notes"
        for step, values in by_step.items()
        if len(values) > 1
    ]
