"""Old host-trace schema ``1.0.1`` mapped onto the layout of ``1.0.2-chakra.0.0.4`` and later.

PyTorch's first ExecutionTraceObserver format (schema ``1.0.1``, e.g. param's DLRM and linear
traces) is rejected by the reference converter although it carries the same information. The
mapping, node by node:

==========================================  =================================================
1.0.1 node                                   newer layout
==========================================  =================================================
``parent``                                   ``ctrl_deps``
``inputs`` / ``input_shapes`` /               ``inputs: {"values", "shapes", "types"}``
``input_types`` (three parallel lists)
``outputs`` / ``output_shapes`` /             ``outputs: {"values", "shapes", "types"}``
``output_types``
``rf_id``, ``fw_parent``, ``seq_id``,         ``attrs: [{"name", "type", "value"}, ...]`` in this
``scope``, ``tid``, ``fw_tid``,               order, typed as the observer types them
``op_schema``                                 (``uint64``, ``int64`` for ``seq_id``, ``string``)
``id``, ``name`` and any other key            kept as they are
==========================================  =================================================

An attribute missing from the old node is written with the value the observer uses for "none"
(0, -1 for ``seq_id``, "" for ``op_schema``), because the converter reads all seven.
The mapping is idempotent: a node already in the newer layout is returned unchanged.
"""

from __future__ import annotations

from typing import Any

#: The layout the mapping produces (its node format; the ``schema`` string itself is left alone).
MAPPED_LAYOUT = "1.0.2-chakra.0.0.4"

_ATTRS: tuple[tuple[str, str, Any], ...] = (
    ("rf_id", "uint64", 0),
    ("fw_parent", "uint64", 0),
    ("seq_id", "int64", -1),
    ("scope", "uint64", 0),
    ("tid", "uint64", 0),
    ("fw_tid", "uint64", 0),
    ("op_schema", "string", ""),
)
_LISTS = ("inputs", "input_shapes", "input_types", "outputs", "output_shapes", "output_types")
_MOVED = frozenset({"parent", *_LISTS, *(name for name, _, _ in _ATTRS)})


def is_old_schema_node(node: dict[str, Any]) -> bool:
    """True for a node in the 1.0.1 layout (a ``parent`` and no ``ctrl_deps``)."""
    return "parent" in node and "ctrl_deps" not in node


def map_old_schema_node(node: dict[str, Any]) -> dict[str, Any]:
    """Return ``node`` in the newer layout (a new dict); newer-layout nodes come back unchanged."""
    if not is_old_schema_node(node):
        return node
    mapped: dict[str, Any] = {}
    for key, value in node.items():
        if key == "parent":
            mapped["ctrl_deps"] = value
        elif key == "inputs":
            mapped["inputs"] = _tensor_block(node, "input")
        elif key == "outputs":
            mapped["outputs"] = _tensor_block(node, "output")
        elif key not in _MOVED:
            mapped[key] = value
    mapped.setdefault("inputs", _tensor_block(node, "input"))
    mapped.setdefault("outputs", _tensor_block(node, "output"))
    attrs = [{"name": name, "type": kind, "value": node.get(name, default)} for name, kind, default in _ATTRS]
    mapped["attrs"] = attrs + list(node.get("attrs", []))
    return mapped


def _tensor_block(node: dict[str, Any], side: str) -> dict[str, Any]:
    return {
        "values": node.get(f"{side}s", []),
        "shapes": node.get(f"{side}_shapes", []),
        "types": node.get(f"{side}_types", []),
    }
