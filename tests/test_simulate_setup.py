"""The user's own ASTRA-sim configs (issue 26, goal 6) without the simulator: what their files
must hold, and what ``simulate`` still sets over their system config (stated, never silent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.simulate import configs
from chakra_convert_fast.converter.simulate.setup import IMPLEMENTATIONS, collectives, make_setup, read_network

from .clirun import run_cli
from .simjobs import write_job

SHARED = json.dumps(
    {
        "scheduling-policy": "FIFO",
        "endpoint-delay": 10,
        "active-chunks-per-dimension": 1,
        "preferred-dataset-splits": 4,
        **{k: ["ring"] for k in IMPLEMENTATIONS},
        "collective-optimization": "localBWAware",
        "local-mem-bw": 1600,
        "boost-mode": 0,
        "roofline-enabled": 0,
        "peak-perf": 900,
    }
)


def test_our_system_config_by_default() -> None:
    setup = make_setup(2, None)
    assert setup.system == configs.system_config(2, None) and setup.remote_memory == configs.REMOTE_MEMORY
    assert setup.overridden == () and setup.describe() == ""


def test_the_users_system_config_keeps_its_keys_and_states_ours(tmp_path: Path) -> None:
    path = tmp_path / "system.json"
    path.write_text(SHARED)
    setup = make_setup(1, None, system_file=str(path))
    assert setup.system["scheduling-policy"] == "FIFO"  # theirs
    assert setup.system["trace-enabled"] == 1 and setup.overridden == ("trace-enabled",)
    roofline = configs.accelerator("H100", None, None)
    setup = make_setup(1, roofline, system_file=str(path), collective="direct", active_chunks=4)
    assert setup.system["peak-perf"] == 989.0 and setup.system["local-mem-bw"] == 3350.0
    assert setup.system["active-chunks-per-dimension"] == 4
    assert set(setup.overridden) == {
        "trace-enabled",
        "roofline-enabled",
        "peak-perf",
        "local-mem-bw",
        *IMPLEMENTATIONS,
        "active-chunks-per-dimension",
    }
    assert "simulate set trace-enabled" in setup.describe() and "all-reduce direct" in setup.describe()


@pytest.mark.parametrize(
    ("text", "dims", "expected"),
    [
        ("ring", 2, ["ring", "ring"]),
        ("Direct,halvingdoubling", 2, ["direct", "halvingDoubling"]),
        ("ONERING", 1, ["oneRing"]),
        ("doubleBinaryTree", 1, ["doubleBinaryTree"]),
    ],
)
def test_collective_names_per_dimension(text: str, dims: int, expected: list[str]) -> None:
    assert collectives(text, dims) == expected


def test_double_binary_tree_is_an_all_reduce_only() -> None:
    system = make_setup(2, None, collective="doubleBinaryTree,direct").system
    assert system["all-reduce-implementation"] == ["doubleBinaryTree", "direct"]
    assert all(system[k] == ["ring", "direct"] for k in IMPLEMENTATIONS[1:])


@pytest.mark.parametrize(
    ("kwargs", "content", "expected"),
    [
        ({"collective": "tree"}, None, "unknown algorithm 'tree'"),
        ({"collective": "ring,ring,ring"}, None, "3 algorithm(s) for 2 network dimension(s)"),
        ({"active_chunks": 0}, None, "at least 1"),
        ({}, "[1]", "expected a JSON object"),
        ({}, "{", "not JSON"),
        ({}, json.dumps({**json.loads(SHARED), "all-reduce-implementation": ["ring"]}), "1 entr(ies) for a network"),
        (
            {},
            json.dumps(
                {
                    **json.loads(SHARED),
                    **{k: ["ring", "ring"] for k in IMPLEMENTATIONS},
                    "all-gather-implementation": ["tree", "ring"],
                }
            ),
            "names 'tree'",
        ),
        ({}, json.dumps({"active-chunks-per-dimension": "2"}), "must be a whole number"),
        ({}, json.dumps({"scheduling-policy": "LIFO"}), "no preferred-dataset-splits, all-reduce-implementation"),
        ({"collective": "ring"}, json.dumps({"scheduling-policy": "LIFO"}), "no preferred-dataset-splits (ASTRA"),
    ],
)
def test_system_refusals(tmp_path: Path, kwargs: dict[str, object], content: str | None, expected: str) -> None:
    path = tmp_path / "system.json"
    if content is not None:
        path.write_text(content)
        kwargs = {**kwargs, "system_file": str(path)}
    with pytest.raises(ConverterError) as caught:
        make_setup(2, None, **kwargs)  # type: ignore[arg-type]
    assert expected in str(caught.value)


def test_remote_memory_config(tmp_path: Path) -> None:
    path = tmp_path / "mem.json"
    path.write_text('{"memory-type": "NO_MEMORY_EXPANSION", "remote-mem-bw": 10}')
    assert make_setup(1, None, remote_memory_file=str(path)).remote_memory["remote-mem-bw"] == 10
    path.write_text('{"memory-type": "NO_MEMORY_EXPANSION", "extra": 1}')  # ASTRA-sim would ignore it silently
    with pytest.raises(ConverterError, match="unknown key 'extra'"):
        make_setup(1, None, remote_memory_file=str(path))
    path.write_text("{}")
    with pytest.raises(ConverterError, match='no "memory-type"'):
        make_setup(1, None, remote_memory_file=str(path))
    with pytest.raises(ConverterError, match="no such file"):
        make_setup(1, None, remote_memory_file=str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "text",
    [
        "topology: [ Ring, Switch ]\nnpus_count: [ 2, 4 ]\nbandwidth: [ 50.0, 25 ]  # GB/s\nlatency: [ 500, 500 ]\n",
        "topology:\n  - Ring\n  - Switch\nnpus_count:\n  - 2\n  - 4\nbandwidth: [ 50, 25 ]\nlatency: [500,500]\n",
    ],
)
def test_network_files_as_astra_sim_writes_them(tmp_path: Path, text: str) -> None:
    path = tmp_path / "net.yml"
    path.write_text(text)
    network = read_network(str(path), 8)
    assert network == configs.Network(("Ring", "Switch"), (2, 4), (50.0, 25.0), (500.0, 500.0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\n", "no latency"),
        ("topology: [ Torus ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n", "'Torus' is not one of"),
        ("topology: [ Ring ]\nnpus_count: [ 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n", "4 NPUs, but the job has 8"),
        ("topology: [ Ring, Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n", "1 npus_count value(s)"),
        (
            "topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ -1 ]\nlatency: [ 5 ]\n",
            "bandwidth '-1': must be a number from 0.001",
        ),
        ("topology: [ Ring\n", "must close on its line"),
    ],
)
def test_network_file_refusals(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "net.yml"
    path.write_text(text)
    with pytest.raises(ConverterError) as caught:
        read_network(str(path), 8)
    assert expected in str(caught.value)


def test_a_network_file_replaces_the_network_options(tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2)
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n")
    done = run_cli("simulate", prefix, "--network-config", tmp_path / "net.yml", "--bandwidth", "10")
    assert done.returncode == 2 and "--network-config is the whole network" in done.stderr
