"""Tiny hand-made traces for unit and CLI tests (the shape of real host/merged traces)."""

from __future__ import annotations

from typing import Any

SCHEMA = "1.1.1-chakra.0.0.4"
PROCESS = "[pytorch|profiler|execution_trace|process]"
THREAD = "[pytorch|profiler|execution_trace|thread]"


def op(node_id: int, name: str, parent: int, *, tid: int = 1, **extra: Any) -> dict[str, Any]:
    """A CPU op (or a GPU kernel with ``cat=...``) with the attrs the converter needs."""
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": node_id},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": -1},
        {"name": "scope", "type": "uint64", "value": 0},
        {"name": "tid", "type": "uint64", "value": tid},
        {"name": "fw_tid", "type": "uint64", "value": 0},
        {"name": "op_schema", "type": "string", "value": ""},
    ]
    node = {
        "id": node_id,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {"values": [[node_id, 1, 0, 16, 4, "cpu"]], "shapes": [[4, 4]], "types": ["Tensor(float)"]},
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": attrs,
        "exclusive_dur": 3,
    }
    node.update(extra)
    return node


def trace(nodes: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "pid": 42, "time": "2026-11-21 00:00:00"}
    doc.update(start_ts=100, finish_ts=200)
    doc.update(meta)
    doc["nodes"] = nodes
    return doc


def two_threads(extra_main: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """process 1; thread roots 2 (tid 1) and 3 (tid 2); ops 10, 11 on thread 2's root; 20 on 3."""
    return [
        op(1, PROCESS, 1),
        op(2, THREAD, 1),
        op(3, THREAD, 1, tid=2),
        op(10, "aten::mm", 2),
        op(11, "aten::add", 2),
        op(20, "aten::relu", 3, tid=2),
        *(extra_main or []),
    ]


def cyclic_nodes() -> list[dict[str, Any]]:
    """10 -> 20 (inter-thread), 20 -> 11 (inter-thread), 11 -> 10 (program order): one cycle."""
    nodes = two_threads()
    nodes[3]["inter_thread_dep"] = 20
    nodes[5]["inter_thread_dep"] = 11
    return nodes


def chain(length: int, *, reverse: bool = True) -> dict[str, Any]:
    """One thread whose ops nest ``length`` deep (each the parent of the next), file order reversed:
    every data dependency then points forward in the file, what makes the reference recurse."""
    nodes = [op(1, PROCESS, 1), op(2, THREAD, 1)]
    nodes += [op(i, "aten::add", i - 1 if i > 3 else 2) for i in range(3, length + 3)]
    if reverse:
        nodes.reverse()
    return trace(nodes)
