"""Host-trace schema versions this converter accepts, and how a node's fields are read.

The reference (``PyTorchNode``) reads the same fields for every supported version, then lets each
entry of ``attrs`` override an attribute of the same name (``setattr``). ``effective_fields``
reproduces exactly that, so later stages never need to know where a value came from.
"""

from __future__ import annotations

from typing import Any

#: Versions the reference converts. It also lists "1.1.1-chakra.1.0.0" but reads no field of it,
#: so every such node fails there; we reject that version up front with the same message.
SUPPORTED_SCHEMAS: tuple[str, ...] = (
    "1.0.2-chakra.0.0.4",
    "1.0.3-chakra.0.0.4",
    "1.1.0-chakra.0.0.4",
    "1.1.1-chakra.0.0.4",
)

#: The old ExecutionTraceObserver layout, converted through ``schema_compat``'s documented
#: mapping (the reference rejects it).
OLD_SCHEMA = "1.0.1"
ACCEPTED_SCHEMAS: tuple[str, ...] = (*SUPPORTED_SCHEMAS, OLD_SCHEMA)

#: The start of the names of the host trace's process and thread nodes
#: (``[pytorch|profiler|execution_trace|process]``, ``...|thread]``).
OBSERVER_NODE_PREFIX = "[pytorch|profiler|execution_"

#: Top-level keys of the trace that become GlobalMetadata attributes, in output order.
METADATA_KEYS: tuple[str, ...] = ("schema", "pid", "time", "start_ts", "finish_ts")

#: Node keys the reference reads with ``node[...]`` (a KeyError there; a clear error here).
REQUIRED_NODE_KEYS: tuple[str, ...] = ("id", "name", "ctrl_deps", "inputs", "outputs")

#: Attribute names that would overwrite the reference's own bookkeeping if set from ``attrs``.
_RESERVED_ATTRS = frozenset(
    {"id", "schema", "data_deps", "children", "gpu_children", "record_param_comms_node", "nccl_node"}
)


def unsupported_schema_message(schema: object) -> str:
    return (
        f"unsupported schema version {schema!r}; supported: {', '.join(SUPPORTED_SCHEMAS)} "
        f"(and {OLD_SCHEMA} through a mapping to the newer layout)"
    )


#: (attribute, top-level key, default): what the reference reads before applying ``attrs``.
_TOP_LEVEL = (
    ("name", "name", None),
    ("parent", "ctrl_deps", None),
    ("inputs", "inputs", None),
    ("outputs", "outputs", None),
    ("exclusive_dur", "exclusive_dur", 0),
    ("inter_thread_dep", "inter_thread_dep", None),
    ("cat", "cat", None),
    ("stream", "stream", 0),
    ("pg_name", "pg_name", ""),
)


def effective_fields(node: dict[str, Any]) -> dict[str, Any]:
    """The node's attributes as the reference sees them: top-level fields, then ``attrs`` on top.

    The caller has checked REQUIRED_NODE_KEYS. Raises ValueError for malformed ``attrs``.
    """
    try:
        fields = {attr["name"]: attr["value"] for attr in node.get("attrs", ())}
    except (TypeError, KeyError) as exc:
        raise ValueError(f"malformed 'attrs' (each entry needs 'name' and 'value'): {exc!r}") from None
    if not _RESERVED_ATTRS.isdisjoint(fields):
        name = sorted(_RESERVED_ATTRS.intersection(fields))[0]
        raise ValueError(f"attribute {name!r} in 'attrs' would overwrite the node's own {name!r}")
    get = node.get
    for attribute, key, default in _TOP_LEVEL:
        if attribute not in fields:
            fields[attribute] = get(key, default)
    return fields


#: Attributes read from the node's top level; an ``attrs`` entry of the same name overrides one.
TOP_LEVEL_ATTRIBUTES = frozenset(attribute for attribute, _, _ in _TOP_LEVEL)


def attrs_touch_node_fields(names: frozenset[str] | set[str]) -> bool:
    """True if ``attrs`` entries of these names would override a top-level field or be refused
    (a reserved name): ``effective_fields`` is then needed to tell what the node holds."""
    return not (TOP_LEVEL_ATTRIBUTES.isdisjoint(names) and _RESERVED_ATTRS.isdisjoint(names))
