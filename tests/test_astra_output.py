"""``--astra-sim`` output: exactly the default output, but for the changes ASTRA-sim needs (the
tracing's time left in, ``tracing_overhead="none"``: ``test_tracing_overhead.py`` has the CPU ops'
shorter durations, the only other change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.fixtures import data_path

from .tracebuild import PROCESS, THREAD, op, trace
from .traces import REAL_TRACES_DIR, read_et, write_trace

GLOO = REAL_TRACES_DIR / "gloo_ops_np4"
MERGED = {
    "cpu-gpt2": REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz",
    "resnet-nccl": REAL_TRACES_DIR / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz",
    "generated-all-collectives": data_path("gpt2_comm_all_rank1_merged.json.gz"),
    "host-1.0.2": REAL_TRACES_DIR / "host" / "chakra_1.0.2_host_2rank.json.gz",
}


def attrs(n: pb.Node) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) if a.WhichOneof("value") else None for a in n.attr}


def both(tmp_path: Path, convert: Any) -> tuple[dict[int, pb.Node], dict[int, pb.Node]]:
    convert(tmp_path / "default.et", ConvertOptions())
    convert(tmp_path / "astra.et", ConvertOptions(astra_sim=True, rank=0, tracing_overhead="none"))
    return (
        {n.id: n for n in read_et(tmp_path / "default.et")[1]},
        {n.id: n for n in read_et(tmp_path / "astra.et")[1]},
    )


def assert_only_astra_changes(default: dict[int, pb.Node], astra: dict[int, pb.Node]) -> None:
    metadata = {i for i, n in default.items() if n.type == pb.METADATA_NODE}
    assert set(astra) == set(default) - metadata
    inherited = {m: list(default[m].data_deps) for m in metadata}
    for node_id, ours in astra.items():
        theirs = default[node_id]
        assert ours.name == theirs.name and ours.inputs == theirs.inputs and ours.outputs == theirs.outputs
        expected_deps: list[int] = []
        for dep in theirs.data_deps:
            for d in inherited.get(dep, [dep]):
                if d not in expected_deps:
                    expected_deps.append(d)
        assert list(ours.data_deps) == expected_deps, node_id
        expected_ctrl = [d for d in theirs.ctrl_deps if d in astra]
        expected_ctrl += [p for d in theirs.ctrl_deps if d in metadata for p in default[d].ctrl_deps if p in astra]
        assert list(ours.ctrl_deps) == expected_ctrl, node_id
        converted = ours.type != theirs.type
        if converted:  # a host-side collective: a c10d op that was a compute node
            assert theirs.type == pb.COMP_NODE and ours.name.startswith("c10d::")
            assert attrs(ours)["is_cpu_op"] is False and "comm_size" in attrs(ours)
            assert {k: v for k, v in attrs(ours).items() if not k.startswith(("comm_", "pg_", "is_cpu"))} == {
                k: v for k, v in attrs(theirs).items() if k != "is_cpu_op"
            }
        else:
            assert attrs(ours) == attrs(theirs), node_id
            if ours.duration_micros != theirs.duration_micros:  # gloo work, counted by its collective
                assert ours.name.startswith("gloo:") and ours.duration_micros == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MERGED))
def test_merged_traces_change_only_what_astra_sim_needs(name: str, tmp_path: Path) -> None:
    default, astra = both(tmp_path, lambda out, options: api.convert(MERGED[name], out, options))
    assert_only_astra_changes(default, astra)
    assert all(d in astra for n in astra.values() for d in (*n.data_deps, *n.ctrl_deps))
    assert not any(n.type == pb.METADATA_NODE for n in astra.values())


@pytest.mark.parametrize("rank", range(4))
def test_gloo_pairs_change_only_what_astra_sim_needs(rank: int, tmp_path: Path) -> None:
    host, device = GLOO / f"rank{rank}_host.json.gz", GLOO / f"rank{rank}_device.json.gz"
    default, astra = both(tmp_path, lambda out, options: api.convert_pair(host, device, out, options))
    assert_only_astra_changes(default, astra)


#: (name, type, comm_type, bytes) of rank 0's host collectives in file order.
RANK0_COLLECTIVES = [
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 4000),  # float x 1000
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 2000),  # bfloat16
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 2000),  # half
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 8000),  # int64
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 8000),  # double
    ("c10d::broadcast_", pb.COMM_COLL_NODE, pb.BROADCAST, 2000),
    ("c10d::allgather_", pb.COMM_COLL_NODE, pb.ALL_GATHER, 1200),  # one rank's input
    ("c10d::_allgather_base_", pb.COMM_COLL_NODE, pb.ALL_GATHER, 1200),
    ("c10d::reduce_scatter_", pb.COMM_COLL_NODE, pb.REDUCE_SCATTER, 3200),  # the whole input
    ("c10d::_reduce_scatter_base_", pb.COMM_COLL_NODE, pb.REDUCE_SCATTER, 3200),
    ("c10d::alltoall_base_", pb.COMM_COLL_NODE, pb.ALL_TO_ALL, 1600),
    ("c10d::alltoall_", pb.COMM_COLL_NODE, pb.ALL_TO_ALL, 1600),
    ("c10d::send", pb.COMM_SEND_NODE, None, 2800),
    ("c10d::recv_", pb.COMM_RECV_NODE, None, 3200),
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 3600),  # on the sub-group (not recorded by gloo)
    ("c10d::allreduce_", pb.COMM_COLL_NODE, pb.ALL_REDUCE, 400),
]


def test_each_host_collective_becomes_the_right_comm_node(tmp_path: Path) -> None:
    out = tmp_path / "o.et"
    api.convert_pair(GLOO / "rank0_host.json.gz", GLOO / "rank0_device.json.gz", out, ConvertOptions(astra_sim=True))
    nodes = read_et(out)[1]
    comm = [n for n in nodes if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE)]
    found = [(n.name, n.type, attrs(n).get("comm_type"), attrs(n)["comm_size"]) for n in comm]
    assert found == RANK0_COLLECTIVES
    assert all(attrs(n)["pg_name"] == "0" and attrs(n)["is_cpu_op"] is False for n in comm)
    send, recv = (next(n for n in comm if n.name == name) for name in ("c10d::send", "c10d::recv_"))
    assert (attrs(send)["comm_src"], attrs(send)["comm_dst"], attrs(send)["comm_tag"]) == (0, 1, 7)
    assert (attrs(recv)["comm_src"], attrs(recv)["comm_dst"], attrs(recv)["comm_tag"]) == (1, 0, 9)
    stay = {n.name for n in nodes if n.name in ("c10d::reduce_", "c10d::gather_", "c10d::scatter_", "c10d::barrier")}
    assert stay == {"c10d::reduce_", "c10d::gather_", "c10d::scatter_", "c10d::barrier"}
    assert all(n.type == pb.COMP_NODE for n in nodes if n.name in stay)


def test_gloo_work_keeps_no_duration_and_broadcast_takes_it(tmp_path: Path) -> None:
    default, astra = both(
        tmp_path,
        lambda out, options: api.convert_pair(GLOO / "rank0_host.json.gz", GLOO / "rank0_device.json.gz", out, options),
    )
    zeroed = [
        i
        for i, n in astra.items()
        if n.name.startswith("gloo:") and n.duration_micros == 0 and default[i].duration_micros > 0
    ]
    assert zeroed
    broadcast = next(i for i, n in astra.items() if n.name == "c10d::broadcast_")
    work = next(i for i, n in default.items() if n.name == "gloo:broadcast")
    assert astra[broadcast].duration_micros == default[work].duration_micros
    assert astra[work].duration_micros == 0


@pytest.mark.slow
def test_nccl_traces_keep_their_kernel_comm_nodes(tmp_path: Path) -> None:
    default, astra = both(tmp_path, lambda out, options: api.convert(MERGED["resnet-nccl"], out, options))
    comm = {i for i, n in astra.items() if n.type == pb.COMM_COLL_NODE}
    assert comm == {i for i, n in default.items() if n.type == pb.COMM_COLL_NODE} and len(comm) == 21
    assert all(n.type == pb.COMP_NODE for n in astra.values() if n.name.startswith("c10d::"))


def test_metadata_dependents_inherit_its_dependencies(tmp_path: Path) -> None:
    nodes = [
        op(1, PROCESS, 1),
        op(2, THREAD, 1),
        op(3, "aten::a", 2),
        op(4, "## process_group:init ##", 2),
        op(5, "aten::b", 2),
        op(6, "aten::c", 4),
    ]
    source = write_trace(trace(nodes), tmp_path / "t.json")
    default, astra = both(tmp_path, lambda out, options: api.convert(source, out, options))
    assert list(default[6].data_deps) == [4] and list(default[6].ctrl_deps) == [4] and 4 not in astra
    assert list(astra[6].data_deps) == list(default[4].data_deps) == [3]
    assert list(astra[6].ctrl_deps) == [2]  # its parent's parent
    assert_only_astra_changes(default, astra)


def test_summary_notes_what_astra_sim_would_refuse(tmp_path: Path) -> None:
    result = api.convert(MERGED["cpu-gpt2"], tmp_path / "o.et")
    assert result.simulator_problems == [
        "1 ctrl_deps name a node that is not in the file",
        "1 METADATA node(s)",
        "2 host-side (gloo) collective(s) are compute nodes, so the network is never simulated",
    ]
    astra = api.convert(MERGED["cpu-gpt2"], tmp_path / "a.et", ConvertOptions(astra_sim=True))
    assert astra.simulator_problems == [] and astra.astra_changes is not None
    assert (astra.astra_changes.metadata_removed, astra.astra_changes.host_collectives) == (1, 2)
