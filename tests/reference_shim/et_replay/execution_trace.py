"""The part of et_replay's ExecutionTrace that chakra_trace_link reads."""

from __future__ import annotations

from typing import Any

EXECUTION_TRACE_PROCESS_ANNOTATION = "[pytorch|profiler|execution_trace|process]"
EXECUTION_TRACE_THREAD_ANNOTATION = "[pytorch|profiler|execution_trace|thread]"

_SCHEMAS = {
    "1.0.1",
    "1.0.2-chakra.0.0.4",
    "1.0.3-chakra.0.0.4",
    "1.0.4-chakra.0.0.4",
    "1.1.0-chakra.0.0.4",
    "1.1.1-chakra.0.0.4",
}


class Node:
    def __init__(self, node: dict[str, Any], old_schema: bool) -> None:
        self.id: int = node["id"]
        self.name: str = node["name"]
        if old_schema:
            self.parent_id = node["parent"]
            self.rf_id = node.get("rf_id")
        else:
            self.parent_id = node["ctrl_deps"]
            rf = [a["value"] for a in node["attrs"] if a["name"] == "rf_id"]
            self.rf_id = int(rf[-1]) if rf else None
        self.children: list[Node] = []


class ExecutionTrace:
    def __init__(self, data: dict[str, Any]) -> None:
        schema = data["schema"]
        if schema not in _SCHEMAS:
            raise ValueError(f"No corresponding node creation function found for schema version {schema}")
        self.nodes = {n["id"]: Node(n, schema == "1.0.1") for n in data["nodes"]}
        for n in self.nodes.values():
            if n.id != 1 and n.parent_id in self.nodes:
                self.nodes[n.parent_id].children.append(n)
        for n in self.nodes.values():
            n.children.sort(key=lambda c: c.id)

    def get_nodes(self) -> dict[int, Node]:
        return self.nodes
