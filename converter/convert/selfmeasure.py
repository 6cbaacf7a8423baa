"""The profiler's cost per op, measured in the host trace itself (``overhead.measured``): the host
path's figure where no calibration is beside the trace and the user gave none.

A view-family op that only calls another (``aten::reshape`` calling ``aten::view``, ``aten::t``
calling ``aten::transpose``, ``aten::transpose`` and ``aten::expand`` calling
``aten::as_strided``) does almost nothing of its own: untraced, well under a microsecond of
dispatch. Traced, its exclusive time (its span less its child's, as the reference writes it)
holds the profiler's callbacks of its child that run outside the child's span, and its own
that run inside its span: one recorded op's worth of the profiler's time, measured on the
machine, the run and the profiler settings of the trace. GPT-2 and BERT steps hold 460-1,080
such pairs.

Measured per thread (the observer's ``[...|thread]`` nodes): in one run the forward's thread and
the autograd engine's can pay differently per op (BERT at batch 8 on the H200: 20.6 and 11.4 us),
and a host-bound step pays both. Only the durations the trace records are read, before anything
moves them (``spread.py``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from ..et import encode
from .graph import TraceGraph
from .nodes import ROOT_NAMES
from .writer import TailSpill

#: (parent, its only child): ops whose own work is a view's, untraced under a microsecond
WRAPPERS = frozenset(
    {
        ("aten::reshape", "aten::view"),
        ("aten::t", "aten::transpose"),
        ("aten::transpose", "aten::as_strided"),
        ("aten::expand", "aten::as_strided"),
    }
)
_PARENTS = frozenset(parent for parent, _ in WRAPPERS)
#: the thread of a row under no thread node (a trace without them): one for all
NO_THREAD = -1


def samples(graph: TraceGraph, spill: TailSpill) -> dict[int, list[int]]:
    """By thread (``threads``), the exclusive times (us, as the trace records them) of the
    written view-family ops whose one child is the op they wrap (``WRAPPERS``)."""
    names, final = graph.names, graph.final
    rows = []
    for row in graph.rows_by_id():
        if names[row] not in _PARENTS:
            continue
        children = graph.children(row)
        if len(children) == 1 and final[children[0]] and (names[row], names[children[0]]) in WRAPPERS:
            rows.append(row)
    given = graph.duration_overrides
    found: dict[int, list[int]] = {}
    for thread, row, tail in zip(threads(graph, rows), rows, spill.read_each(rows), strict=True):
        found.setdefault(thread, []).append(given.get(row, encode.duration_of(tail)))
    return found


def threads(graph: TraceGraph, rows: Sequence[int]) -> array[int]:
    """Each row's thread: the row of the observer's ``[...|thread]`` node above it (``NO_THREAD``
    where there is none), found walking up the parents, iteratively, each row's once (a compact
    array per row remembers what is found)."""
    names = graph.names
    known = array("l", [_UNKNOWN]) * len(names)
    out = array("l")
    path: list[int] = []
    for row in rows:
        path.clear()
        at = row
        while at >= 0 and known[at] == _UNKNOWN and names[at] not in ROOT_NAMES and len(path) <= len(names):
            path.append(at)
            at = graph.parent_row(at)
        if at < 0:
            thread = NO_THREAD
        elif known[at] != _UNKNOWN:
            thread = known[at]
        else:  # a thread node, or a loop of parents (no thread)
            thread = at if names[at] in ROOT_NAMES else NO_THREAD
        for visited in path:
            known[visited] = thread
        out.append(thread)
    return out


_UNKNOWN = -2
