"""Schema 1.0.1 host traces mapped onto the newer layout (``schema_compat``)."""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

import pytest

from chakra_convert_fast.converter import TraceContentError, convert
from chakra_convert_fast.converter.link.hostindex import index_host_trace
from chakra_convert_fast.converter.schema.compat import map_old_schema_node

from .traces import REAL_TRACES_DIR, load_trace, oracle_bytes, read_et

TRACES = REAL_TRACES_DIR
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
    assert index.metadata["schema"] == "1.0.1" and index.node_count == len(raw["nodes"])
    assert set(index.ctrl_deps) <= {n["parent"] for n in raw["nodes"]}
    assert len(index.reachable_ids()) == len(raw["nodes"])


def _old_traces(tmp: Path) -> list[Path]:
    """linear_et and the 8 DLRM ranks (nccl:all_to_all / all_reduce), as plain files."""
    with tarfile.open(TRACES / "old_schema" / "dlrm_pytorch_et.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    dlrm = sorted(tmp.rglob("dlrm_eg_*.json"))
    assert len(dlrm) == 8
    return [TRACES / "old_schema" / "linear_et.json.gz", *dlrm]


def _node_records(data: bytes) -> bytes:
    """The .et without its GlobalMetadata record (which carries the schema string)."""
    length, shift, pos = 0, 0, 0
    while True:
        byte = data[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        shift += 7
        if byte < 0x80:
            return data[pos + length :]


@pytest.mark.slow
def test_real_old_traces_convert_like_the_reference_on_the_mapped_layout(tmp_path: Path) -> None:
    """Issue 4: the 1.0.1 traces the reference rejects convert; each node is what the reference
    writes for the same trace mapped to the newer layout."""
    for source in _old_traces(tmp_path / "old"):
        result = convert(source, tmp_path / "ours.et")
        metadata, nodes = read_et(tmp_path / "ours.et")
        assert result.nodes_written == len(nodes) > 0
        assert {a.name: a.string_val for a in metadata.attr}["schema"] == "1.0.1"

        trace = load_trace(source)
        mapped = tmp_path / "mapped.json"
        mapped.write_text(
            json.dumps(
                {**trace, "schema": "1.0.2-chakra.0.0.4", "nodes": [map_old_schema_node(n) for n in trace["nodes"]]}
            )
        )
        assert _node_records((tmp_path / "ours.et").read_bytes()) == _node_records(oracle_bytes(mapped, tmp_path))


def test_old_layout_nodes_need_the_old_schema(tmp_path: Path) -> None:
    """A node with ``parent`` instead of ``ctrl_deps`` in a newer-schema trace stays an error."""
    trace = load_trace(TRACES / "old_schema" / "linear_et.json.gz")
    source = tmp_path / "mislabelled.json"
    source.write_text(json.dumps({**trace, "schema": "1.0.2-chakra.0.0.4"}))
    with pytest.raises(TraceContentError, match="missing required field 'ctrl_deps'"):
        convert(source, tmp_path / "o.et")
