"""A user's own tracer (tests/capture_own_tracer.py): the host trace holds more ProfilerSteps than the
Kineto trace. By default the step the Kineto trace covers is linked and converted; ``--step N`` and
``--all-steps`` choose; no step without device data joins the graph silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import TraceContentError

from .clirun import assert_one_error, run_cli
from .traces import REAL_TRACES_DIR, load_trace, read_et, write_trace

OWN = REAL_TRACES_DIR / "own_tracer_gpt2_ddp2"
HOST, DEVICE = OWN / "rank0_host.json.gz", OWN / "rank0_device.json.gz"


def _step_subtree_ids(trace: dict, step: int) -> set[int]:
    """Host ids under ProfilerStep#step (its node included), by the nodes' ctrl_deps."""
    nodes = trace["nodes"]
    top = next(n["id"] for n in nodes if n["name"] == f"ProfilerStep#{step}")
    children: dict[int, list[int]] = {}
    for n in nodes:
        if n["ctrl_deps"] != n["id"]:
            children.setdefault(n["ctrl_deps"], []).append(n["id"])
    seen, stack = {top}, [top]
    while stack:
        for child in children.get(stack.pop(), []):
            seen.add(child)
            stack.append(child)
    return seen


@pytest.mark.slow
def test_the_capture_is_what_users_make() -> None:
    """The committed capture has the shape the issue describes: two host steps, one Kineto step,
    rank 0 of a 2-rank gloo job, every Kineto extra on."""
    host, device = load_trace(HOST), load_trace(DEVICE)
    assert sorted(n["name"] for n in host["nodes"] if n["name"].startswith("ProfilerStep#")) == [
        "ProfilerStep#0",
        "ProfilerStep#1",
    ]
    assert [e["name"] for e in device["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")] == [
        "ProfilerStep#1"
    ]
    assert device["distributedInfo"]["world_size"] == 2 and device["distributedInfo"]["rank"] == 0
    assert all(device[k] for k in ("record_shapes", "profile_memory", "with_stack", "with_flops"))


@pytest.mark.slow
def test_default_links_the_step_the_kineto_trace_covers(tmp_path: Path) -> None:
    merged = tmp_path / "merged.json"
    result = api.link(HOST, DEVICE, merged)
    assert result.steps.host_steps == (0, 1) and result.steps.device_steps == (1,)
    assert result.steps.kept == (1,)
    host = load_trace(HOST)
    step0 = _step_subtree_ids(host, 0)
    assert result.steps.left_out == step0
    # every op of the traced step found its Kineto op: no "found no device op" warning is left
    assert result.stats.linked == result.stats.host_ops > 2000
    assert not any("found no device op" in w for w in result.warnings), result.warnings
    names = [n["name"] for n in load_trace(merged)["nodes"]]
    assert "ProfilerStep#1" in names and "ProfilerStep#0" not in names
    assert len(names) == len(host["nodes"]) - len(step0) == result.nodes_written


@pytest.mark.slow
def test_the_summary_names_the_step_and_what_was_left_out(tmp_path: Path) -> None:
    done = run_cli("convert", "--host", HOST, "--device", DEVICE, "--astra-sim", tmp_path / "out.0.et")
    assert done.returncode == 0, done.stderr
    assert "of ProfilerStep#1 (ProfilerStep#0 left out: " in done.stderr, done.stderr
    assert "warning" not in done.stderr, done.stderr
    _, nodes = read_et(tmp_path / "out.0.et")
    comm = [n for n in nodes if n.type == 7]  # COMM_COLL_NODE: the one step's broadcasts and all-reduce
    both = run_cli("convert", "--host", HOST, "--device", DEVICE, "--astra-sim", "--all-steps", tmp_path / "all.0.et")
    assert both.returncode == 0, both.stderr
    _, all_nodes = read_et(tmp_path / "all.0.et")
    assert len(nodes) < len(all_nodes) * 0.6
    assert 0 < len(comm) < len([n for n in all_nodes if n.type == 7])


def test_all_steps_says_which_steps_have_no_device_data(tmp_path: Path) -> None:
    done = run_cli("convert", "--host", HOST, "--device", DEVICE, "--all-steps", tmp_path / "out.et")
    assert done.returncode == 0, done.stderr
    assert (
        "ProfilerStep#0 of the host trace has no device data in the Kineto trace (it covers ProfilerStep#1)"
        in done.stderr
    )
    assert "of ProfilerStep#0, ProfilerStep#1" in done.stderr


def test_step_n_links_that_step_alone(tmp_path: Path) -> None:
    result = api.link(HOST, DEVICE, tmp_path / "m.json", steps=0)
    assert result.steps.kept == (0,) and result.stats.linked == 0
    assert any("ProfilerStep#0 has no device data" in w for w in result.warnings)
    assert not any("different runs" in w for w in result.warnings)
    one = api.link(HOST, DEVICE, None, steps=1)
    assert one.steps.kept == (1,) and one.stats.linked == one.stats.host_ops


@pytest.mark.slow
def test_a_step_the_host_trace_lacks_is_refused(tmp_path: Path) -> None:
    done = run_cli("convert", "--host", HOST, "--device", DEVICE, "--step", "5", tmp_path / "out.et")
    assert_one_error(done, "has no ProfilerStep#5 (it holds ProfilerStep#0, ProfilerStep#1)")
    assert not (tmp_path / "out.et").exists()
    usage = run_cli("convert", "--host", HOST, "--device", DEVICE, "--step", "1", "--all-steps", tmp_path / "o.et")
    assert usage.returncode == 2


@pytest.mark.slow
def test_steps_in_common_none_is_an_error_naming_the_options(tmp_path: Path) -> None:
    device = load_trace(DEVICE)
    for event in device["traceEvents"]:
        if event.get("name") == "ProfilerStep#1":
            event["name"] = "ProfilerStep#7"
    other = write_trace(device, tmp_path / "device.json")
    with pytest.raises(TraceContentError, match=r"no step in common") as raised:
        api.link(HOST, other, None)
    assert raised.value.hint == "`steps` links the steps it names anyway" and "--" not in str(raised.value)
    done = run_cli("link", "--host", HOST, "--device", other, tmp_path / "merged.json")
    assert_one_error(done, "no step in common", "(--step N or --all-steps links the steps it names anyway)")


def test_a_host_trace_whose_steps_the_kineto_trace_covers_is_linked_whole(tmp_path: Path) -> None:
    """The reference's document is unchanged where there is nothing to choose (one step each)."""
    host = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_host.json.gz"
    device = REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_device.json.gz"
    result = api.link(host, device, tmp_path / "m.json")
    assert not result.steps.chosen and result.steps.kept == result.steps.host_steps
    assert json.loads((tmp_path / "m.json").read_text())["nodes"][-1]["id"] + 1 == result.nodes_written
