"""Differential tests on generated DDP traces with every communication pattern, in every order."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import convert
from chakra_convert_fast.fixtures.generate import generate_merged, make_config

from .traces import load_trace, oracle_bytes, read_et

ORDERS = ["ascending", "dfs", "descending", "shuffled"]


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def model(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("order", ORDERS)
def test_generated_trace_with_all_collectives(model: str, order: str, tmp_path: Path) -> None:
    config = make_config(model, layers=2, ranks=4, rank=1, comm_mix="all")
    source = generate_merged(tmp_path / "trace.json.gz", config=config, order=order, seed=11).path
    convert(source, tmp_path / "ours.et")
    assert (tmp_path / "ours.et").read_bytes() == oracle_bytes(source, tmp_path)


def test_generated_traces_exercise_every_feature(tmp_path: Path) -> None:
    """Guard for the test above: the traces really hold send/recv, all collectives, threads."""
    config = make_config("gpt2", layers=2, ranks=4, rank=1, comm_mix="all")
    source = generate_merged(tmp_path / "trace.json", config=config, seed=11).path
    raw = load_trace(source)["nodes"]
    assert any(n.get("inter_thread_dep") for n in raw)
    assert any(n.get("sync_dep") for n in raw)
    assert len({a["value"] for n in raw for a in n["attrs"] if a["name"] == "tid"}) >= 2

    convert(source, tmp_path / "ours.et")
    _, nodes = read_et(tmp_path / "ours.et")
    types = Counter(n.type for n in nodes)
    assert types[pb.COMM_SEND_NODE] and types[pb.COMM_RECV_NODE] and types[pb.COMM_COLL_NODE]
    attrs = [{a.name: a for a in n.attr} for n in nodes if n.type == pb.COMM_COLL_NODE]
    comm_types = {a["comm_type"].int64_val for a in attrs}
    assert comm_types >= {pb.ALL_REDUCE, pb.ALL_GATHER, pb.REDUCE_SCATTER, pb.BROADCAST, pb.ALL_TO_ALL}
    assert all(a["comm_size"].int64_val > 0 and a["pg_name"].string_val for a in attrs)


def test_cpu_only_trace(tmp_path: Path) -> None:
    config = make_config("gpt2", layers=2, ranks=2, gpu=False)
    source = generate_merged(tmp_path / "cpu.json", config=config, order="shuffled", seed=5).path
    convert(source, tmp_path / "ours.et")
    assert (tmp_path / "ours.et").read_bytes() == oracle_bytes(source, tmp_path)
