"""A host trace cut off before the observer closed it (the job killed mid-step): ``repair`` salvages
every complete node, and ``convert --host --device`` converts what the traced step has, the ops whose
parents were lost placed under the step, saying how much of the Kineto step it recovered.

The cut-off traces are the user-style capture (tests/capture_own_tracer.py) truncated the way a killed
job leaves them: after a complete node, or inside one, in the middle of the nodes array."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api

from .clirun import assert_one_error, run_cli
from .traces import REAL_TRACES_DIR, load_trace, read_et

pytestmark = [pytest.mark.slow]  # cut-off traces repaired and converted: 5-13 s a test on 2 cores

OWN = REAL_TRACES_DIR / "own_tracer_gpt2_ddp2"
HOST, DEVICE = OWN / "rank0_host.json.gz", OWN / "rank0_device.json.gz"
_NODE_START = re.compile(r'\{\s*"id": ')


def _cut(tmp_path: Path, share: float, into_node: int = 0) -> tuple[Path, int]:
    """The host trace cut at the start of the node found after ``share`` of its text (plus
    ``into_node`` characters of it); returns the file and how many nodes lie whole before the cut."""
    with gzip.open(HOST, "rt") as f:
        text = f.read()
    starts = [m.start() for m in _NODE_START.finditer(text)]
    at = next(s for s in starts if s >= len(text) * share)
    whole = starts.index(at)
    path = tmp_path / "cut_host.json"
    path.write_text(text[: at + into_node])
    return path, whole


def _step_ids(trace: dict, step: int) -> set[int]:
    nodes = trace["nodes"]
    top = next(n["id"] for n in nodes if n["name"] == f"ProfilerStep#{step}")
    children: dict[int, list[int]] = {}
    for n in nodes:
        children.setdefault(n["ctrl_deps"], []).append(n["id"])
    seen, stack = {top}, [top]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


def test_repair_keeps_every_complete_node(tmp_path: Path) -> None:
    original = load_trace(HOST)
    for into_node in (0, 300):  # cut after a complete node, then inside the next one
        cut, whole = _cut(tmp_path, 0.8, into_node)
        result = api.repair(cut, tmp_path / "fixed.json")
        fixed = json.loads((tmp_path / "fixed.json").read_text())
        assert fixed["nodes"] == original["nodes"][:whole]
        assert fixed["finish_ts"] is None and fixed["cut_off"]["nodes_kept"] == whole
        ids = {n["id"] for n in fixed["nodes"]}
        orphans = sum(1 for n in fixed["nodes"] if n["ctrl_deps"] != n["id"] and n["ctrl_deps"] not in ids)
        assert orphans > 0 and fixed["cut_off"]["orphans"] == orphans
        assert result.salvaged is not None and (result.salvaged.nodes, result.salvaged.orphans) == (whole, orphans)
        dropped = result.salvaged.bytes_dropped
        assert dropped >= into_node if into_node else dropped <= 1  # a comma
    assert_one_error(run_cli("convert", cut, tmp_path / "x.et"), "truncated JSON", "repair")
    done = run_cli("repair", cut, tmp_path / "fixed2.json")
    assert done.returncode == 0, done.stderr
    assert f"kept its {whole:,} complete nodes" in done.stderr
    assert f"{orphans:,} nodes name a parent that was never written" in done.stderr


def test_a_file_with_no_complete_node_is_still_refused(tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    source.write_text('{"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": 1, "name": "cu')
    assert_one_error(run_cli("repair", source, tmp_path / "out.json"), "holds no complete JSON object")
    assert not (tmp_path / "out.json").exists()


def test_convert_recovers_the_traced_step(tmp_path: Path) -> None:
    cut, _ = _cut(tmp_path, 0.8)
    api.repair(cut, tmp_path / "fixed.json")
    result = api.convert_pair(
        tmp_path / "fixed.json", DEVICE, tmp_path / "out.0.et", api.ConvertOptions(astra_sim=True)
    )
    link = result.link
    assert link.cut_off is not None and link.steps.kept == (1,)
    # the ops of ProfilerStep#1 the cut file still holds (by the full trace's tree) are exactly those linked
    original = load_trace(HOST)
    fixed = json.loads((tmp_path / "fixed.json").read_text())
    kept_ids = {n["id"] for n in fixed["nodes"]}
    step1 = _step_ids(original, 1) & kept_ids
    ops = {n["id"] for n in fixed["nodes"] if n["id"] in step1 and not n["name"].startswith("ProfilerStep")}
    assert link.stats.linked == link.stats.host_ops == len(ops) > 500
    kineto_ops = sum(
        1
        for e in load_trace(DEVICE)["traceEvents"]
        if e.get("cat") in ("cpu_op", "user_annotation") and not e["name"].startswith("ProfilerStep")
    )
    assert link.cut_off.kineto_ops == kineto_ops
    assert link.cut_off.recovered == len(ops) < kineto_ops
    assert link.cut_off.adopted > 0
    assert "ProfilerStep#1" in link.cut_off.made and "[pytorch|profiler|execution_trace|process]" in link.cut_off.made
    # nothing of ProfilerStep#0 comes along, nothing is dropped for a missing parent
    step0 = _step_ids(original, 0)
    assert link.steps.left_out >= step0 & kept_ids
    _, nodes = read_et(tmp_path / "out.0.et")
    assert len(nodes) >= len(ops)
    assert api.check([tmp_path / "out.0.et"]).ok


def test_the_summary_says_how_much_was_recovered(tmp_path: Path) -> None:
    cut, _ = _cut(tmp_path, 0.7)
    assert run_cli("repair", cut, tmp_path / "fixed.json.gz").returncode == 0
    done = run_cli(
        "convert", "--host", tmp_path / "fixed.json.gz", "--device", DEVICE, "--astra-sim", tmp_path / "out.0.et"
    )
    assert done.returncode == 0, done.stderr
    found = re.search(
        r"cut-off host trace: recovered ([\d,]+) of the ([\d,]+) CPU ops the Kineto trace records in "
        r"ProfilerStep#1 \(([\d.]+)%\); ([\d,]+) ops whose parents were lost placed under their step",
        done.stderr,
    )
    assert found, done.stderr
    recovered, total = (int(found.group(i).replace(",", "")) for i in (1, 2))
    assert 0 < recovered < total and abs(float(found.group(3)) - 100 * recovered / total) < 0.06


def test_the_recovered_step_simulates(simulator: Path, tmp_path: Path) -> None:
    cut, _ = _cut(tmp_path, 0.8)
    api.repair(cut, tmp_path / "fixed.json")
    api.convert_pair(tmp_path / "fixed.json", DEVICE, tmp_path / "job.0.et", api.ConvertOptions(astra_sim=True))
    result = api.simulate(tmp_path / "job")  # the job's 2 ranks, from the one rank file
    assert len(result.ranks) == 2 and all(r.step_ns > 0 for r in result.ranks)
    assert result.ranks[0].nodes == len(read_et(tmp_path / "job.0.et")[1])


def test_a_trace_closed_by_hand_converts_as_cut_off(tmp_path: Path) -> None:
    """``]}`` added by hand after the last complete node (no ``finish_ts``): converted as the
    salvaged trace is, with the same ops."""
    cut, _ = _cut(tmp_path, 0.8)
    hand = tmp_path / "hand.json"
    hand.write_text(cut.read_text().rstrip().rstrip(",") + "\n]}\n")
    api.repair(cut, tmp_path / "fixed.json")
    by_hand = api.convert_pair(hand, DEVICE, tmp_path / "hand.0.et", api.ConvertOptions(astra_sim=True))
    repaired = api.convert_pair(
        tmp_path / "fixed.json", DEVICE, tmp_path / "fixed.0.et", api.ConvertOptions(astra_sim=True)
    )
    assert by_hand.link.cut_off is not None and repaired.link.cut_off is not None
    assert by_hand.link.cut_off.recovered == repaired.link.cut_off.recovered
    assert [n.name for n in read_et(tmp_path / "hand.0.et")[1]] == [n.name for n in read_et(tmp_path / "fixed.0.et")[1]]
