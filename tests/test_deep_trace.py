"""A deep chain whose every dependency points forward in the file: the reference's RecursionError
case. We convert it with the recursion limit *lowered* (150), so no code path recurses: 20,000 deep
here (133 times the limit, 20 times Python's default), 200,000 deep in bench
(``pytest bench/test_long_sweeps.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .tracebuild import chain
from .traces import read_et

pytestmark = [pytest.mark.slow]

DEPTH = 20_000


def assert_chain_converts_without_recursion(depth: int, tmp_path: Path) -> None:
    """A reversed chain of ``depth`` nodes converts in a process whose recursion limit is 150."""
    source = tmp_path / "chain.json"
    source.write_text(json.dumps(chain(depth)))
    output = tmp_path / "chain.et"
    script = (
        "import sys; sys.setrecursionlimit(150)\n"
        "from chakra_convert_fast.converter import convert\n"
        f"r = convert({str(source)!r}, {str(output)!r})\n"
        "assert sys.getrecursionlimit() == 150\n"
        "print(r.nodes_written, r.dangling_removed)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(depth + 1), "1"]  # the process node is dangling

    _, nodes = read_et(output)
    assert [n.id for n in nodes] == list(range(2, depth + 3))
    assert list(nodes[0].data_deps) == [] and list(nodes[0].ctrl_deps) == []  # the thread root
    # in reversed order no parent precedes its child, so the reference keeps no ctrl_deps at all
    assert all(list(n.data_deps) == [n.id - 1] and not n.ctrl_deps for n in nodes[1:])


def test_reversed_chain_converts_without_recursion(tmp_path: Path) -> None:
    assert_chain_converts_without_recursion(DEPTH, tmp_path)
