"""Cycle detection and breaking on the dependency graph, with explicit stacks only.

Vertices are integers below ``size``; ``successors(v)`` lists v's dependencies. The reference
walks this graph with a recursive DFS that copies its path at every level (quadratic, and a
``RecursionError`` past ~1,000 levels). Here:

* ``strongly_connected_components``: Tarjan's algorithm with a work stack of (vertex, iterator)
  pairs, so depth costs memory, not recursion;
* ``back_edges``: a white/grey/black DFS on an explicit stack; removing its back edges leaves a
  DAG, which is what ``break_cycles`` relies on.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator

Successors = Callable[[int], Iterable[int]]
Edge = tuple[int, int]


def strongly_connected_components(vertices: Iterable[int], successors: Successors, size: int) -> Iterator[list[int]]:
    """Yield the SCCs reachable from ``vertices`` (each once), in Tarjan's order (sinks first)."""
    index = array("l", [-1]) * size
    low = array("l", [0]) * size
    on_stack = bytearray(size)
    component_stack: list[int] = []
    counter = 0
    for source in vertices:
        if index[source] >= 0:
            continue
        index[source] = low[source] = counter
        counter += 1
        component_stack.append(source)
        on_stack[source] = 1
        work = [(source, iter(successors(source)))]
        while work:
            vertex, pending = work[-1]
            for succ in pending:
                if index[succ] < 0:  # tree edge: descend
                    index[succ] = low[succ] = counter
                    counter += 1
                    component_stack.append(succ)
                    on_stack[succ] = 1
                    work.append((succ, iter(successors(succ))))
                    break
                if on_stack[succ]:  # edge into the current path's components
                    low[vertex] = min(low[vertex], index[succ])
            else:  # all successors done
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[vertex])
                if low[vertex] == index[vertex]:  # vertex roots a component
                    component = []
                    while True:
                        member = component_stack.pop()
                        on_stack[member] = 0
                        component.append(member)
                        if member == vertex:
                            break
                    yield component


def cyclic_components(vertices: Iterable[int], successors: Successors, size: int) -> list[list[int]]:
    """SCCs that contain a cycle: more than one vertex, or one vertex depending on itself."""
    found = []
    for component in strongly_connected_components(vertices, successors, size):
        if len(component) > 1 or component[0] in successors(component[0]):
            found.append(sorted(component))
    return found


def back_edges(vertices: Iterable[int], successors: Successors, size: int) -> list[Edge]:
    """Edges that close a cycle in one explicit-stack DFS; without them the graph is acyclic."""
    state = bytearray(size)  # 0 unseen, 1 on the current path, 2 finished
    found: list[Edge] = []
    for source in vertices:
        if state[source]:
            continue
        state[source] = 1
        work = [(source, iter(successors(source)))]
        while work:
            vertex, pending = work[-1]
            for succ in pending:
                if state[succ] == 1:
                    found.append((vertex, succ))
                elif state[succ] == 0:
                    state[succ] = 1
                    work.append((succ, iter(successors(succ))))
                    break
            else:
                state[vertex] = 2
                work.pop()
    return found


def break_cycles(
    components: list[list[int]],
    successors: Successors,
    is_preferred: Callable[[int, int], bool],
    size: int,
) -> list[Edge]:
    """Edges to remove so that no component keeps a cycle.

    Inside each component, the preferred edges (inter-thread dependencies, the usual culprits)
    are removed first, then each is put back if that closes no cycle (components of up to
    ``_READD_LIMIT`` vertices; larger ones keep them all removed). Cycles still left lose the
    back edges of a DFS of what remains.
    """
    removed: list[Edge] = []
    for component in components:
        removed.extend(_break_component(component, successors, is_preferred, size))
    return removed


_READD_LIMIT = 20_000


def _break_component(
    component: list[int], successors: Successors, is_preferred: Callable[[int, int], bool], size: int
) -> list[Edge]:
    members = set(component)
    cut: set[Edge] = set()

    def inside(vertex: int) -> list[int]:
        return [s for s in successors(vertex) if s in members and (vertex, s) not in cut]

    preferred = [(v, s) for v in component for s in inside(v) if is_preferred(v, s)]
    cut.update(preferred)
    if len(component) <= _READD_LIMIT:
        for edge in preferred:
            if not _reaches(edge[1], edge[0], inside):  # putting it back closes no cycle
                cut.discard(edge)
    order = [e for e in preferred if e in cut]
    for rest in cyclic_components(component, inside, size):
        for edge in back_edges(rest, inside, size):
            cut.add(edge)
            order.append(edge)
    return order


def _reaches(source: int, target: int, successors: Successors) -> bool:
    """Whether ``target`` can be reached from ``source`` (explicit-stack search)."""
    seen = {source}
    stack = [source]
    while stack:
        vertex = stack.pop()
        if vertex == target:
            return True
        for succ in successors(vertex):
            if succ not in seen:
                seen.add(succ)
                stack.append(succ)
    return False
