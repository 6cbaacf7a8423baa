"""NCCL/RCCL kernels as communication nodes: type, bytes, group and peer.

On CPU ranks (gloo), the ``gloo:all_reduce``-style annotation of the worker thread is the
collective: typed by its name, sized by its first input.

Read, in order of trust: the kernel's own args (``Collective name``, ``In msg nelems``, ``Out msg
nelems``, ``dtype``, ``Process Group Name``, ``Process Group Ranks``; PyTorch 2.2+), then the
``record_param_comms`` op that launched it (the same args), then the names of the host ops around
the launch (``nccl:all_reduce``, ``c10d::allreduce_``, ...), then the kernel name
(``ncclKernel_AllReduce_...``, ``ncclDevKernel_AllGather_...``). Bytes are ``In msg nelems`` x the
dtype's size (all-gather: the per-rank input, reduce-scatter: the whole input, as ASTRA-sim reads
``comm_size``), else the launching op's first input (``Input Dims`` x ``Input type``), else 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..arguments import MAX_RANKS
from ..schema.astra import REPLAYED_COLLECTIVES, SIMULATED_COLLECTIVES, group_id
from ..schema.chakra import CollectiveCommType
from ..schema.comm_kernels import custom_comm_type as custom_comm_type  # re-exported: the front end's names
from ..schema.comm_kernels import is_nccl_kernel as is_nccl_kernel

_C = CollectiveCommType
#: Normalised collective names (lower case, no ``_``/``-``) -> type; "send"/"recv" are point-to-point.
_NAMES: dict[str, CollectiveCommType | str] = {
    "allreduce": _C.ALL_REDUCE,
    "allreducecoalesced": _C.ALL_REDUCE,
    "allgather": _C.ALL_GATHER,
    "allgatherbase": _C.ALL_GATHER,
    "allgatherintotensor": _C.ALL_GATHER,
    "allgatherintotensorcoalesced": _C.ALL_GATHER,
    "allgathercoalesced": _C.ALL_GATHER,
    "reducescatter": _C.REDUCE_SCATTER,
    "reducescatterbase": _C.REDUCE_SCATTER,
    "reducescattertensor": _C.REDUCE_SCATTER,
    "reducescattertensorcoalesced": _C.REDUCE_SCATTER,
    "alltoall": _C.ALL_TO_ALL,
    "alltoallbase": _C.ALL_TO_ALL,
    "alltoallv": _C.ALL_TO_ALL,
    "broadcast": _C.BROADCAST,
    "reduce": _C.REDUCE,
    "gather": _C.GATHER,
    "scatter": _C.SCATTER,
    "barrier": _C.BARRIER,
    "send": "send",
    "recv": "recv",
}
_KERNEL = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.IGNORECASE)
_KERNEL_TYPES: dict[str, CollectiveCommType | str] = {
    "allreduce": _C.ALL_REDUCE,
    "allgather": _C.ALL_GATHER,
    "reducescatter": _C.REDUCE_SCATTER,
    "broadcast": _C.BROADCAST,
    "reduce": _C.REDUCE,
    "alltoall": _C.ALL_TO_ALL,
    "sendrecv": "sendrecv",
}
_DTYPE_BYTES = {
    "float": 4,
    "float32": 4,
    "float64": 8,
    "double": 8,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "c10::half": 2,
    "c10::bfloat16": 2,
    "int": 4,
    "int32": 4,
    "int64": 8,
    "long": 8,
    "long int": 8,
    "int16": 2,
    "short": 2,
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "unsigned char": 1,
    "signed char": 1,
    "bool": 1,
    "byte": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complexfloat": 8,
    "complexdouble": 16,
}


#: The group of a collective with no process-group args: "0", every rank (ASTRA-sim reads "" and
#: "0" as the whole job; the host-trace path writes the same, ``convert/astra.py``).
DEFAULT_GROUP = "0"
#: The record functions gloo's worker threads open around a collective's work (CPU ranks).
GLOO_PREFIX = "gloo:"


def comm_streams(kernels: list[tuple[Any, str, float]]) -> frozenset[Any]:
    """The communication streams of a trace, from its kernels' ``(stream, name, duration)``: the
    side streams (every stream but the one with the most kernel time, the compute stream) on which
    at least half the kernels are NCCL's or named as communication (``CUSTOM_COMM_PATTERNS`` or
    ``STREAM_COMM_PATTERNS``)."""
    counts: dict[Any, list[float]] = {}  # stream -> [kernel time, kernels, comm-named]
    for stream, name, dur in kernels:
        count = counts.setdefault(stream, [0.0, 0, 0])
        count[0] += dur
        count[1] += 1
        count[2] += is_nccl_kernel(name) or custom_comm_type(name, True) is not None
    if len(counts) < 2:
        return frozenset()
    main = max(counts, key=lambda s: counts[s][0])
    return frozenset(s for s, (_, n, named) in counts.items() if s != main and 2 * named >= n)


def classify_custom(kind: CollectiveCommType, launch_ops: list[Any]) -> CommInfo:
    """A non-NCCL communication kernel: its collective by name, in the default group (such kernels
    record no process group), sized by the launching op's first input (else 0)."""
    size = None
    for op in launch_ops:
        size = _input_bytes(op.args.input_dims, op.args.input_type)
        if size is not None:
            break
    return CommInfo("coll", int(kind), size or 0, DEFAULT_GROUP, defaulted_group=True)


@dataclass
class CommInfo:
    """What a communication node needs; ``problem`` says why it stays a compute node (else None)."""

    kind: str  # "coll", "send", "recv"
    comm_type: int | None
    size: int
    pg_name: str
    peer: int | None = None
    problem: str | None = None
    defaulted_group: bool = False  # no process-group args: the default group
    odd_group: str | None = None  # a process group named, but not as ASTRA-sim's group id (the default group)


def _norm(name: Any) -> str:
    return re.sub(r"[^a-z]", "", name.lower()) if isinstance(name, str) else ""


def _from_op_name(name: str) -> CollectiveCommType | str | None:
    for prefix in ("nccl:", "c10d::", "gloo:"):
        if name.startswith(prefix):
            return _NAMES.get(_norm(name[len(prefix) :]))
    return None


def _bytes(nelems: Any, dtype: Any) -> int | None:
    size = _DTYPE_BYTES.get(dtype.lower()) if isinstance(dtype, str) else None
    if size is None or type(nelems) is not int or nelems < 0:
        return None
    return nelems * size


def _input_bytes(dims: Any, types: Any) -> int | None:
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None
    first, dtype = dims[0], types[0]
    if not isinstance(first, list) or not all(type(d) is int and d >= 0 for d in first) or not first:
        return None
    return _bytes(math.prod(first), dtype)


def classify(
    kernel_name: str, kernel_args: Any, launch_ops: list[Any], rank: int | None, world: int | None = None
) -> CommInfo:
    """The communication a kernel does. ``launch_ops``: the host events open around its launch,
    innermost first (their ``name`` and ``args``); ``world``: the job's ranks, where known (a
    peer must be one of them, and not ``rank`` itself)."""
    sources = [kernel_args] + [op.args for op in launch_ops if op.name == "record_param_comms"]
    found: CollectiveCommType | str | None = None
    nelems: Any = None
    dtype: Any = None
    pg: Any = None
    peer: Any = None
    for args in sources:
        if found is None and args.collective is not None:
            found = _NAMES.get(_norm(args.collective))
        if nelems is None and args.in_nelems is not None:
            nelems, dtype = args.in_nelems, args.dtype
        if pg is None and args.pg_name is not None:
            pg = args.pg_name
        if peer is None:
            peer = args.dst_rank if found == "send" else args.src_rank if found == "recv" else None
    if found is None:
        for op in launch_ops:
            found = _from_op_name(op.name)
            if found is not None:
                break
    if found is None:
        match = _KERNEL.match(kernel_name)
        found = _KERNEL_TYPES.get(match.group(1).lower()) if match else None
    size = _bytes(nelems, dtype)
    if size is None:
        for op in launch_ops:
            size = _input_bytes(op.args.input_dims, op.args.input_type)
            if size is not None:
                break
    defaulted = not (isinstance(pg, str) and str(group_id(pg)) == pg)
    info = CommInfo("coll", None, size or 0, DEFAULT_GROUP if defaulted else pg, defaulted_group=defaulted)
    if defaulted and pg is not None:
        info.odd_group = pg if isinstance(pg, str) else repr(pg)
    if found is None or found == "sendrecv":
        info.problem = "its collective is not in the trace (no 'Collective name', no nccl:/c10d:: op around its launch)"
    elif found in ("send", "recv"):
        info.kind = str(found)
        if type(peer) is not int or rank is None:
            info.problem = f"a {found} whose peer rank is not in the trace"
        elif peer == rank:
            info.problem = f"a {found} whose peer is its own rank ({rank})"
        elif not 0 <= peer < (world or MAX_RANKS):
            ranks = (
                f"the job's ranks (0 to {world - 1:,})"
                if world
                else f"the ranks a job can have (0 to {MAX_RANKS - 1:,})"
            )
            shown = str(peer) if abs(peer) < 10**9 else f"{peer:.3g}"
            info.problem = f"a {found} whose peer rank {shown} is not among {ranks}"
        info.peer = peer if type(peer) is int else None
    else:
        assert isinstance(found, CollectiveCommType)
        info.comm_type = int(found)
        if found not in SIMULATED_COLLECTIVES and found not in REPLAYED_COLLECTIVES:
            info.problem = f"{found.name} is not a collective ASTRA-sim runs"
    return info
