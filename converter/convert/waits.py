"""Where the host waited for the GPU, as a dependency (``--astra-sim``): the GPU -> CPU edge the
reference never writes.

The reference's graph has CPU -> CPU (the host's order) and CPU -> GPU (a kernel after its launch)
edges only, so in a replay the host never waits for the GPU: it runs ahead of the GPU through a
synchronisation (``loss.item()``, ``if tensor:``, a copy to pageable host memory) as if the call
returned at once. A traced step is mostly host-bound (the profiler's time is on the host), so the
traced replay hides it; once the profiler's time is taken out (``convert/untrace.py``), the GPU's
backlog at the synchronisation is the step's critical path, as it is untraced.

A linked host trace records no runtime call (``cudaStreamSynchronize``), but the copy a
synchronisation waits for is there, as a GPU child of the op that launched it: a device-to-host
memcpy (``Memcpy DtoH (Device -> ...)``) is a wait when its launcher returns a host value
(``aten::_local_scalar_dense``: ``item()``, ``is_nonzero``, ``bool()``) or the copy lands in
pageable memory (CUDA copies to pageable memory synchronously). A copy to pinned memory under
any other op may be ``non_blocking`` and is left alone. The first CPU op after the launcher's
subtree then depends on the copy as well as on the op before it; the copy depends on its launch,
and ASTRA-sim runs one GPU node at a time in launch order, so it ends after the GPU's backlog.
The Kineto front end writes the same wait as a ``(wait)`` node (``kineto/graph.py``).
"""

from __future__ import annotations

from .graph import TraceGraph
from .nodes import OpKind

#: A device-to-host copy, as CUPTI names it (``Memcpy DtoH (Device -> Pinned)``)
DTOH_PREFIX = "Memcpy DtoH"
#: Ops that return a host value read from the device: they wait for the copy they launched.
HOST_VALUE_OPS = frozenset({"aten::_local_scalar_dense"})
_CPU = int(OpKind.CPU)


def is_wait(copy_name: str, launcher_name: str) -> bool:
    """Whether the host waited for a device-to-host copy named ``copy_name`` launched by
    ``launcher_name``."""
    if not copy_name.startswith(DTOH_PREFIX):
        return False
    return launcher_name in HOST_VALUE_OPS or "Pageable" in copy_name


def apply(graph: TraceGraph) -> int:
    """Add each wait's GPU -> CPU edge to the built graph; the number of edges added."""
    names, kinds, ids, final, deps = graph.names, graph.kinds, graph.ids, graph.final, graph.deps
    added = 0
    for copy in graph.rows_of_kind(OpKind.GPU):
        launcher = graph.parent_row(copy)
        if not final[copy] or launcher < 0 or not is_wait(names[copy], names[launcher]):
            continue
        subtree = _subtree(graph, launcher)
        last = max((row for row in subtree if kinds[row] == _CPU and final[row]), key=ids.__getitem__)
        copy_id = ids[copy]
        for row in deps.rows_depending_on(ids[last]):
            if kinds[row] != _CPU or not final[row] or row in subtree or deps.has(row, copy_id):
                continue
            deps.add(row, copy_id, False)
            graph.forward_edges += copy_id >= ids[row]
            added += 1
    return added


def _subtree(graph: TraceGraph, row: int) -> set[int]:
    """``row`` and every op under it (iteratively)."""
    seen = {row}
    stack = [row]
    while stack:
        for child in graph.children(stack.pop()):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen
