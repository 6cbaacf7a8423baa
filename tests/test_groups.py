"""Every gloo collective in its real process group (``convert/groups.py``, ``profiler/groups.py``).

``gloo_groups_np4`` is a real 4-rank capture (``tests/capture_gloo_groups.py``): pairs {0,1}
{2,3} are groups 1 and 2, columns {0,2} {1,3} groups 3 and 4, one-rank groups 5..8."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import ConvertOptions, api, cli
from chakra_convert_fast.converter.convert.groups import GroupLabel, marker_name, parse_marker

from .traces import REAL_TRACES_DIR, read_et

GROUPS = REAL_TRACES_DIR / "gloo_groups_np4"
GLOO_OPS = REAL_TRACES_DIR / "gloo_ops_np4"
AR, AG, RS = pb.ALL_REDUCE, pb.ALL_GATHER, pb.REDUCE_SCATTER


def attrs(n: pb.Node) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) if a.WhichOneof("value") else None for a in n.attr}


def expected(rank: int) -> list[tuple[Any, ...]]:
    """(node type, comm_type, bytes, pg_name, src, dst, tag) of the rank's communication nodes."""
    pair, column = str(1 + rank // 2), str(3 + rank % 2)
    first = rank - rank % 2  # the pair's first rank sends to its second (peer 1 of the pair group)
    p2p = ((pb.COMM_SEND_NODE if rank % 2 == 0 else pb.COMM_RECV_NODE), None, 128, pair, first, first + 1, 5)
    return [
        (pb.COMM_COLL_NODE, AR, 1024, pair, None, None, None),
        (pb.COMM_COLL_NODE, AR, 1024, column, None, None, None),  # functional: its input names it
        (pb.COMM_COLL_NODE, AG, 1024, pair, None, None, None),
        (pb.COMM_COLL_NODE, RS, 1024, column, None, None, None),
        # the one-rank group's all-reduce stays a compute node
        (pb.COMM_COLL_NODE, AR, 256, "0", None, None, None),
        p2p,
    ]


def comm_nodes(path: Path) -> list[tuple[Any, ...]]:
    out = []
    for n in read_et(path)[1]:
        if n.type in (pb.COMM_COLL_NODE, pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            a = attrs(n)
            out.append(
                (
                    n.type,
                    a.get("comm_type"),
                    a["comm_size"],
                    a["pg_name"],
                    a.get("comm_src"),
                    a.get("comm_dst"),
                    a.get("comm_tag"),
                )
            )
    return out


@pytest.mark.parametrize("rank", range(4))
def test_each_collective_lands_in_its_group(tmp_path: Path, rank: int) -> None:
    out = tmp_path / f"r{rank}.et"
    result = api.convert_pair(
        GROUPS / f"rank{rank}_host.json.gz",
        GROUPS / f"rank{rank}_device.json.gz",
        out,
        ConvertOptions(astra_sim=True, rank=rank),
    )
    assert comm_nodes(out) == expected(rank)
    assert result.conversion.warnings == []
    changes = result.conversion.astra_changes
    assert changes is not None and changes.single_rank == 1
    names = [n.name for n in read_et(out)[1]]
    assert marker_name(str(5 + rank), [rank]) in names  # kept, a compute node


def test_the_job_passes_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    job.mkdir()
    for f in GROUPS.iterdir():
        (job / f.name).write_bytes(f.read_bytes())
    assert cli.main(["convert-all", "-q", "--astra-sim", str(job), str(tmp_path / "out")]) == 0
    groups = json.loads((tmp_path / "out" / "trace.comm_group.json").read_text())
    assert groups == {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3], "5": [0], "6": [1], "7": [2], "8": [3]}
    files = [str(tmp_path / "out" / f"trace.{r}.et") for r in range(4)]
    capsys.readouterr()
    assert cli.main(["check", *files]) == 0
    err = capsys.readouterr().err
    assert "compute nodes" not in err  # the one-rank groups' collectives are not reported as unconverted
    # a group file that does not hold a collective's rank is flagged
    (tmp_path / "out" / "trace.comm_group.json").write_text(json.dumps({**groups, "1": [0, 2]}))
    assert cli.main(["check", *files]) == 1
    captured = capsys.readouterr()
    assert "without being in it" in captured.err and "issues 0 collectives" in captured.err


def test_no_group_in_a_job_of_several_warns(tmp_path: Path) -> None:
    # gloo_ops_np4 was captured without markers and has sub-groups {0,1} {2,3}
    result = api.convert_pair(
        GLOO_OPS / "rank0_host.json.gz",
        GLOO_OPS / "rank0_device.json.gz",
        tmp_path / "r0.et",
        ConvertOptions(astra_sim=True, rank=0),
    )
    (warning,) = [w for w in result.conversion.warnings if "name no process group" in w]
    assert "c10d::allreduce_ x" in warning and "capture with chakra-profile" in warning
    assert "[0, 1]" in warning and "[0, 1, 2, 3]" in warning


def test_markers_removed_warn_naming_the_collectives(tmp_path: Path) -> None:
    host = json.loads(gzip.decompress((GROUPS / "rank0_host.json.gz").read_bytes()))
    for node in host["nodes"]:
        if node["name"].startswith("## chakra:group"):
            node["name"] = "## something else ##"
    path = tmp_path / "host.json"
    path.write_text(json.dumps(host))
    result = api.convert_pair(
        path, GROUPS / "rank0_device.json.gz", tmp_path / "r0.et", ConvertOptions(astra_sim=True, rank=0)
    )
    (warning,) = [w for w in result.conversion.warnings if "name no process group" in w]
    assert "c10d::_allgather_base_ x1" in warning and "c10d::send x1" in warning
    # the functional all-reduce still names its group; the others fall back to the default group
    assert [c[3] for c in comm_nodes(tmp_path / "r0.et")] == ["0", "3", "0", "0", "0", "0", "0"]


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("## chakra:group 3 0,2 ##", GroupLabel("3", (0, 2))),
        ("## chakra:group 0 0 ##", GroupLabel("0", (0,))),
        ("## chakra:group 7  ##", GroupLabel("7", ())),
        ("## chakra:group 3 0,x ##", None),
        ("## chakra:group 3 -1 ##", None),
        ("## chakra:group 3 ##", None),
        ("## chakra:group  0 ##", None),
        ("ProfilerStep#3", None),
    ],
)
def test_parse_marker(name: str, label: GroupLabel | None) -> None:
    assert parse_marker(name) == label


def test_marker_round_trip() -> None:
    assert parse_marker(marker_name("12", [4, 5, 6])) == GroupLabel("12", (4, 5, 6))


MARKER_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from torch.profiler import ExecutionTraceObserver, profile, ProfilerActivity
from chakra_convert_fast.profiler.groups import record_groups
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
covered = record_groups()
group = dist.new_group([0])
observer = ExecutionTraceObserver().register_callback(sys.argv[1])
with profile(activities=[ProfilerActivity.CPU], execution_trace_observer=observer):
    t = torch.ones(8)
    dist.all_reduce(t, group=group)
    dist.all_gather_into_tensor(torch.empty(8), t)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    model(torch.ones(2, 4)).sum().backward()
dist.destroy_process_group()
print(json.dumps(covered))
"""


@pytest.mark.torch
@pytest.mark.slow
def test_chakra_profile_marks_each_collective_with_its_group(tmp_path: Path) -> None:
    """profiler/groups.py: the marker is a child of every c10d op, named after its group, DDP's
    reducer (C++) included; the op is recorded once."""
    host = tmp_path / "host.json"
    done = subprocess.run(
        [sys.executable, "-c", MARKER_SCRIPT, str(host)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert {"allreduce_", "_allgather_base_", "send", "recv_", "_reduce_scatter_base_"} <= set(
        json.loads(done.stdout.strip().splitlines()[-1])
    )
    nodes = json.loads(host.read_text())["nodes"]
    by_id = {n["id"]: n for n in nodes}
    ops = [n for n in nodes if n["name"].startswith("c10d::")]
    markers = {n["ctrl_deps"]: n["name"] for n in nodes if n["name"].startswith("## chakra:group ")}
    labels = [markers.get(op["id"]) for op in ops]
    assert labels[0] == "## chakra:group 1 0 ##"  # the one-rank group
    assert labels[1] == "## chakra:group 0 0 ##"  # the default group
    assert "c10d::allreduce_" in [op["name"] for op in ops[2:]] and all(labels), labels  # DDP's, from C++
    assert all(by_id[p]["name"].startswith("c10d::") for p in markers)  # never a second op around it
