"""The compact record of one node, or of many read together: what the graph and the writer need;
the JSON is dropped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .collectives import HostCollective
from .nodes import OpKind


@dataclass(frozen=True, slots=True)
class HostOp:
    """A ``c10d::`` or ``gloo:`` node: what pairs a host-side collective with its gloo work and,
    under ``--astra-sim``, turns it into a communication node."""

    rf_id: Any
    duration: int
    collective: HostCollective | None = None  # a c10d op ASTRA-sim simulates (--astra-sim only)
    comm_tail: bytes = b""  # its tail as a communication node (not a CPU op), without duration


@dataclass(slots=True)
class ReadNode:
    """One node of the PyTorch trace as the reader read it: its identity and classification, and
    its pre-encoded tail (not a ``.et`` record: that is ``et.records.EtNode``)."""

    id: int
    parent: int  # ctrl_deps; -1 when it is not a non-negative integer
    name: str
    kind: OpKind
    is_gpu: bool  # has a ``cat`` (the reference's is_gpu_op)
    node_type: int  # Chakra NodeType; 0 for SendRecv kernels, resolved by the graph
    inter_thread_dep: int  # 0 when absent
    pg_name: Any
    tail: bytes  # encoded duration, inputs, outputs, attrs
    error: str | None  # why the node cannot be encoded, raised if it is converted
    comm_size: int  # SendRecv kernels only (their comm attrs wait for their type)
    duration: int
    stream: Any
    host_op: HostOp | None = None  # c10d:: and gloo: nodes only
    group_info: Any = None  # what a node says about process groups (convert/groups.py), --astra-sim


class RowBatch(NamedTuple):
    """Many nodes read together (the fast path), column by column, in file order. They carry no
    error, no communication attributes, no host op (``c10d::``, ``gloo:``) and, being plain, a
    parent flag per node."""

    ids: Sequence[int]
    parents: Sequence[int]  # 0 where there is none
    has_parent: Sequence[int]
    names: Sequence[str]
    kinds: Sequence[int]
    is_gpu: Sequence[int]
    types: Sequence[int]
    inter_thread_deps: Sequence[int]
    durations: Sequence[int]
    streams: Sequence[Any]
    tails: Sequence[bytes]
    pg_names: dict[int, Any]  # index in the batch -> pg_name, where it is not ""
