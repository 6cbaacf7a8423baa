"""Name each gloo collective's process group in the host trace.

gloo's ``c10d::`` ops carry their group only as an ``<Object>`` input, so a converter cannot tell
a tensor-parallel all-reduce from a data-parallel one. ``record_groups`` registers, for every
``c10d::`` op that takes a process group, a kernel at the ``AutogradCPU`` dispatch key: it opens
the record function ``## chakra:group NAME RANKS ##`` (``converter/convert/groups.py`` reads it)
and runs the op's own CPU kernel inside it. The op itself is recorded once, as before, with the
marker as its child; every other op is untouched (no Python on their path). This covers what
DDP's reducer (C++), FSDP, pipelining and ``torch.distributed``'s Python API issue; functional
collectives (DTensor, tensor parallelism) already name their group in their inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import record_function

from chakra_convert_fast.converter.convert.groups import marker_name

#: The c10d ops the converter simulates or may meet, that take a process group.
OPS = (
    "allreduce_",
    "allreduce_coalesced_",
    "broadcast_",
    "allgather_",
    "_allgather_base_",
    "allgather_coalesced_",
    "allgather_into_tensor_coalesced_",
    "reduce_scatter_",
    "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_",
    "alltoall_",
    "alltoall_base_",
    "send",
    "recv_",
    "recv_any_source_",
    "barrier",
    "reduce_",
    "gather_",
    "scatter_",
)

_library: Any = None  # the registration lives as long as this object
#: ``torch.library.Library``, which torch leaves untyped: its instances are used as ``Any``.
_LIBRARY: Any = torch.library.Library


def _kernel(op: Any, index: int) -> Callable[..., Any]:
    below_autograd = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    names: dict[int, str] = {}

    def run(*args: Any, **kwargs: Any) -> Any:
        group = dist.ProcessGroup.unbox(args[index])
        name = names.get(id(group))
        if name is None:
            name = names[id(group)] = marker_name(group.group_name, dist.get_process_group_ranks(group))
        with record_function(name):
            return op.redispatch(below_autograd, *args, **kwargs)

    return run


def record_groups() -> list[str]:
    """Install the markers (once per process); returns the ops covered."""
    global _library
    if _library is not None:
        return list(OPS)
    library: Any = _LIBRARY("c10d", "IMPL")
    covered = []
    for opname in OPS:
        packet = getattr(torch.ops.c10d, opname, None)
        if packet is None:
            continue
        op = packet.default
        index = next((i for i, a in enumerate(op._schema.arguments) if "ProcessGroup" in str(a.type)), None)
        if index is None:
            continue
        library.impl(opname, _kernel(op, index), "AutogradCPU")
        covered.append(opname)
    _library = library
    return covered
