"""Collectives and point-to-point ops that run on the host (gloo), read from their ``c10d::`` op.

With gloo there is no device kernel: each collective is an outer ``c10d::<op>`` node holding the
tensors, followed (next record-function id) by one or more inner ``gloo:<op>`` nodes whose
duration is the time the gloo worker spent communicating. ``host_collective`` reads what a
communication node needs from the outer op's inputs: the collective type, the bytes (from the
tensors' shapes and dtypes; the value tuple's numel x element size where the dtype is unknown),
and for send/recv the peer rank and tag. Inputs, per op (value of a tensor: ``[id, storage,
offset, numel, element size, device]``):

==============================  ================  =================================================
op                              becomes           bytes
==============================  ================  =================================================
``allreduce_``                  ALL_REDUCE        input 0 (a tensor list)
``broadcast_``                  BROADCAST         input 0 (ASTRA-sim replays its duration)
``allgather_``                  ALL_GATHER        input 1, one rank's input (input 0 is the output)
``_allgather_base_``            ALL_GATHER        input 1
``reduce_scatter_``             REDUCE_SCATTER    input 1, the whole input (a list of lists)
``_reduce_scatter_base_``       REDUCE_SCATTER    input 1
``alltoall_``, ``alltoall_base_``  ALL_TO_ALL     input 1
``allreduce_coalesced_``        ALL_REDUCE        input 0 (every tensor of the list: one collective)
``allgather_coalesced_``,       ALL_GATHER        input 1 (the inputs; input 0 holds the outputs)
``allgather_into_tensor_coalesced_``
``reduce_scatter_tensor_coalesced_``  REDUCE_SCATTER  input 1
``send``                        SEND              input 0; peer = input 2 (destination), tag = input 3
``recv_``                       RECV              input 0; peer = input 2 (source), tag = input 3
==============================  ================  =================================================

``reduce_``, ``gather_``, ``scatter_`` and ``barrier`` are not simulated by ASTRA-sim (they stall
it), so they stay compute nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..schema.chakra import NodeType
from ..schema.distributed import C10D_OPS as _OPS
from ..schema.distributed import HOST_COLLECTIVES as HOST_COLLECTIVES
from ..schema.distributed import HOST_OP_PREFIX as HOST_OP_PREFIX
from ..schema.distributed import NCCL_RECORD_PREFIX as NCCL_RECORD_PREFIX
from ..schema.distributed import WORKER_OP_PREFIX as WORKER_OP_PREFIX
from ..schema.opcost import dtype_bytes

_PEER, _TAG = 2, 3
_COLL = int(NodeType.COMM_COLL_NODE)

#: A dtype the observer writes for a tensor with no storage: no bytes.
UNINITIALIZED = "nullptr (uninitialized)"


@dataclass(frozen=True, slots=True)
class HostCollective:
    """What a communication node made from a ``c10d::`` op carries."""

    node_type: int
    comm_type: int | None  # collectives only
    comm_size: int  # bytes
    peer: int | None = None  # send: destination, recv: source
    tag: int | None = None


def is_host_op(name: str) -> bool:
    """Names whose record-function ids pair collectives with their gloo work."""
    return name.startswith(HOST_OP_PREFIX) or name.startswith(WORKER_OP_PREFIX)


def host_collective(name: str, inputs: Any) -> HostCollective | None:
    """The communication node a ``c10d::`` op stands for, or None if it is not one ASTRA-sim
    simulates. Raises ValueError for inputs that do not have the op's layout."""
    spec = _OPS.get(name)
    if spec is None:
        return None
    node_type, comm_type, index = spec
    try:
        values, shapes, types = inputs["values"], inputs["shapes"], inputs["types"]
        size = tensor_bytes(values[index], shapes[index], types[index])
        if node_type == _COLL:
            return HostCollective(node_type, comm_type, size)
        peer, tag = values[_PEER], values[_TAG]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"{name} inputs do not have the layout of the op: {exc!r}") from None
    if type(peer) is not int or type(tag) is not int or peer < 0:
        raise ValueError(f"{name} has no integer peer rank and tag in inputs 2 and 3")
    return HostCollective(node_type, None, size, peer, tag)


def tensor_bytes(value: Any, shape: Any, type_name: Any) -> int:
    """Bytes of the tensors in one input: a tensor, or (nested) lists of them."""
    if not isinstance(type_name, str):
        raise TypeError(f"type {type_name!r} is not a string")
    dtypes = _tensor_dtypes(type_name)
    leaves = _leaves(value, shape)
    if len(dtypes) != len(leaves):
        raise TypeError(f"{len(dtypes)} tensor types but {len(leaves)} tensors in {type_name!r}")
    total = 0
    for dtype, (tensor, dims) in zip(dtypes, leaves, strict=True):
        element = 0 if dtype == UNINITIALIZED else dtype_bytes(dtype)  # the one dtype table: schema/opcost
        if element is None:  # a dtype we have no size for: the observer's numel x element size
            total += tensor[3] * tensor[4]
            continue
        numel = 1
        for dim in dims:
            numel *= dim
        total += numel * element
    return total


def _tensor_dtypes(type_name: str) -> list[str]:
    """The dtypes of the tensors in a type such as ``GenericList[GenericList[Tensor(float),Tensor(float)]]``,
    in order; parentheses inside a dtype (``nullptr (uninitialized)``) are kept."""
    dtypes: list[str] = []
    position = 0
    while True:
        start = type_name.find("Tensor(", position)
        if start < 0:
            return dtypes
        depth, cursor = 1, start + len("Tensor(")
        while depth and cursor < len(type_name):
            depth += {"(": 1, ")": -1}.get(type_name[cursor], 0)
            cursor += 1
        if depth:
            raise TypeError(f"unbalanced parentheses in {type_name!r}")
        dtypes.append(type_name[start + len("Tensor(") : cursor - 1])
        position = cursor


def _is_tensor(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 6
        and all(type(v) is int for v in value[:5])
        and isinstance(value[5], str)
    )


def _leaves(value: Any, shape: Any) -> list[tuple[list[int], list[int]]]:
    """(tensor value, its dims) pairs in order, walking nested lists with an explicit stack."""
    leaves: list[tuple[list[int], list[int]]] = []
    stack = [(value, shape)]
    while stack:
        item, dims = stack.pop()
        if _is_tensor(item):
            if not isinstance(dims, list) or not all(type(d) is int for d in dims):
                raise TypeError(f"tensor shape {dims!r} is not a list of integers")
            leaves.append((item, dims))
        elif isinstance(item, list):
            if not isinstance(dims, list) or len(dims) != len(item):
                raise TypeError(f"shapes {dims!r} do not match the tensor list")
            stack.extend(reversed(list(zip(item, dims, strict=True))))
        else:
            raise TypeError(f"{item!r} is not a tensor")
    return leaves
