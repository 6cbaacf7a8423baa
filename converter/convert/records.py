"""The compact record of one node: what the graph and the writer need; the JSON is dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
class NodeRecord:
    """One node as read: its identity and classification, and its pre-encoded tail."""

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
