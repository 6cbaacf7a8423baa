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
