"""Classification of one node, with the reference's exact rules.

* op kind: metadata if the name holds ``process_group:init``; GPU if it has a ``cat``; CPU otherwise
  (the reference's LABEL kind is unreachable: every node has ``outputs``);
* Chakra node type: METADATA, COMM_COLL for NCCL kernels, COMP otherwise; SendRecv kernels
  (``ncclDevKernel_SendRecv``, and the older ``ncclKernel_SendRecv``, which the reference refuses)
  take SEND/RECV/COLL from their launcher's name, so their type waits for the graph. An NCCL kernel
  whose name names no collective ASTRA-sim simulates (``ncclDevKernel_Reduce_...``, ``..._Generic``)
  is where the reference fails ("not a known collective"): here it stays a compute node, and the
  conversion warns with its name (``unrecognised_nccl_kernels``);
* communication attributes: collective type from the kernel name, size from the tensor inputs.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from ..schema.chakra import CollectiveCommType, NodeType

ROOT_NAMES = frozenset({"[pytorch|profiler|execution_graph|thread]", "[pytorch|profiler|execution_trace|thread]"})
SEND_RECV_KERNEL = "ncclDevKernel_SendRecv"
SEND_RECV_KERNELS = (SEND_RECV_KERNEL, "ncclKernel_SendRecv")  # NCCL >= 2.19 / older (PyTorch 2.0/2.1)
NCCL_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
RECORD_PARAM_COMMS = "record_param_comms"

# Plain ints: they are encoded as protobuf integers, which take ``int`` only.
_COLLECTIVE_TYPES = tuple(  # substring of the normalised kernel name -> type; first match wins
    (key, int(comm_type))
    for key, comm_type in (
        ("allreduce", CollectiveCommType.ALL_REDUCE),
        ("alltoall", CollectiveCommType.ALL_TO_ALL),
        ("allgather", CollectiveCommType.ALL_GATHER),
        ("reducescatter", CollectiveCommType.REDUCE_SCATTER),
        ("broadcast", CollectiveCommType.BROADCAST),
    )
)
_ALL_TO_ALL = int(CollectiveCommType.ALL_TO_ALL)
_METADATA, _COMP, _COLL, _SEND, _RECV = (
    int(t)
    for t in (
        NodeType.METADATA_NODE,
        NodeType.COMP_NODE,
        NodeType.COMM_COLL_NODE,
        NodeType.COMM_SEND_NODE,
        NodeType.COMM_RECV_NODE,
    )
)


class OpKind(IntEnum):
    """The reference's PyTorchNodeType, minus the unreachable LABEL."""

    CPU = 1
    GPU = 2
    METADATA = 4


def op_kind(name: str, cat: Any) -> OpKind:
    if "process_group:init" in name:
        return OpKind.METADATA
    return OpKind.GPU if cat is not None else OpKind.CPU


def chakra_type(name: str, cat: Any, kind: OpKind) -> int | None:
    """The Chakra NodeType, or None for SendRecv kernels whose type depends on their launcher."""
    if kind == OpKind.METADATA:
        return _METADATA
    if cat is not None:
        if any(kernel in name for kernel in SEND_RECV_KERNELS):
            return None
        if "ncclKernel" in name or "ncclDevKernel" in name:
            return _COLL if _known_collective(name) is not None else _COMP
    return _COMP


def _known_collective(name: str) -> int | None:
    normalized = name.replace("_", "").replace("-", "").lower()
    for key, comm_type in _COLLECTIVE_TYPES:
        if key in normalized:
            return comm_type
    return None


def send_recv_type(launcher_name: str, parent_name: str) -> int:
    """Type of a SendRecv kernel from the op that launched it (``parent_name`` if it is not
    ``record_param_comms``, else ``launcher_name``, the grandparent)."""
    keyword = launcher_name if parent_name == RECORD_PARAM_COMMS else parent_name
    if "send" in keyword:
        return _SEND
    if "recv" in keyword:
        return _RECV
    return _COLL


def collective_comm_type(name: str) -> int:
    """CollectiveCommType of an NCCL kernel; raises ValueError for unknown collectives."""
    comm_type = _known_collective(name)
    if comm_type is not None:
        return comm_type
    if any(kernel in name for kernel in SEND_RECV_KERNELS):
        return _ALL_TO_ALL
    raise ValueError(
        f"kernel '{name}' is not a known collective (allreduce, alltoall, allgather, reducescatter, broadcast)"
    )


def comm_size(inputs: dict[str, Any]) -> int:
    """Bytes moved: numel * element size of every tensor input (tensor lists counted per tensor)."""
    total = 0
    for value, type_name in zip(inputs["values"], inputs["types"], strict=False):  # as the reference
        if "Tensor" not in type_name:
            continue
        if type_name.startswith("GenericList[Tensor"):
            total += sum(tensor[3] * tensor[4] for tensor in value)
        else:
            total += value[3] * value[4]
    return total
