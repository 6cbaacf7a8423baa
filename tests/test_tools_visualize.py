"""``visualize``: chakra_visualizer's graph, streamed: DOT as the graphviz package writes it, GraphML
that networkx reads as the reference's graph; the cuts; PDF/SVG only through graphviz's dot."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import graphviz
import networkx as nx
import pytest
from chakra.schema.protobuf import et_def_pb2 as pb
from chakra.src.visualizer.visualizer import escape_label

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.wire import delimited_message
from tests.clirun import CLI, Done, assert_one_error, kill_session, listing, run_cli
from tests.traces import read_et

DATA = Path(__file__).parent / "data" / "traces"
NAMES = [
    "aten::mm",
    "node",
    "Graph",
    'a "quoted" \\ name',
    "<html>",
    "x-y|z{}",
    "ümlaut 中",
    "",
    "ok_name",
    "12",
    "-3",
    "trailing\\",
    'q\\"',
    "tab\there",
    "amp & lt < gt >",
]


@pytest.fixture(scope="module")
def real_et(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("et") / "gpt2.0.et"
    api.convert(DATA / "cpu_gpt2_ddp2" / "rank0_merged_by_chakra_trace_link.json.gz", out)
    return out


@pytest.fixture(scope="module")
def tricky_et(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Names graphviz must quote or escape; a dependency both data and control; a dangling one;
    collectives with nodes depending on them."""
    nodes = [
        pb.Node(
            id=i + 1,
            name=name,
            type=pb.COMP_NODE,
            data_deps=[i] if i else [],
            ctrl_deps=[i, 999] if i % 3 == 0 and i else [],
        )
        for i, name in enumerate(NAMES)
    ]
    nodes.append(pb.Node(id=100, name="ALL_REDUCE", type=pb.COMM_COLL_NODE, data_deps=[3]))
    nodes.append(pb.Node(id=101, name="after", type=pb.COMP_NODE, data_deps=[100]))
    nodes.append(pb.Node(id=102, name="after after", type=pb.COMP_NODE, ctrl_deps=[101]))
    path = tmp_path_factory.mktemp("et") / "tricky.et"
    path.write_bytes(
        delimited_message(pb.GlobalMetadata(version="1.0.0").SerializeToString())
        + b"".join(delimited_message(n.SerializeToString()) for n in nodes)
    )
    return path


def _nodes(path: Path) -> list[pb.Node]:
    return read_et(path)[1]


def reference_dot_source(path: Path) -> str:
    """The graphviz.Digraph chakra_visualizer builds (its statements, before dot lays them out)."""
    f = graphviz.Digraph()
    for node in _nodes(path):
        f.node(name=f"{node.id}", label=escape_label(node.name), id=str(node.id), shape="record")
        for dep in node.data_deps:
            f.edge(str(dep), str(node.id), arrowhead="normal")
        for dep in node.ctrl_deps:
            f.edge(str(dep), str(node.id), arrowhead="tee")
    return f.source


def reference_graphml(path: Path, tmp_path: Path) -> nx.DiGraph:
    exe = shutil.which("chakra_visualizer")
    assert exe, "mlc-chakra (the test extra) provides chakra_visualizer"
    out = tmp_path / "ref.graphml"
    subprocess.run([exe, "--input_filename", str(path), "--output_filename", str(out)], check=True, capture_output=True)
    return nx.read_graphml(out)


@pytest.fixture(scope="module")
def real_graph(real_et: Path, tmp_path_factory: pytest.TempPathFactory) -> nx.DiGraph:
    return reference_graphml(real_et, tmp_path_factory.mktemp("ref"))


def same_graph(ours: nx.DiGraph, theirs: nx.DiGraph) -> None:
    assert type(ours) is type(theirs) is nx.DiGraph
    assert dict(ours.nodes(data=True)) == dict(theirs.nodes(data=True))
    assert {(u, v): d for u, v, d in ours.edges(data=True)} == {(u, v): d for u, v, d in theirs.edges(data=True)}


@pytest.mark.filterwarnings("ignore::graphviz.DotSyntaxWarning")  # graphviz on the reference's side
@pytest.mark.parametrize("trace", ["real_et", "tricky_et"])
def test_dot_is_the_graphviz_source_of_chakra_visualizer(
    trace: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = request.getfixturevalue(trace)
    done = run_cli("visualize", path, tmp_path / "g.dot", "-q")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "g.dot").read_text(encoding="utf-8") == reference_dot_source(path)


@pytest.mark.parametrize("trace", ["real_et", "tricky_et"])
def test_graphml_is_chakra_visualizers_graph(trace: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(trace)
    done = run_cli("visualize", "--input_filename", path, "--output_filename", tmp_path / "g.graphml")
    assert done.returncode == 0, done.stderr
    expected = request.getfixturevalue("real_graph") if trace == "real_et" else reference_graphml(path, tmp_path)
    same_graph(nx.read_graphml(tmp_path / "g.graphml"), expected)


def test_cut_by_id_range(real_et: Path, real_graph: nx.DiGraph, tmp_path: Path) -> None:
    result = api.visualize(real_et, tmp_path / "g.graphml", api.GraphCut(ids=(50, 120)))
    whole = real_graph
    expected = whole.subgraph([n for n in whole if 50 <= int(n) <= 120])
    ours = nx.read_graphml(tmp_path / "g.graphml")
    same_graph(ours, nx.DiGraph(expected))
    assert result.nodes == ours.number_of_nodes() and result.total_nodes == len(_nodes(real_et))


def test_cut_around_a_node(real_et: Path, real_graph: nx.DiGraph, tmp_path: Path) -> None:
    whole = real_graph
    center = next(n for n in whole if whole.in_degree(n) and whole.out_degree(n) > 1)
    api.visualize(real_et, tmp_path / "g.graphml", api.GraphCut(around=(int(center), 2)))
    near = nx.ego_graph(whole, center, radius=2, undirected=True)
    assert near.number_of_nodes() > 3
    same_graph(nx.read_graphml(tmp_path / "g.graphml"), nx.DiGraph(near))


def test_cut_to_collectives_and_their_dependents(tricky_et: Path, tmp_path: Path) -> None:
    done = run_cli("visualize", tricky_et, tmp_path / "c.graphml", "--collectives", "--depth", "1")
    assert done.returncode == 0, done.stderr
    assert set(nx.read_graphml(tmp_path / "c.graphml")) == {"100", "101"}
    api.visualize(tricky_et, tmp_path / "c2.graphml", api.GraphCut(collectives=2))
    graph = nx.read_graphml(tmp_path / "c2.graphml")
    assert set(graph) == {"100", "101", "102"} and set(graph.edges) == {("100", "101"), ("101", "102")}


@pytest.mark.slow
def test_pdf_and_svg_need_dot(tricky_et: Path, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    env_path = f"{empty}:{os.path.dirname(shutil.which('python') or '/usr/bin/python')}"
    done = _run_with_path(env_path, "visualize", tricky_et, tmp_path / "g.pdf")
    assert_one_error(done, "needs graphviz's dot", "not installed")
    assert not (tmp_path / "g.pdf").exists()
    done = _run_with_path(env_path, "visualize", tricky_et, tmp_path / "g.dot", "--laid-out")
    assert_one_error(done, "a laid-out .dot needs graphviz's dot")
    done = run_cli("visualize", tricky_et, tmp_path / "g.graphml", "--laid-out")
    assert_one_error(done, "--laid-out is for .dot outputs", status=2)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::graphviz.DotSyntaxWarning")
def test_pdf_goes_through_dot(tricky_et: Path, tmp_path: Path) -> None:
    """A stand-in ``dot`` that records its options and echoes its input: what it writes is the output."""
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "options: $*"\ncat\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out"
    out.mkdir()
    done = _run_with_path(f"{fake.parent}:{os.environ['PATH']}", "visualize", tricky_et, out / "g.svg", "-q")
    assert done.returncode == 0, done.stderr
    assert (out / "g.svg").read_text() == "options: -Tsvg\n" + reference_dot_source(tricky_et)
    # --laid-out: the .dot chakra_visualizer writes (its source through dot -Tdot)
    done = _run_with_path(f"{fake.parent}:{os.environ['PATH']}", "visualize", tricky_et, out / "g.dot", "--laid-out")
    assert done.returncode == 0, done.stderr
    assert (out / "g.dot").read_text() == "options: -Tdot\n" + reference_dot_source(tricky_et)
    (out / "g.dot").unlink()
    fake.write_text("#!/bin/sh\necho 'Error: syntax error in line 1' >&2\nexit 3\n")
    done = _run_with_path(f"{fake.parent}:{os.environ['PATH']}", "visualize", tricky_et, out / "h.pdf")
    assert_one_error(done, "dot -Tpdf failed (status 3)", "syntax error")
    assert listing(out) == ["g.svg"]


def _run_with_path(path: str, *args: str | Path) -> Done:
    old = os.environ["PATH"]
    os.environ["PATH"] = path
    try:
        return run_cli(*map(str, args))
    finally:
        os.environ["PATH"] = old


@pytest.mark.slow
def test_bad_input_and_options(tricky_et: Path, tmp_path: Path) -> None:
    assert_one_error(run_cli("visualize", tricky_et, tmp_path / "g.png"), "unknown graph format 'png'")
    done = run_cli("visualize", tricky_et, tmp_path / "g.dot", "--around", "5000")
    assert_one_error(done, "no node has id 5000 (--around)", status=2)
    (tmp_path / "cut.et").write_bytes(tricky_et.read_bytes()[:-3])
    assert_one_error(run_cli("visualize", tmp_path / "cut.et", tmp_path / "g.dot"), "truncated")
    done = run_cli("visualize", tricky_et, tmp_path / "g.dot", "--ids", "9:2")
    assert done.returncode == 2 and "FIRST is above LAST" in done.stderr
    assert not (tmp_path / "g.dot").exists()


@pytest.mark.slow
def test_output_locations(tricky_et: Path, tmp_path: Path) -> None:
    before = tricky_et.read_bytes()
    assert_one_error(run_cli("visualize", tricky_et, "/dev/full", "--ids", "1:3"), "unknown graph format")
    assert_one_error(run_cli("visualize", tricky_et, tmp_path / "missing" / "g.dot"), "missing")
    assert tricky_et.read_bytes() == before


_HANGING_DOT = """#!{python}
import os, sys, time
child = os.fork()
if child == 0:  # a program dot started, in its group
    time.sleep(120)
    os._exit(0)
with open({pids!r}, "w") as out:
    out.write(f"{{os.getpid()}} {{child}}")
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat_file:
            return stat_file.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_dot_and_its_children_end_with_the_command(signum: int, tricky_et: Path, tmp_path: Path) -> None:
    """Issue 29: after SIGTERM, visualize's ``dot`` kept running. It runs in a group of its own that
    is killed however the command ends (its own children included)."""
    pids = tmp_path / "pids"
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text(_HANGING_DOT.format(python=sys.executable, pids=str(pids)))
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    with subprocess.Popen(
        [*CLI, "visualize", str(tricky_et), str(out / "g.svg")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    ) as process:
        try:
            deadline = time.monotonic() + 60
            while not pids.exists() or not pids.read_text():
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.05)
            dot, child = map(int, pids.read_text().split())
            process.send_signal(signum)
            stderr = process.communicate(timeout=60)[1]
            deadline = time.monotonic() + 10
            while not (_gone(dot) and _gone(child)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _gone(dot) and _gone(child), "dot or its child outlived the command"
        finally:
            kill_session(process.pid)
            for pid in map(int, pids.read_text().split()) if pids.exists() and pids.read_text() else ():
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    assert process.returncode == 128 + signum and len(stderr.splitlines()) == 1, stderr
    assert "no output written" in stderr and listing(out) == []
