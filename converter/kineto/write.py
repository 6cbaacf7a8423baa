"""A ``KinetoGraph`` as a Chakra ``.et`` file, ready for ASTRA-sim.

Every node gets ``duration_micros`` and ``is_cpu_op`` (host nodes true, GPU and communication nodes
false); communication nodes ``comm_type`` (collectives), ``comm_size`` in bytes, ``pg_name`` (a
decimal group id; ``"0"`` is every rank) and, for sends and receives, ``comm_src``, ``comm_dst``
and ``comm_tag``; with ``--roofline``, GPU compute nodes ``num_ops`` and ``tensor_size``. The
output depends on the trace alone (no conversion time is written).
Dependencies are ``data_deps`` and always name earlier nodes, so the file has
no cycle and no dangling id; there is no METADATA node. The GlobalMetadata record comes first,
with what the trace's ``distributedInfo`` says of its job: ``world_size``, ``rank``, ``process_groups``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import IO, Any

from ..compact.rewrite import CompactResult, compact_temporary
from ..et import encode, wire
from ..io.output import OutputTarget, atomic_output
from ..schema.chakra import NodeType
from .graph import KinetoGraph, Node

SCHEMA = "kineto-replay.1"
WHATIF_SCHEMA = "kineto-whatif.1"  # re-timed from a device profile: the step is a what-if, not a replay
NOTE_WHATIF, NOTE_GPU_AS_CPU, NOTE_BASELINE = encode.NOTE_ATTRS  # GlobalMetadata notes (JSON strings)
_IS_CPU_OP = wire.attr_name("is_cpu_op")
_CPU = wire.bool_attr(_IS_CPU_OP, True)
_GPU = wire.bool_attr(_IS_CPU_OP, False)


def notes(graph: KinetoGraph) -> dict[str, str]:
    """What ``simulate`` says about the step (``simulate/notes.py``): the what-if's device and
    profile; the kernels written as CPU ops (no roofline values) and their traced time; what the
    replay is judged against (``baseline.py``, ``simulate/measured.py``)."""
    found: dict[str, str] = {}
    if graph.whatif is not None:
        w = graph.whatif
        found[NOTE_WHATIF] = json.dumps({"device": w.device, "profile": w.profile, "source": w.source})
    roofline = graph.roofline
    if roofline is not None and roofline.accelerator and roofline.none:
        found[NOTE_GPU_AS_CPU] = json.dumps({"kernels": roofline.none, "us": roofline.replayed_us})
    if graph.baseline is not None:
        found[NOTE_BASELINE] = graph.baseline
    return found


def node_bytes(node: Node, rank: int | None) -> bytes:
    head = encode.head(node.id, encode.name_field(node.name, "name"), node.type, (), node.deps)
    body = encode.duration(node.dur) + (_CPU if node.cpu else _GPU)
    if node.roofline is not None:
        body += encode.roofline_attrs(*node.roofline)
    info = node.comm
    if info is not None:
        body += encode.comm_attrs(node.type, info.comm_type, info.size, info.pg_name)
        if node.type == NodeType.COMM_SEND_NODE:
            body += encode.p2p_attrs(rank, info.peer, node.tag)
        elif node.type == NodeType.COMM_RECV_NODE:
            body += encode.p2p_attrs(info.peer, rank, node.tag)
    return encode.node_record(head, body)


def write(
    graph: KinetoGraph,
    output: str | os.PathLike[str] | OutputTarget,
    rank: int | None,
    pid: int = 0,
    job: Mapping[str, Any] | None = None,
) -> None:
    """Write ``graph`` to ``output`` atomically (nothing is left behind on an error). ``job``: the
    GlobalMetadata's job attributes (``job.metadata.job_metadata``: world size, rank, groups)."""
    with atomic_output(output) as out:
        _write(out, graph, rank, pid, job)


def write_compacted(
    graph: KinetoGraph, target: OutputTarget, rank: int | None, pid: int = 0, job: Mapping[str, Any] | None = None
) -> CompactResult:
    """Write ``graph`` to an unnamed temporary file and compact it into ``target`` (``--compact``:
    the output never holds the uncompacted graph)."""
    with compact_temporary(target) as (out, finish):
        _write(out, graph, rank, pid, job)
        return finish()


def _write(out: IO[bytes], graph: KinetoGraph, rank: int | None, pid: int, job: Mapping[str, Any] | None) -> None:
    start = max(0, round(graph.step_start))
    metadata = {
        "schema": SCHEMA if graph.whatif is None else WHATIF_SCHEMA,
        "pid": pid,
        "time": "",
        "start_ts": start,
        "finish_ts": start + round(graph.measured_us),
    }
    out.write(encode.global_metadata({**metadata, **(job or {})}, notes(graph)))
    for node in graph.nodes:
        out.write(node_bytes(node, rank))
