"""Tiny Chakra jobs for the simulate tests, written with the real schema (mlc-chakra's et_def_pb2):
per rank a compute node, an all-reduce over all ranks, and a compute node after it."""

from __future__ import annotations

import json
from pathlib import Path

from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage


def _attr(name: str, **value: object) -> pb.AttributeProto:
    return pb.AttributeProto(name=name, **value)


def write_job(
    prefix: Path,
    ranks: int,
    *,
    comm_bytes: int = 1 << 20,
    compute_us: int = 50,
    roofline: bool = False,
    drop_rank: int | None = None,
    pg_name: str = "0",
    groups: dict[str, list[int]] | None = None,
) -> Path:
    """``prefix.<r>.et`` for r < ranks and ``prefix.comm_group.json``; returns ``prefix``.

    Rank r's first compute node takes ``compute_us * (r + 1)`` us (so ranks wait for each other in
    the all-reduce). ``roofline``: the compute nodes are non-CPU with ``num_ops`` and
    ``tensor_size``. ``drop_rank``: that rank's second compute node is non-CPU without ``num_ops``,
    which ASTRA-sim's roofline cannot issue (it drops the node; the rank never finishes)."""
    for rank in range(ranks):
        with open(f"{prefix}.{rank}.et", "wb") as fh:
            encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
            first = pb.Node(id=1, name="aten::mm", type=pb.COMP_NODE, duration_micros=compute_us * (rank + 1))
            first.attr.extend([_attr("is_cpu_op", bool_val=not roofline)])
            if roofline:
                first.attr.extend(
                    [_attr("num_ops", int64_val=10**9 * (rank + 1)), _attr("tensor_size", uint64_val=10**6)]
                )
            encodeMessage(fh, first)
            reduce = pb.Node(id=2, name="c10d::allreduce_", type=pb.COMM_COLL_NODE, data_deps=[1])
            reduce.attr.extend(
                [
                    _attr("is_cpu_op", bool_val=False),
                    _attr("comm_type", int64_val=pb.ALL_REDUCE),
                    _attr("comm_size", int64_val=comm_bytes),
                    _attr("pg_name", string_val=pg_name),
                ]
            )
            encodeMessage(fh, reduce)
            last = pb.Node(id=3, name="Optimizer.step", type=pb.COMP_NODE, duration_micros=compute_us, data_deps=[2])
            if drop_rank == rank:
                last.attr.extend([_attr("is_cpu_op", bool_val=False)])
            else:
                last.attr.extend([_attr("is_cpu_op", bool_val=not roofline)])
                if roofline:
                    last.attr.extend([_attr("num_ops", int64_val=10**9), _attr("tensor_size", uint64_val=10**6)])
            encodeMessage(fh, last)
    Path(f"{prefix}.comm_group.json").write_text(json.dumps(groups or {}))
    return prefix
