"""Every kind of bad input, through the command line: exit 1, one line naming the file and the
problem, and no output file (an existing one is left untouched)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import REAL_TRACES_DIR
from .linkcases import edge_case_pair
from .tracebuild import cyclic_nodes, op, trace, two_threads

GOOD = trace(two_threads())


def _json(doc: object) -> Callable[[Path], None]:
    return lambda p: p.write_text(json.dumps(doc))


def _text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text)


def _without(key: str) -> dict:
    nodes = two_threads()
    del nodes[3][key]
    return trace(nodes)


def _duplicate_id() -> dict:
    nodes = two_threads()
    nodes.append(op(10, "aten::dup", 2))
    return trace(nodes)


def _missing_parent() -> dict:
    return trace([*two_threads(), op(30, "aten::orphan", 999)])


def _missing_dependency() -> dict:
    nodes = two_threads()
    nodes[3]["inter_thread_dep"] = 777
    return trace(nodes)


CASES: dict[str, tuple[Callable[[Path], None] | None, str]] = {
    "missing file": (None, "no such file"),
    "empty file": (_text(""), "file is empty"),
    "truncated JSON": (lambda p: p.write_text(json.dumps(GOOD)[:-40]), "truncated JSON"),
    "concatenated objects": (_text(json.dumps(GOOD) + "\n" + json.dumps(GOOD)), "several concatenated JSON"),
    "binary garbage": (lambda p: p.write_bytes(bytes(range(256)) * 8), "not UTF-8"),
    "corrupt gzip": (lambda p: p.write_bytes(gzip.compress(json.dumps(GOOD).encode())[:-30]), "gzip"),
    "not an object": (_text("[1, 2, 3]"), "expected a JSON object"),
    "unsupported schema": (_json(trace(two_threads(), schema="9.9.9")), "supported: 1.0.2-chakra.0.0.4"),
    "no nodes": (_json({"schema": "1.1.1-chakra.0.0.4"}), "missing"),
    "node without ctrl_deps": (_json(_without("ctrl_deps")), "missing required field 'ctrl_deps'"),
    "node without inputs": (_json(_without("inputs")), "missing required field 'inputs'"),
    "node without attrs": (_json(_without("attrs")), "lacks the attribute 'rf_id'"),
    "duplicate node ids": (_json(_duplicate_id()), "duplicate node id 10"),
    "ctrl_deps to a missing node": (_json(_missing_parent()), "ctrl_deps points at no node"),
    "dependency on a missing node": (_json(_missing_dependency()), "depends on node 777, which is not in the trace"),
    "cycle": (_json(trace(cyclic_nodes())), "dependency cycle"),
}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chakra_convert_fast.converter", *args],
        capture_output=True, text=True, check=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input(case: str, tmp_path: Path) -> None:
    make, expected = CASES[case]
    source = tmp_path / ("input.json.gz" if "gzip" in case else "input.json")
    if make is not None:
        make(source)
    output = tmp_path / "out.et"
    done = run_cli(str(source), str(output))
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(source) in lines[0] and expected in lines[0], lines[0]
    assert "Traceback" not in done.stderr
    assert not output.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in [source] if p.exists())


def test_existing_output_is_left_untouched_on_failure(tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    source.write_text(json.dumps(GOOD)[:-10])
    output = tmp_path / "out.et"
    output.write_bytes(b"previous result")
    assert run_cli(str(source), str(output)).returncode == 1
    assert output.read_bytes() == b"previous result"


def test_cycle_error_lists_every_cycle(tmp_path: Path) -> None:
    nodes = cyclic_nodes()
    # a second, independent cycle on two more threads
    nodes += [op(4, "[pytorch|profiler|execution_trace|thread]", 1, tid=3),
              op(5, "[pytorch|profiler|execution_trace|thread]", 1, tid=4),
              op(40, "aten::a", 4, tid=3, inter_thread_dep=50), op(41, "aten::b", 4, tid=3),
              op(50, "aten::c", 5, tid=4, inter_thread_dep=41)]
    source = tmp_path / "cycles.json"
    source.write_text(json.dumps(trace(nodes)))
    done = run_cli(str(source), str(tmp_path / "out.et"))
    assert done.returncode == 1
    assert "2 dependency cycle(s)" in done.stderr
    assert "10 'aten::mm'" in done.stderr and "40 'aten::a'" in done.stderr
    assert "--break-cycles" in done.stderr


def test_output_never_replaces_the_input(tmp_path: Path) -> None:
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(GOOD))
    done = run_cli(str(source), str(source))
    assert done.returncode == 1 and "would overwrite the input" in done.stderr
    assert json.loads(source.read_text()) == GOOD


def test_usage_error_exits_2(tmp_path: Path) -> None:
    done = run_cli(str(tmp_path / "only-one-argument.json"))
    assert done.returncode == 2
    assert "usage:" in done.stderr


# -- the same bad input, whichever command reads it ------------------------------------------------
GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


def _deep_json(doc: dict) -> str:
    """json.dumps recurses: the nested value (1,000 levels) is put in by hand."""
    return json.dumps(doc).replace('"@deep@"', "[" * 1000 + "1" + "]" * 1000)


@pytest.mark.parametrize("command", ["convert", "link", "pair"])
def test_deeply_nested_json_is_one_line(command: str, tmp_path: Path) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=3, gz=False)
    doc = json.loads(host.read_text()) if command != "convert" else trace(two_threads())
    doc["nodes"][-1]["attrs"].append({"name": "deep", "type": "string", "value": "@deep@"})
    source = tmp_path / "in" / ("merged.json" if command == "convert" else host.name)
    source.write_text(_deep_json(doc))
    out = tmp_path / "out"
    out.mkdir()
    args = [str(source), str(out / "o.et")] if command == "convert" else [
        "link" if command == "link" else "convert", "--host", str(source), "--device", str(device), str(out / "o")]
    done = run_cli(*args)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(source) in lines[0] and "nested too deeply" in lines[0], lines
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("command", ["link", "convert"])
def test_rank0_host_with_rank1_device_is_refused_by_link_and_convert(command: str, tmp_path: Path) -> None:
    """The pair links into a graph with cycles: both commands refuse it, for the same reason."""
    done = run_cli(command, "--host", str(GPT2 / "rank0_host.json.gz"), "--device", str(GPT2 / "rank1_device.json.gz"),
                   str(tmp_path / "out"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "another rank or run" in done.stderr and "--allow-mismatch" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["link", "convert"])
@pytest.mark.parametrize(("change", "problem"), [
    (lambda node: node.pop("name"), "missing required field 'name'"),
    (lambda node: node.update(name=7), "name must be a string, got 7"),
    (lambda node: node.update(attrs=5), "malformed 'attrs'"),
    (lambda node: node.update(ctrl_deps=[1, 2]), "ctrl_deps must be a node id, got [1, 2]"),
    (lambda node: node.update(id=2**64), "id must be a non-negative integer"),
], ids=["no name", "name not a string", "attrs not a list", "ctrl_deps a list", "id beyond uint64"])
def test_a_malformed_host_node_is_refused_by_link_and_convert(
    command: str, change: Callable[[dict], object], problem: str, tmp_path: Path
) -> None:
    host, device = edge_case_pair(tmp_path / "in", layers=3, gz=False)
    doc = json.loads(host.read_text())
    change(doc["nodes"][5])
    host.write_text(json.dumps(doc))
    done = run_cli(command, "--host", str(host), "--device", str(device), str(tmp_path / "out"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert str(host) in done.stderr and "node #5" in done.stderr and problem in done.stderr
    assert not (tmp_path / "out").exists()
