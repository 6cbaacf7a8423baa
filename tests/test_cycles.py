"""Graph algorithms on named graphs, random graphs (against networkx) and very long chains."""

from __future__ import annotations

import random
import sys

import networkx as nx
import pytest

from chakra_convert_fast.converter.cycles import (
    back_edges,
    break_cycles,
    cyclic_components,
    strongly_connected_components,
)

Graph = dict[int, list[int]]

NAMED: dict[str, tuple[Graph, list[list[int]]]] = {
    "empty edge set": ({0: [], 1: []}, []),
    "self-loop": ({0: [0], 1: [0]}, [[0]]),
    "two-cycle": ({0: [1], 1: [0]}, [[0, 1]]),
    "triangle plus tail": ({0: [1], 1: [2], 2: [0], 3: [2]}, [[0, 1, 2]]),
    "two separate cycles": ({0: [1], 1: [0], 2: [3], 3: [4], 4: [2], 5: []}, [[0, 1], [2, 3, 4]]),
    "diamond (acyclic)": ({0: [1, 2], 1: [3], 2: [3], 3: []}, []),
    "figure eight": ({0: [1, 2], 1: [0], 2: [0]}, [[0, 1, 2]]),
}


def succ(graph: Graph):
    return lambda v: graph[v]


@pytest.mark.parametrize("name", sorted(NAMED))
def test_cyclic_components_of_named_graphs(name: str) -> None:
    graph, expected = NAMED[name]
    assert sorted(cyclic_components(graph, succ(graph), len(graph))) == expected


@pytest.mark.parametrize("seed", range(30))
def test_scc_matches_networkx_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 60)
    graph = {v: [rng.randrange(size) for _ in range(rng.randint(0, 3))] for v in range(size)}
    ours = sorted(sorted(c) for c in strongly_connected_components(graph, succ(graph), size))
    digraph = nx.DiGraph()
    digraph.add_nodes_from(graph)
    digraph.add_edges_from((u, v) for u in graph for v in graph[u])
    theirs = sorted(sorted(c) for c in nx.strongly_connected_components(digraph))
    assert ours == theirs


@pytest.mark.parametrize("seed", range(30))
def test_removing_back_edges_leaves_a_dag(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(2, 50)
    graph = {v: sorted({rng.randrange(size) for _ in range(rng.randint(0, 4))}) for v in range(size)}
    cut = set(back_edges(graph, succ(graph), size))
    digraph = nx.DiGraph()
    digraph.add_nodes_from(graph)
    digraph.add_edges_from((u, v) for u in graph for v in graph[u] if (u, v) not in cut)
    assert nx.is_directed_acyclic_graph(digraph)
    assert bool(cut) == (not nx.is_directed_acyclic_graph(nx.DiGraph([(u, v) for u in graph for v in graph[u]])))


LONG = 200_000


@pytest.mark.slow
def test_long_chain_and_ring_without_recursion() -> None:
    limit = sys.getrecursionlimit()
    chain = {v: [v - 1] if v else [] for v in range(LONG)}
    assert cyclic_components(range(LONG - 1, -1, -1), succ(chain), LONG) == []
    ring = {v: [(v + 1) % LONG] for v in range(LONG)}
    components = cyclic_components(range(LONG), succ(ring), LONG)
    assert len(components) == 1 and len(components[0]) == LONG
    assert len(back_edges(range(LONG), succ(ring), LONG)) == 1
    assert sys.getrecursionlimit() == limit


def test_break_cycles_prefers_inter_thread_edges_and_keeps_what_it_can() -> None:
    # 0 -> 1 (inter-thread), 1 -> 2 (inter-thread), 2 -> 0 (program order): one cycle;
    # removing one inter-thread edge is enough, the other is put back.
    graph = {0: [1], 1: [2], 2: [0]}
    preferred = {(0, 1), (1, 2)}
    removed = break_cycles(cyclic_components(graph, succ(graph), 3), succ(graph), lambda u, v: (u, v) in preferred, 3)
    assert len(removed) == 1 and removed[0] in preferred


def test_break_cycles_falls_back_to_back_edges() -> None:
    graph = {0: [1], 1: [2], 2: [0], 3: [4], 4: [3]}
    removed = set(break_cycles(cyclic_components(graph, succ(graph), 5), succ(graph), lambda u, v: False, 5))
    digraph = nx.DiGraph([(u, v) for u in graph for v in graph[u] if (u, v) not in removed])
    assert nx.is_directed_acyclic_graph(digraph)
    assert len(removed) == 2
