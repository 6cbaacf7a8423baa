"""``compact``: the merge rule on small named graphs (table-driven), the file pass, the commands.

Each case is a graph written with mlc-chakra's own protobuf classes and the nodes expected after
compaction, read back the same way: id -> (duration, data_deps, ctrl_deps). The equality of the
simulated time in the real ASTRA-sim is in tests/test_compact_astra_sim.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.third_party.utils.protolib import encodeMessage

from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.errors import TraceContentError, TraceFormatError

from .traces import REAL_TRACES_DIR, read_et

# (id, kind, duration, data_deps, ctrl_deps[, attrs]); kind: cpu / gpu compute, coll, send, recv
Spec = tuple[Any, ...]


def _node(spec: Spec) -> pb.Node:
    node_id, kind, duration, data, ctrl, *rest = spec
    attrs: dict[str, Any] = rest[0] if rest else {}
    node = pb.Node(id=node_id, name=f"op{node_id}", duration_micros=duration, data_deps=data, ctrl_deps=ctrl)
    node.inputs.values, node.outputs.values = f"[{node_id}]", f"[{node_id + 1000}]"
    if kind in ("cpu", "gpu"):
        node.type = pb.COMP_NODE
        node.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=kind == "cpu"))
    elif kind == "invalid":
        node.type = pb.INVALID_NODE
    else:
        node.type = {"coll": pb.COMM_COLL_NODE, "send": pb.COMM_SEND_NODE, "recv": pb.COMM_RECV_NODE}[kind]
        node.attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
        node.attr.append(pb.AttributeProto(name="comm_size", int64_val=1024))
        if kind == "coll":
            node.attr.append(pb.AttributeProto(name="comm_type", int64_val=pb.ALL_REDUCE))
    for name, value in attrs.items():
        if name == "tensor_size":
            node.attr.append(pb.AttributeProto(name=name, uint64_val=value))
        else:
            node.attr.append(pb.AttributeProto(name=name, int64_val=value))
    return node


def write(path: Path, specs: list[Spec]) -> Path:
    buffer = io.BytesIO()
    encodeMessage(buffer, pb.GlobalMetadata(version="0.0.4"))
    for spec in specs:
        encodeMessage(buffer, _node(spec))
    path.write_bytes(buffer.getvalue())
    return path


def read(path: Path) -> list[pb.Node]:
    return read_et(path)[1]


def summary(nodes: list[pb.Node]) -> dict[int, tuple[int, list[int], list[int]]]:
    return {n.id: (n.duration_micros, sorted(n.data_deps), sorted(n.ctrl_deps)) for n in nodes}


CASES: dict[str, tuple[list[Spec], dict[int, tuple[int, list[int], list[int]]]]] = {
    "a chain of three becomes one": (
        [(1, "cpu", 5, [], []), (2, "cpu", 7, [1], []), (3, "cpu", 11, [2], [])],
        {1: (23, [], [])},
    ),
    "a collective is never merged, nor merged across": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 7, [1], []),
            (3, "coll", 9, [2], []),
            (4, "cpu", 3, [3], []),
            (5, "cpu", 4, [4], []),
        ],
        {1: (12, [], []), 3: (9, [1], []), 4: (7, [3], [])},
    ),
    "sends and receives are never merged": (
        [(1, "send", 5, [], []), (2, "recv", 7, [1], []), (3, "cpu", 2, [2], [])],
        {1: (5, [], []), 2: (7, [1], []), 3: (2, [2], [])},
    ),
    "a node with two children ends its run": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 1, [1], []),
            (3, "gpu", 2, [2], []),
            (4, "cpu", 3, [2], []),
            (5, "cpu", 4, [4], []),
        ],
        {1: (6, [], []), 3: (2, [1], []), 4: (7, [1], [])},
    ),
    "a node with two parents starts a run": (
        [(1, "cpu", 5, [], []), (2, "gpu", 1, [], []), (3, "cpu", 2, [1, 2], []), (4, "cpu", 3, [3], [])],
        {1: (5, [], []), 2: (1, [], []), 3: (5, [1, 2], [])},
    ),
    "a redundant dependency is dropped, then the chain merges": (
        [(1, "cpu", 5, [], []), (2, "cpu", 7, [1], [1]), (3, "cpu", 11, [2], [1]), (4, "cpu", 13, [3, 1], [2])],
        {1: (36, [], [])},
    ),
    "the redundant one of a kept pair of dependencies is dropped": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 6, [1], []),
            (3, "gpu", 2, [2], []),
            (4, "gpu", 8, [], []),
            (5, "cpu", 3, [3, 1, 4], []),
        ],
        {1: (11, [], []), 3: (2, [1], []), 4: (8, [], []), 5: (3, [3, 4], [])},
    ),
    "CPU and GPU compute nodes are different resources": (
        [(1, "cpu", 5, [], []), (2, "gpu", 7, [1], []), (3, "gpu", 1, [2], [])],
        {1: (5, [], []), 2: (8, [1], [])},
    ),
    "a zero duration is kept apart (ASTRA-sim charges it one cycle)": (
        [(1, "cpu", 5, [], []), (2, "cpu", 0, [1], []), (3, "cpu", 4, [2], []), (4, "cpu", 6, [3], [])],
        {1: (5, [], []), 2: (0, [1], []), 3: (10, [2], [])},
    ),
    "the dependents of a run's last node depend on its first": (
        [(1, "cpu", 5, [], []), (2, "cpu", 7, [1], []), (3, "coll", 9, [2], []), (4, "gpu", 1, [2], [])],
        {1: (12, [], []), 3: (9, [1], []), 4: (1, [1], [])},
    ),
    "ctrl_deps stay ctrl_deps": (
        [(1, "cpu", 5, [], []), (2, "cpu", 7, [], [1]), (3, "coll", 1, [], [2]), (4, "cpu", 2, [], [3])],
        {1: (12, [], []), 3: (1, [], [1]), 4: (2, [], [3])},
    ),
    "two threads on one resource: ASTRA-sim picks between them by id, nothing merged": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 3, [], []),
            (3, "cpu", 7, [1], []),
            (4, "cpu", 4, [2], []),
            (5, "coll", 1, [3, 4], []),
        ],
        {1: (5, [], []), 2: (3, [], []), 3: (7, [1], []), 4: (4, [2], []), 5: (1, [3, 4], [])},
    ),
    "two threads on one resource: the one whose rivals all have higher ids merges, the other not": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 7, [1], []),
            (3, "cpu", 1, [2], []),
            (4, "coll", 1, [3], []),
            (10, "cpu", 3, [], []),
            (11, "cpu", 4, [10], []),
            (12, "cpu", 2, [11], []),
        ],
        {1: (13, [], []), 4: (1, [1], []), 10: (3, [], []), 11: (4, [10], []), 12: (2, [11], [])},
    ),
    "a leaf on the resource with a lower id than the next of a run: not merged there": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 7, [1], []),
            (9, "cpu", 4, [2], []),
            (10, "cpu", 6, [9], []),
            (3, "cpu", 2, [1], []),
            (4, "gpu", 1, [1], []),
        ],
        {1: (5, [], []), 2: (7, [1], []), 9: (4, [2], []), 10: (6, [9], []), 3: (2, [1], []), 4: (1, [1], [])},
    ),
    "two threads that wait for each other are one order: merged": (
        [
            (1, "cpu", 5, [], []),
            (2, "cpu", 3, [1], []),
            (3, "cpu", 7, [2], []),
            (4, "cpu", 4, [3], []),
            (5, "cpu", 6, [4, 2], []),
        ],
        {1: (25, [], [])},
    ),
    "an INVALID node anywhere: nothing merged (ASTRA-sim issues what it releases at the next event)": (
        [(1, "cpu", 5, [], []), (2, "cpu", 7, [1], []), (3, "invalid", 0, [], [])],
        {1: (5, [], []), 2: (7, [1], []), 3: (0, [], [])},
    ),
    "CPU and GPU chains side by side, each merged": (
        [
            (1, "cpu", 5, [], []),
            (2, "gpu", 3, [], []),
            (3, "cpu", 7, [1], []),
            (4, "gpu", 4, [2], []),
            (5, "coll", 1, [3, 4], []),
        ],
        {1: (12, [], []), 2: (7, [], []), 5: (1, [1, 2], [])},
    ),
    "parents later in the file than their children": (
        [(3, "cpu", 11, [2], []), (2, "cpu", 7, [1], []), (1, "cpu", 5, [], [])],
        {1: (23, [], [])},
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_merge_rule(name: str, tmp_path: Path) -> None:
    specs, expected = CASES[name]
    source = write(tmp_path / "in.et", specs)
    result = api.compact(source, tmp_path / "out.et")
    assert summary(read(tmp_path / "out.et")) == expected
    assert result.nodes_read == len(specs) and result.nodes_written == len(expected)


def test_roofline_attributes_are_summed_by_name(tmp_path: Path) -> None:
    specs: list[Spec] = [
        (1, "gpu", 5, [], [], {"num_ops": 100, "tensor_size": 8}),
        (2, "gpu", 7, [1], [], {"num_ops": 300, "tensor_size": 24}),
        (3, "gpu", 1, [2], [], {"num_ops": 5}),  # no tensor_size: its own node
    ]
    api.compact(write(tmp_path / "in.et", specs), tmp_path / "out.et")
    out = {n.id: {a.name: a for a in n.attr} for n in read(tmp_path / "out.et")}
    assert sorted(out) == [1, 3]
    assert out[1]["num_ops"].int64_val == 400 and out[1]["tensor_size"].uint64_val == 32
    assert out[3]["num_ops"].int64_val == 5 and "tensor_size" not in out[3]


def test_merged_node_keeps_its_first_nodes_fields(tmp_path: Path) -> None:
    api.compact(write(tmp_path / "in.et", CASES["a chain of three becomes one"][0]), tmp_path / "out.et")
    (node,) = read(tmp_path / "out.et")
    # named for what it holds (issue 26 goal 9): its first and last node, and how many
    assert (node.name, node.inputs.values, node.outputs.values) == ("op1 ... op3, 3 ops", "[1]", "[1001]")
    assert [a.name for a in node.attr] == ["is_cpu_op"] and node.attr[0].bool_val is True


def test_compacting_twice_changes_nothing(tmp_path: Path) -> None:
    specs = CASES["a collective is never merged, nor merged across"][0]
    api.compact(write(tmp_path / "in.et", specs), tmp_path / "once.et")
    again = api.compact(tmp_path / "once.et", tmp_path / "once.et")  # in place
    assert again.nodes_written == again.nodes_read and again.redundant_dependencies == 0


@pytest.mark.parametrize(
    ("specs", "problem"),
    [
        ([(1, "cpu", 5, [], []), (2, "cpu", 5, [9], [])], "depends on 9, which is no node"),
        ([(1, "cpu", 5, [2], []), (2, "cpu", 5, [1], [])], "dependency cycle"),
        ([(1, "cpu", 5, [], []), (1, "cpu", 5, [], [])], "used twice"),
    ],
)
def test_what_asra_sim_cannot_run_is_refused(specs: list[Spec], problem: str, tmp_path: Path) -> None:
    with pytest.raises(TraceContentError, match=problem):
        api.compact(write(tmp_path / "in.et", specs), tmp_path / "out.et")
    assert not (tmp_path / "out.et").exists()


def test_not_an_et_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "in.et").write_bytes(b"\xff" * 40)
    with pytest.raises(TraceFormatError):
        api.compact(tmp_path / "in.et", tmp_path / "out.et")
    assert not (tmp_path / "out.et").exists()


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_compact_command_on_every_rank_of_a_prefix(tmp_path: Path) -> None:
    specs = CASES["a collective is never merged, nor merged across"][0]
    for rank in range(3):
        write(tmp_path / f"trace.{rank}.et", specs)
    done = cli("compact", tmp_path / "trace", tmp_path / "small")
    assert done.returncode == 0, done.stderr
    assert "compacted 3 rank(s): 9 nodes from 15" in done.stderr
    assert sorted(p.name for p in tmp_path.glob("small.*.et")) == ["small.0.et", "small.1.et", "small.2.et"]


def test_compacting_ranks_is_all_or_nothing(tmp_path: Path) -> None:
    """A rank that cannot be compacted leaves every old output as it was (and nothing hidden)."""
    specs = CASES["a collective is never merged, nor merged across"][0]
    for rank in range(3):
        write(tmp_path / f"trace.{rank}.et", specs)
        (tmp_path / f"small.{rank}.et").write_bytes(b"old")
    (tmp_path / "trace.2.et").write_bytes(b"\x05not a trace")
    done = cli("compact", tmp_path / "trace", tmp_path / "small")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "trace.2.et" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".", "small"))) == [
        "small.0.et",
        "small.1.et",
        "small.2.et",
    ]
    assert all((tmp_path / f"small.{rank}.et").read_bytes() == b"old" for rank in range(3))


def test_compact_command_errors_are_one_line(tmp_path: Path) -> None:
    done = cli("compact", tmp_path / "none", tmp_path / "out")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "chakra-convert-fast: error:" in done.stderr
    write(tmp_path / "bad.et", [(1, "cpu", 5, [7], [])])
    done = cli("compact", tmp_path / "bad.et", tmp_path / "out.et")
    assert done.returncode == 1 and "no node of the file" in done.stderr and not (tmp_path / "out.et").exists()


def test_compact_refuses_a_gap_in_the_ranks(tmp_path: Path) -> None:
    """Issue 29: ranks 0, 1, 3 were "compacted 2 rank(s)" (rank 3 dropped silently)."""
    specs = CASES["a collective is never merged, nor merged across"][0]
    for rank in (0, 1, 3):
        write(tmp_path / f"trace.{rank}.et", specs)
    done = cli("compact", tmp_path / "trace", tmp_path / "small")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "trace.2.et: rank 2 of 0..3 is missing (1 missing): ranks 0..1 are there, then trace.3.et" in done.stderr
    assert not list(tmp_path.glob("small*")) and not list(tmp_path.glob(".*"))


def test_compact_refuses_another_jobs_rank_files_beside_the_new_ones(tmp_path: Path) -> None:
    """Issue 29: compacting 2 ranks into a prefix holding 4 left small.2.et and small.3.et of the
    other job beside the 2 new files: one job of two."""
    specs = CASES["a collective is never merged, nor merged across"][0]
    for rank in (0, 1):
        write(tmp_path / f"trace.{rank}.et", specs)
    for rank in range(4):
        (tmp_path / f"small.{rank}.et").write_bytes(b"old")
    done = cli("compact", tmp_path / "trace", tmp_path / "small")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "small.2.et: exists (2 rank file(s) of small beyond the 2 rank(s) of" in done.stderr, done.stderr
    assert all((tmp_path / f"small.{rank}.et").read_bytes() == b"old" for rank in range(4))


def test_compact_calls_a_fifo_input_what_it_is(tmp_path: Path) -> None:
    """Issue 29: a FIFO input was "IN.0.et: no such file" (taken for a prefix of rank files)."""
    os.mkfifo(tmp_path / "in.et")
    done = cli("compact", tmp_path / "in.et", tmp_path / "out.et")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "in.et: is a FIFO, not a regular file" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.et"]


def test_convert_compact_writes_the_compacted_graph(tmp_path: Path) -> None:
    """--compact on a conversion: the output is what compacting the --astra-sim output gives."""
    merged = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz"
    plain = api.convert(merged, tmp_path / "plain.et", ConvertOptions(astra_sim=True))
    api.compact(tmp_path / "plain.et", tmp_path / "after.et")
    result = api.convert(merged, tmp_path / "compact.et", ConvertOptions(compact=True))
    assert result.compaction is not None and result.compaction.nodes_read == plain.nodes_written
    assert result.compaction.nodes_written < plain.nodes_written
    assert (tmp_path / "compact.et").read_bytes() == (tmp_path / "after.et").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["after.et", "compact.et", "plain.et"]


@pytest.mark.slow
def test_convert_all_compact_writes_compacted_ranks_check_accepts(tmp_path: Path) -> None:
    done = cli("convert-all", REAL_TRACES_DIR / "cpu_gpt2_ddp2", tmp_path / "et", "--compact")
    assert done.returncode == 0, done.stderr
    ranks = [tmp_path / "et" / f"trace.{rank}.et" for rank in range(2)]
    assert all(len(read(path)) < 50 for path in ranks)  # from ~2,700 nodes a rank
    checked = cli("check", *ranks, "--comm-groups", tmp_path / "et" / "trace.comm_group.json")
    assert checked.returncode == 0, checked.stderr
    assert not [p for p in (tmp_path / "et").iterdir() if p.name.startswith(".")]


def test_scale_compact_writes_every_rank_compacted(tmp_path: Path) -> None:
    specs = CASES["a collective is never merged, nor merged across"][0]
    for rank in range(2):
        write(tmp_path / f"job.{rank}.et", specs)
    plain = api.scale(tmp_path / "job", tmp_path / "plain" / "big", 8)
    small = api.scale(tmp_path / "job", tmp_path / "small" / "big", 8, compact=True)
    assert plain.nodes == (5, 5) and small.nodes == (3, 3)
    for rank in range(8):
        api.compact(tmp_path / "plain" / f"big.{rank}.et", tmp_path / "again.et")
        assert (tmp_path / "small" / f"big.{rank}.et").read_bytes() == (tmp_path / "again.et").read_bytes()
    done = cli("scale", tmp_path / "job", tmp_path / "cli" / "big", "--ranks", "4", "--compact")
    assert done.returncode == 0, done.stderr
    assert [len(read(tmp_path / "cli" / f"big.{rank}.et")) for rank in range(4)] == [3] * 4
    assert not [p for p in (tmp_path / "small").iterdir() if p.name.startswith(".")]


def test_sums_keep_each_attributes_own_encoding(tmp_path: Path) -> None:
    nodes = [_node((1, "gpu", 5, [], [])), _node((2, "gpu", 7, [1], []))]
    for node, value in zip(nodes, (3, 4), strict=True):
        node.attr.append(pb.AttributeProto(name="num_ops", sint64_val=value))
        node.attr.append(pb.AttributeProto(name="tensor_size", uint64_val=value * 10))
    buffer = io.BytesIO()
    encodeMessage(buffer, pb.GlobalMetadata(version="0.0.4"))
    for node in nodes:
        encodeMessage(buffer, node)
    (tmp_path / "in.et").write_bytes(buffer.getvalue())
    api.compact(tmp_path / "in.et", tmp_path / "out.et")
    (merged,) = read(tmp_path / "out.et")
    attrs = {a.name: a for a in merged.attr}
    assert attrs["num_ops"].sint64_val == 7 and attrs["tensor_size"].uint64_val == 70
