"""``memory PREFIX --astra-sim-fields``: the ``inputs``/``outputs`` fields ASTRA-sim's
``track-local-mem`` reads (astra-sim ``workload/LocalMemUsageTracker.cc``), on the committed
DDP 2 x PP 2 capture: each tensor written by one node and read only after its writer, the rest of
every node unchanged, the tracker's rule giving ``memory``'s host estimate, and the real simulator
running its tracker to the end on every rank."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

from chakra_convert_fast.converter.memory.host import read_host
from chakra_convert_fast.converter.memory.profile import from_host

from .clirun import assert_one_error, run_cli

DATA = Path(__file__).parent / "data" / "traces" / "cpu_gpt2_dp2pp2_memory"
COMP = 4


def _nodes(path: Path) -> list[Node]:
    f = openFileRd(str(path))
    decodeMessage(f, GlobalMetadata())
    out = []
    node = Node()
    while decodeMessage(f, node):
        out.append(node)
        node = Node()
    f.close()
    return out


def _pairs(node: Node, name: str) -> list[tuple[str, int]]:
    found = [a for a in node.attr if a.name == name]
    assert len(found) == 1 and found[0].HasField("string_list"), (node.id, name)
    values = list(found[0].string_list.values)
    assert len(values) % 2 == 0
    return [(values[i], int(values[i + 1])) for i in range(0, len(values), 2)]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("astra")
    done = run_cli("convert-all", str(DATA), str(out / "et"), "--astra-sim", "-q", timeout=180)
    assert done.returncode == 0, done.stderr
    return out


def _fields(job: Path) -> Path:
    (job / "mem").mkdir(exist_ok=True)
    if not (job / "mem" / "job.0.et").exists():
        done = run_cli("memory", str(job / "et" / "gpt2_dp2pp2"), "--astra-sim-fields", str(job / "mem" / "job"))
        assert done.returncode == 0, done.stderr
        assert "wrote 4 rank(s)" in done.stderr and "left out" not in done.stderr
    return job / "mem" / "job"


@pytest.mark.slow
def test_each_tensor_written_once_and_read_after_its_writer(job: Path) -> None:
    prefix = _fields(job)
    for rank in (0, 3):  # one rank of each stage
        original = {n.id: n for n in _nodes(job / "et" / f"gpt2_dp2pp2.{rank}.et")}
        nodes = _nodes(Path(f"{prefix}.{rank}.et"))
        assert [n.id for n in nodes] == list(original)
        writer: dict[str, int] = {}
        parents: dict[int, list[int]] = {}
        for node in nodes:
            parents[node.id] = list(node.ctrl_deps) + list(node.data_deps)
            for name, nbytes in _pairs(node, "outputs"):
                assert name not in writer and nbytes > 0
                writer[name] = node.id
            # the rest of the node is the original's; compute nodes become device compute
            before = original[node.id]
            assert (before.name, before.type, list(before.data_deps)) == (node.name, node.type, list(node.data_deps))
            assert before.inputs == node.inputs and before.outputs == node.outputs
            cpu = [a.bool_val for a in node.attr if a.name == "is_cpu_op"]
            assert cpu == ([False] if node.type == COMP else [a.bool_val for a in before.attr if a.name == "is_cpu_op"])
        ancestors: dict[int, set[int]] = {}
        for node in nodes:  # ids follow start order: a node's dependencies come before it
            ancestors[node.id] = set().union(*([{d} | ancestors[d] for d in parents[node.id]] or [set()]))
        reads = 0
        for node in nodes:
            for name, _ in _pairs(node, "inputs"):
                assert name not in {n for n, _ in _pairs(node, "outputs")}
                if name in writer:
                    assert writer[name] in ancestors[node.id], (rank, node.id, name)
                    reads += 1
        assert reads > 1000 and len(writer) > 300


def test_the_tracker_s_rule_gives_memory_s_host_estimate(job: Path) -> None:
    """ASTRA-sim's rule, followed in node order (a tensor lives from its writer to its last
    reader; read before any write: live from the start; never read: to the end), peaks within 1%
    of ``memory``'s estimate from the host trace's tensors (the same tensors, lifetimes by node)."""
    prefix = _fields(job)
    for rank in (0, 2):  # one rank of each stage
        nodes = _nodes(Path(f"{prefix}.{rank}.et"))
        size: dict[str, int] = {}
        start: dict[str, int] = {}
        end: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for name, nbytes in _pairs(node, "outputs"):
                size[name], start[name] = nbytes, i
            for name, nbytes in _pairs(node, "inputs"):
                size.setdefault(name, nbytes)
                start.setdefault(name, -1)
                end[name] = i
        delta = [0] * (len(nodes) + 2)
        for name, nbytes in size.items():
            delta[start[name] + 1] += nbytes
            delta[end.get(name, len(nodes)) + 1 + (1 if name in end else 0)] -= nbytes
        live = peak = 0
        for d in delta:
            live += d
            peak = max(peak, live)
        host = from_host(rank, read_host(str(DATA / f"gpt2_dp2pp2_rank{rank}_host.json.gz")))
        assert abs(peak - host.peak_bytes) <= 0.01 * host.peak_bytes, (rank, peak, host.peak_bytes)


def test_bad_uses_are_refused(job: Path, tmp_path: Path) -> None:
    source = str(job / "et" / "gpt2_dp2pp2")
    done = run_cli("memory", str(DATA), "--astra-sim-fields", str(tmp_path / "x"))
    assert done.returncode == 2 and "not a folder" in done.stderr
    done = run_cli("memory", source, "--astra-sim-fields", str(tmp_path / "x"), "--json")
    assert done.returncode == 2 and "--json does not apply" in done.stderr
    assert_one_error(run_cli("memory", source, "--astra-sim-fields", source), "overwrite the input")
    assert_one_error(run_cli("memory", source, "--astra-sim-fields", str(tmp_path / "no" / "x")), "does not exist")
    assert not list(tmp_path.iterdir())


def test_astra_sim_tracks_memory_to_the_end(simulator: Path, job: Path) -> None:
    """The real simulator with ``"track-local-mem": 1``: every rank finishes and logs its peak,
    within 1% of ``memory``'s host estimate (its lifetimes are by simulated time, not node order)."""
    prefix = _fields(job)
    system = json.loads((simulator / "configs" / "system.json").read_text())
    system.update({"track-local-mem": 1, "local-mem-trace-filename": str(job / "localmem")})
    (job / "system.json").write_text(json.dumps(system))
    env = {
        **os.environ,
        "SYSTEM": str(job / "system.json"),
        "LOGDIR": str(job / "log"),
        "COMM_GROUPS": str(DATA / "gpt2_dp2pp2.comm_group.json"),
    }
    done = subprocess.run(
        [str(simulator / "simulate.sh"), str(prefix), "4"], capture_output=True, text=True, env=env, timeout=600
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-2000:]
    assert len(re.findall(r"sys\[\d\] finished", text)) == 4
    peaks = {int(r): float(v) for r, v in re.findall(r"sys\[(\d)\] peak memory usage: ([0-9.]+) MB", text)}
    assert sorted(peaks) == [0, 1, 2, 3]
    for rank, mib in peaks.items():
        host = from_host(rank, read_host(str(DATA / f"gpt2_dp2pp2_rank{rank}_host.json.gz")))
        assert abs(mib * (1 << 20) - host.peak_bytes) <= 0.01 * host.peak_bytes, (rank, mib)


def test_a_broadcast_view_counts_its_storage_and_an_unordered_read_is_left_out(tmp_path: Path) -> None:
    """A 16-byte storage read through ``expand`` (400 elements, no strides in a ``.et``) keeps its
    16 bytes; a read by a node its writer is not an ancestor of is left out (and counted)."""
    from chakra.schema.protobuf.et_def_pb2 import AttributeProto
    from chakra.src.third_party.utils.protolib import encodeMessage

    from chakra_convert_fast.converter.memory.astra import write_fields

    def node(nid: int, name: str, deps: list[int], ins: str, in_types: str, outs: str) -> Node:
        n = Node(id=nid, name=name, type=COMP, duration_micros=1)
        n.data_deps.extend(deps)
        n.inputs.values, n.inputs.types = ins, in_types
        n.outputs.values, n.outputs.types = outs, "['Tensor(float)']"
        n.attr.append(AttributeProto(name="is_cpu_op", bool_val=True))
        return n

    src = tmp_path / "t.0.et"
    with open(src, "wb") as f:
        encodeMessage(f, GlobalMetadata(version="0.0.4"))
        for n in (
            node(1, "aten::ones", [], "[]", "[]", "[[1, 10, 0, 4, 4, 'cpu']]"),
            node(
                2,
                "aten::expand",
                [1],
                "[[1, 10, 0, 4, 4, 'cpu'], [100, 4]]",
                "['Tensor(float)', 'GenericList']",
                "[[2, 10, 0, 400, 4, 'cpu']]",
            ),
            node(
                3, "aten::add", [2], "[[2, 10, 0, 400, 4, 'cpu']]", "['Tensor(float)']", "[[3, 11, 0, 400, 4, 'cpu']]"
            ),
            node(4, "aten::sum", [], "[[3, 11, 0, 400, 4, 'cpu']]", "['Tensor(float)']", "[[4, 12, 0, 1, 4, 'cpu']]"),
        ):
            encodeMessage(f, n)
    stats = write_fields(str(src), str(tmp_path / "m.0.et"))
    assert (stats.nodes, stats.tensors, stats.dropped) == (4, 3, 1)
    nodes = {n.id: n for n in _nodes(tmp_path / "m.0.et")}
    assert _pairs(nodes[1], "outputs") == [("10.0", 16)]
    assert _pairs(nodes[2], "inputs") == [("10.0", 16)] and _pairs(nodes[2], "outputs") == []
    assert _pairs(nodes[3], "inputs") == [("10.0", 16)] and _pairs(nodes[3], "outputs") == [("11.0", 1600)]
    assert _pairs(nodes[4], "inputs") == [] and _pairs(nodes[4], "outputs") == [("12.0", 4)]
    assert all([a.bool_val for a in n.attr if a.name == "is_cpu_op"] == [False] for n in nodes.values())
