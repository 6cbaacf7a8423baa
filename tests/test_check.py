"""``check``: .et files read back (ours or anyone's) and checked against what ASTRA-sim accepts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.et.decode import read_et

from .traces import REAL_TRACES_DIR
from .traces import read_et as read_et_reference

pytestmark = [pytest.mark.slow]

GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def attr(name: str, value: Any) -> pb.AttributeProto:
    if isinstance(value, bool):
        return pb.AttributeProto(name=name, bool_val=value)
    if isinstance(value, int):
        return pb.AttributeProto(name=name, int64_val=value)
    return pb.AttributeProto(name=name, string_val=value)


def node(
    node_id: int, node_type: int = pb.COMP_NODE, deps: tuple[int, ...] = (), ctrl: tuple[int, ...] = (), **attrs: Any
) -> pb.Node:
    return pb.Node(
        id=node_id,
        name=f"op{node_id}",
        type=node_type,
        data_deps=deps,
        ctrl_deps=ctrl,
        duration_micros=5,
        attr=[attr(k, v) for k, v in attrs.items()],
    )


def allreduce(node_id: int, size: int, deps: tuple[int, ...] = (), pg: str = "0") -> pb.Node:
    return node(node_id, pb.COMM_COLL_NODE, deps, comm_type=pb.ALL_REDUCE, comm_size=size, pg_name=pg, is_cpu_op=False)


def write(path: Path, nodes: list[pb.Node]) -> Path:
    buffer = io.BytesIO()
    encodeMessage(buffer, pb.GlobalMetadata(version="0.0.4"))
    for n in nodes:
        encodeMessage(buffer, n)
    path.write_bytes(buffer.getvalue())
    return path


def job(tmp_path: Path, *ranks: list[pb.Node]) -> list[Path]:
    return [write(tmp_path / f"trace.{rank}.et", nodes) for rank, nodes in enumerate(ranks)]


# -- reading -----------------------------------------------------------------------------------------
def test_reading_back_matches_the_protobuf_runtime(tmp_path: Path) -> None:
    path = tmp_path / "o.et"
    api.convert(REAL_TRACES_DIR / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz", path)
    ours = read_et(path)
    metadata, nodes = read_et_reference(path)
    assert ours.metadata == {a.name: getattr(a, a.WhichOneof("value")) for a in metadata.attr}
    assert list(ours.ids) == [n.id for n in nodes] and ours.names == [n.name for n in nodes]
    assert list(ours.types) == [n.type for n in nodes]
    for row, n in enumerate(nodes):
        assert list(ours.dependencies(row)) == [*n.ctrl_deps, *n.data_deps]
        if n.type == pb.COMM_COLL_NODE:
            expected = {a.name: getattr(a, a.WhichOneof("value")) for a in n.attr if a.name.startswith(("comm", "pg"))}
            assert {k: v for k, v in ours.comm[row].items() if k != "is_cpu_op"} == expected


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "file is empty"),
        (b'{"nodes": []}', "not a Chakra .et file"),
        (b"\x05\x0a\x03abc\x10\x0a\x01", "truncated"),
        (bytes(range(200, 256)) * 4, "not a Chakra .et file"),
    ],
    ids=["empty", "json", "truncated", "random"],
)
def test_not_an_et_file_is_one_line(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.et"
    path.write_bytes(content)
    done = cli("check", path)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and problem in done.stderr, done.stderr


def test_a_truncated_conversion_is_reported(tmp_path: Path) -> None:
    good = tmp_path / "good.et"
    api.convert(GPT2 / "rank0_merged_by_chakra_trace_link.json.gz", good)
    cut = tmp_path / "cut.et"
    cut.write_bytes(good.read_bytes()[:-7])
    done = cli("check", cut)
    assert done.returncode == 1 and "truncated: the record at byte" in done.stderr


# -- the four problems of a default conversion ---------------------------------------------------------
def test_default_output_shows_each_problem_astra_sim_rejects(tmp_path: Path) -> None:
    paths = []
    for rank in range(2):
        paths.append(tmp_path / f"trace.{rank}.et")
        api.convert_pair(GPT2 / f"rank{rank}_host.json.gz", GPT2 / f"rank{rank}_device.json.gz", paths[-1])
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"0": [0, 1]}))  # what convert-all used to write
    done = cli("check", *paths, "--comm-groups", groups)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    warnings = [line for line in done.stderr.splitlines() if ": warning: " in line]
    assert sum("dependencies name no node" in e for e in errors) == 2  # node 1 -> 0 on each rank
    assert sum("METADATA" in e for e in errors) == 2
    assert any("communicator group '0'" in e and "id > 0" in e for e in errors)
    assert sum("host-side collective(s)" in w for w in warnings) == 2


def test_astra_sim_output_passes(tmp_path: Path) -> None:
    out = tmp_path / "et"
    done = cli("convert-all", GPT2, out, "--astra-sim")
    assert done.returncode == 0, done.stderr
    checked = cli("check", out / "trace.0.et", out / "trace.1.et", "--comm-groups", out / "trace.comm_group.json")
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    assert "ALL_REDUCE     group 0         2 x" in checked.stdout
    assert checked.stdout.splitlines()[-1] == "ASTRA-sim would accept: 2 file(s)"


def test_json_report(tmp_path: Path) -> None:
    paths = job(tmp_path, [node(1), allreduce(2, 4096, (1,))], [node(1), allreduce(2, 4096, (1,))])
    done = cli("check", *paths, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["problems"] == []
    first = report["files"][0]
    assert first["nodes_by_type"] == {"COMP": 1, "COMM_COLL": 1} and first["roots"] == 1
    assert first["collectives"] == [{"kind": "ALL_REDUCE", "group": "0", "count": 1, "bytes": 4096}]


# -- rules, one file and across ranks ------------------------------------------------------------------
RULES = {
    "missing dependency": ([[node(1), node(2, deps=(9,))]], "name no node", True),
    "duplicate id": ([[node(1), node(1)]], "appear more than once", True),
    "cycle": ([[node(1), node(2, deps=(3,)), node(3, deps=(2,))]], "dependency cycle", True),
    "self dependency": ([[node(1), node(2, deps=(2,))]], "dependency cycle", True),
    "no root": ([[node(1, deps=(2,)), node(2, deps=(1,))]], "no node is free", True),
    "metadata": ([[node(1), node(2, pb.METADATA_NODE, (1,))]], "METADATA", True),
    "invalid node": ([[node(1), node(2, pb.INVALID_NODE, (1,))]], "INVALID node(s)", False),
    "comm on cpu": (
        [[node(1), node(2, pb.COMM_COLL_NODE, comm_type=0, comm_size=8, is_cpu_op=True)]],
        "marked is_cpu_op",
        True,
    ),
    "unsupported collective": (
        [[node(1), node(2, pb.COMM_COLL_NODE, comm_type=pb.BARRIER, comm_size=0)]],
        "BARRIER is not a collective ASTRA-sim simulates",
        True,
    ),
    "broadcast": (
        [[node(1), node(2, pb.COMM_COLL_NODE, comm_type=pb.BROADCAST, comm_size=8)]],
        "replayed for its duration",
        False,
    ),
    "no comm size": ([[node(1), node(2, pb.COMM_COLL_NODE, comm_type=0)]], "comm_size None", True),
    "group name": ([[node(1), allreduce(2, 8, pg="default_pg")]], "not a decimal group id", True),
    "send without tag": (
        [[node(1), node(2, pb.COMM_SEND_NODE, comm_dst=1, comm_size=8)], [node(1)]],
        "without comm_tag",
        True,
    ),
    "counts differ": (
        [[allreduce(1, 8), allreduce(2, 8, (1,))], [allreduce(1, 8)]],
        "rank 1 issues 1 collectives, rank 0 2",
        True,
    ),
    "sizes differ": ([[allreduce(1, 8)], [allreduce(1, 16)]], "collective #1 is ALL_REDUCE of 16", True),
    "group without file": ([[allreduce(1, 8, pg="1")], [allreduce(1, 8, pg="1")]], "no communicator group file", True),
    "unmatched send": (
        [
            [node(1, pb.COMM_SEND_NODE, comm_dst=1, comm_tag=7, comm_size=8)],
            [node(1, pb.COMM_RECV_NODE, comm_src=0, comm_tag=8, comm_size=8)],
        ],
        "send(s) 0 -> 1 (tag 7",
        True,
    ),
    "send from another rank": (
        [[node(1, pb.COMM_SEND_NODE, comm_src=1, comm_dst=0, comm_tag=7, comm_size=8)], [node(1)]],
        "a SEND of rank 1 in rank 0's file",
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(RULES))
def test_rules(case: str, tmp_path: Path) -> None:
    ranks, problem, fatal = RULES[case]
    done = cli("check", *job(tmp_path, *ranks))
    assert problem in done.stderr, done.stderr
    assert done.returncode == (1 if fatal else 0), done.stderr
    line = next(line for line in done.stderr.splitlines() if problem in line)
    assert line.startswith("chakra-convert-fast: " + ("error: " if fatal else "warning: "))


def test_matched_send_and_receive_with_groups_pass(tmp_path: Path) -> None:
    paths = job(
        tmp_path,
        [node(1, pb.COMM_SEND_NODE, comm_src=0, comm_dst=1, comm_tag=7, comm_size=8), allreduce(2, 8, (1,), pg="1")],
        [node(1, pb.COMM_RECV_NODE, comm_src=0, comm_dst=1, comm_tag=7, comm_size=8), allreduce(2, 8, (1,), pg="1")],
    )
    groups = tmp_path / "g.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    done = cli("check", *paths, "--comm-groups", groups)
    assert done.returncode == 0, done.stderr


def test_uneven_subgroups_before_the_default_group_are_flagged(tmp_path: Path) -> None:
    """ASTRA-sim numbers default-group collectives with a counter every collective advances."""
    paths = job(
        tmp_path,
        [allreduce(1, 8, pg="1"), allreduce(2, 8, (1,))],
        [allreduce(1, 8, pg="2"), allreduce(2, 8, (1,))],
        [allreduce(2, 8)],
    )
    groups = tmp_path / "g.json"
    groups.write_text(json.dumps({"1": [0], "2": [1]}))
    done = cli("check", *paths, "--comm-groups", groups)
    assert done.returncode == 1 and "default-group collectives follow different numbers" in done.stderr


def test_our_gloo_conversion_of_every_op_passes_with_its_groups(tmp_path: Path) -> None:
    """The every-op gloo capture: all ranks consistent once converted for ASTRA-sim."""
    traces = REAL_TRACES_DIR / "gloo_ops_np4"
    paths = []
    for rank in range(4):
        paths.append(tmp_path / f"trace.{rank}.et")
        api.convert_pair(
            traces / f"rank{rank}_host.json.gz",
            traces / f"rank{rank}_device.json.gz",
            paths[-1],
            ConvertOptions(astra_sim=True),
        )
    done = cli("check", *paths)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("BROADCAST is replayed") == 4
