"""Schema 1.0.1 host traces mapped onto the newer layout (``schema_compat``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from converter.hosttrace import index_host_trace
from converter.schema_compat import map_old_schema_node

TRACES = Path("/work/shared/traces")
OLD = {
    "name": "aten::t",
    "id": 10,
    "rf_id": 2,
    "parent": 9,
    "fw_parent": 0,
    "seq_id": 660,
    "scope": 0,
    "tid": 1,
    "fw_tid": 0,
    "op_schema": "aten::t(Tensor(a) self) -> Tensor(a)",
    "inputs": [[5, 6, 0, 4, 4, "cuda:0"]],
    "input_shapes": [[2, 2]],
    "input_types": ["Tensor(float)"],
    "outputs": [],
    "output_shapes": [],
    "output_types": [],
}


def test_mapping_table() -> None:
    new = map_old_schema_node(OLD)
    assert new["ctrl_deps"] == 9 and "parent" not in new
    assert new["inputs"] == {
        "values": [[5, 6, 0, 4, 4, "cuda:0"]],
        "shapes": [[2, 2]],
        "types": ["Tensor(float)"],
    }
    assert new["outputs"] == {"values": [], "shapes": [], "types": []}
    assert {a["name"]: a["value"] for a in new["attrs"]} == {
        "rf_id": 2,
        "fw_parent": 0,
        "seq_id": 660,
        "scope": 0,
        "tid": 1,
        "fw_tid": 0,
        "op_schema": "aten::t(Tensor(a) self) -> Tensor(a)",
    }
    assert map_old_schema_node(new) is new  # idempotent


def test_missing_attributes_get_observer_defaults() -> None:
    new = map_old_schema_node({"id": 1, "name": "x", "parent": 1})
    assert {a["name"]: a["value"] for a in new["attrs"]}["seq_id"] == -1


def test_real_old_trace_indexes_like_a_new_one() -> None:
    index = index_host_trace(TRACES / "old_schema" / "linear_et.json.gz")
    with gzip.open(TRACES / "old_schema" / "linear_et.json.gz", "rt") as f:
        raw = json.load(f)
    assert index.old_schema and index.node_count == len(raw["nodes"])
    assert set(index.ctrl_deps) <= {n["parent"] for n in raw["nodes"]}
    assert len(index.reachable_ids()) == len(raw["nodes"])
