"""``simulate`` with the real ASTRA-sim (``ASTRA_SIM_HOME``, as tests/test_astra_sim.py: skipped with
the reason where it is unset, a failure where it is unset under CI=true). Tiny jobs (a few ms of
simulation each) whose simulated times follow from their inputs, and a real converted trace."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import NodeType

from .clirun import assert_one_error, run_cli
from .simjobs import write_job
from .traces import REAL_TRACES_DIR

COMM = {NodeType.COMM_COLL_NODE: "collectives", NodeType.COMM_SEND_NODE: "sends", NodeType.COMM_RECV_NODE: "recvs"}


def _spans(timeline: Path) -> list[dict[str, object]]:
    return [e for e in json.loads(timeline.read_text())["traceEvents"] if e["ph"] == "X"]


def test_tiny_job_times_follow_from_the_trace(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, compute_us=50)
    result = api.simulate(prefix, timeline=tmp_path / "t.json")
    spans = _spans(tmp_path / "t.json")
    assert len(spans) == result.timeline_events == 6
    for rank in result.ranks:
        mine = {s["args"]["node"]: s for s in spans if s["pid"] == rank.rank}  # type: ignore[index]
        # compute nodes take their traced durations (us -> ns: one cycle is one ns)
        assert mine[1]["dur"] == 50 * (rank.rank + 1) and mine[3]["dur"] == 50
        assert rank.nodes == 3 and rank.collectives == 1
        assert rank.comm_ns == round(mine[2]["dur"] * 1000)  # type: ignore[operator]
        assert rank.step_ns == round((mine[3]["ts"] + mine[3]["dur"]) * 1000)  # type: ignore[operator]
    fast, slow = result.ranks
    # 1 MiB over a 50 GB/s ring takes at least 1 MiB / 50 GB/s; rank 0 also waits for rank 1 (50 us later)
    assert slow.comm_ns >= (1 << 20) / 50
    assert fast.comm_ns > slow.comm_ns + 40_000
    assert result.step_ns == slow.step_ns == 100_000 + slow.comm_ns + 50_000


def test_more_bandwidth_shortens_communication(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, comm_bytes=64 << 20)
    slow = api.simulate(prefix, api.SimulateOptions(bandwidth="10")).ranks[1].comm_ns
    fast = api.simulate(prefix, api.SimulateOptions(bandwidth="100")).ranks[1].comm_ns
    assert fast < slow / 5


@pytest.mark.parametrize(
    ("topology", "sizes", "backend"),
    [
        ("Ring,Switch", "2,4", "unaware"),
        ("FullyConnected", None, "unaware"),
        ("Switch", None, "aware"),
        ("Ring,FullyConnected", "4,*", "unaware"),
    ],
)
def test_topologies_run_every_rank(
    simulator: Path, tmp_path: Path, topology: str, sizes: str | None, backend: str
) -> None:
    prefix = write_job(tmp_path / "job", 8)
    result = api.simulate(prefix, api.SimulateOptions(topology=topology, npus_per_dim=sizes, backend=backend))
    assert len(result.ranks) == 8 and all(r.collectives == 1 and r.nodes == 3 for r in result.ranks)
    assert result.backend == backend and ",".join(result.network.topology) == topology


def test_roofline_times_compute_from_num_ops_and_tensor_size(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, roofline=True)
    durations = {}
    for peak in (100.0, 200.0):
        api.simulate(
            prefix, api.SimulateOptions(peak_tflops=peak, mem_bandwidth=1000.0), timeline=tmp_path / f"t{peak}.json"
        )
        durations[peak] = {
            (s["pid"], s["args"]["node"]): round(s["dur"] * 1000)  # type: ignore[index, operator]
            for s in _spans(tmp_path / f"t{peak}.json")
        }
        for rank in (0, 1):
            # num_ops 1e9 * (rank + 1), tensor_size 1e6: 1,000 FLOP/byte, so the peak bounds it
            assert durations[peak][(rank, 1)] == int(1e9 * (rank + 1) / (peak * 1e12) * 1e9)
            assert durations[peak][(rank, 3)] == int(1e9 / (peak * 1e12) * 1e9)
    # memory-bound when the bandwidth is low: 1e9 FLOP / (1 GB/s x 1,000 FLOP/byte) = 1 ms
    api.simulate(prefix, api.SimulateOptions(peak_tflops=100.0, mem_bandwidth=1.0), timeline=tmp_path / "m.json")
    bound = {(s["pid"], s["args"]["node"]): round(s["dur"] * 1000) for s in _spans(tmp_path / "m.json")}  # type: ignore[index, operator]
    assert bound[(0, 3)] == 1_000_000


def test_a_node_the_roofline_cannot_time_is_named(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, roofline=True, drop_rank=1)
    done = run_cli(
        "simulate", prefix, "--accelerator", "H100", "--timeline", tmp_path / "t.json", "--json", tmp_path / "r.json"
    )
    assert_one_error(done, "rank 1 node 3 'Optimizer.step'", "without num_ops", "--roofline")  # before the run
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "r.json").exists()
    done = run_cli("simulate", prefix, "--accelerator", "H100", "--no-check")  # ASTRA-sim's own words, unchecked
    assert_one_error(done, "rank 1 did not finish", "rank 1 node 3 'Optimizer.step'", "Attribute num_ops not found")


def test_a_group_the_files_name_but_the_group_file_lacks(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2, pg_name="7")  # the all-reduce on group 7; the group file is empty
    done = run_cli("simulate", prefix)  # refused before the run, the fix named
    assert_one_error(done, "group 7 is used but not in the communicator group file", "--comm-groups")
    done = run_cli("simulate", prefix, "--no-check")  # ASTRA-sim's own words, when not checked first
    assert_one_error(done, "ASTRA-sim", "communicator group 7 not found")


def test_real_gloo_trace_every_collective_and_peer(simulator: Path, tmp_path: Path) -> None:
    """The shared 4-rank gloo trace (every collective, sends and receives, sub-groups), converted
    with --astra-sim: every rank finishes, completing the communication nodes its file holds."""
    converted = run_cli("convert-all", REAL_TRACES_DIR / "gloo_ops_np4", tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    prefix = tmp_path / "et" / "trace"
    done = run_cli("simulate", prefix, "--json", tmp_path / "r.json", "--timeline", tmp_path / "t.json")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["comm_groups"] == api.find_comm_groups(prefix)  # convert-all wrote it beside the ranks
    spans = _spans(tmp_path / "t.json")
    for rank in result["per_rank"]:
        trace = read_et(Path(f"{prefix}.{rank['rank']}.et"))
        counts = {name: sum(1 for t in trace.types if t == kind) for kind, name in COMM.items()}
        assert {k: rank[k] for k in COMM.values()} == counts
        assert rank["nodes"] == len(trace.ids) == sum(1 for s in spans if s["pid"] == rank["rank"])
        assert rank["comm_ns"] > 0 and rank["step_ns"] >= rank["comm_busy_ns"] >= rank["exposed_comm_ns"]
    assert result["step_ns"] == max(r["step_ns"] for r in result["per_rank"])


def test_sweep_scales_and_simulates_each_point(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2)
    done = run_cli(
        "simulate",
        prefix,
        "--sweep",
        "ranks=2,4,8",
        "--topology",
        "Ring",
        "--topology",
        "Switch",
        "--out",
        tmp_path / "sweep",
    )
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "sweep.md").read_text().splitlines()
    assert len(table) == 2 + 6 and done.stdout.splitlines() == table
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert [(p["ranks"], p["topology"]) for p in points] == [(n, t) for n in (2, 4, 8) for t in ("Ring", "Switch")]
    assert all(p["step_ns"] > 150_000 and 0 < p["comm_share"] < 1 for p in points)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["job.0.et", "job.1.et", "job.comm_group.json", "sweep.md", "sweep.png", "sweep.json"]
    )


def test_sweep_compact_simulates_the_same_steps_with_fewer_nodes(simulator: Path, tmp_path: Path) -> None:
    """--sweep --compact scales each point compacted: every point's step and communication are
    the uncompacted sweep's (a real GPT-2 capture, 2 and 4 ranks), and the scaled files are smaller."""
    converted = run_cli("convert-all", REAL_TRACES_DIR / "cpu_gpt2_ddp2", tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    results = {}
    for name, extra in (("plain", ()), ("compact", ("--compact",))):
        work = tmp_path / f"work-{name}"
        work.mkdir()
        done = run_cli(
            "simulate",
            tmp_path / "et" / "trace",
            "--sweep",
            "ranks=2,4",
            "--out",
            tmp_path / name,
            "--work-dir",
            work,
            *extra,
        )
        assert done.returncode == 0, done.stderr
        results[name] = json.loads((tmp_path / f"{name}.json").read_text())["points"]
    assert [(p["ranks"], p["step_ns"], p["comm_busy_ns"]) for p in results["compact"]] == [
        (p["ranks"], p["step_ns"], p["comm_busy_ns"]) for p in results["plain"]
    ]
    assert all(p["step_ns"] > 0 for p in results["plain"])
    pairs = zip(results["compact"], results["plain"], strict=True)
    assert all(c["nodes_per_rank"] * 10 < p["nodes_per_rank"] for c, p in pairs)
    assert "--compact" in run_cli("simulate", "--help").stdout
    refused = run_cli("simulate", tmp_path / "et" / "trace", "--compact")
    assert refused.returncode == 2 and "are for --sweep" in refused.stderr


def test_sweep_without_matplotlib_fails_before_simulating(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2)
    blocker = tmp_path / "block"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{blocker}{os.pathsep}{env_path}" if env_path else str(blocker)
    try:
        done = run_cli("simulate", prefix, "--sweep", "ranks=2,4", "--out", tmp_path / "sweep")
    finally:
        if env_path:
            os.environ["PYTHONPATH"] = env_path
        else:
            del os.environ["PYTHONPATH"]
    assert_one_error(done, "needs matplotlib: pip install 'chakra-convert-fast[plot]'")
    assert not list(tmp_path.glob("sweep*"))
    assert sys.executable  # the same interpreter ran it (run_cli)


# -- the user's own ASTRA-sim configuration (issue 26, goal 6) -----------------------------------
def test_the_users_config_files_give_the_same_step_as_ours(simulator: Path, tmp_path: Path) -> None:
    """ASTRA-sim's own example configs, given as files, simulate what our options do."""
    prefix = write_job(tmp_path / "job", 4)
    ours = api.simulate(prefix, api.SimulateOptions(bandwidth="50", latency="500"))
    configs = simulator / "configs"
    theirs = api.simulate(
        prefix,
        api.SimulateOptions(
            system_config=str(configs / "system.json"),
            network_config=str(configs / "Ring_4npus.yml"),
            remote_memory_config=str(configs / "remote_memory.json"),
        ),
    )
    assert [r.step_ns for r in theirs.ranks] == [r.step_ns for r in ours.ranks]
    assert theirs.setup is not None and theirs.setup.overridden == ("trace-enabled",)
    done = run_cli(
        "simulate", prefix, "--network-config", configs / "Ring_4npus.yml", "--system-config", configs / "system.json"
    )
    assert done.returncode == 0, done.stderr
    assert "simulate set trace-enabled" in done.stdout and "Ring_4npus.yml" in done.stdout


def test_collective_algorithms_and_chunks_change_the_step(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 8, comm_bytes=8 << 20)
    steps = {}
    for algorithm in ("ring", "direct", "halvingDoubling", "doubleBinaryTree"):
        result = api.simulate(
            prefix, api.SimulateOptions(topology="Ring,Switch", npus_per_dim="2,4", collective=algorithm)
        )
        assert all(r.collectives == 1 for r in result.ranks)
        assert result.setup is not None and result.setup.system["all-reduce-implementation"] == [algorithm] * 2
        steps[algorithm] = result.step_ns
    assert len(set(steps.values())) == 4, steps  # each algorithm its own time
    mixed = api.simulate(
        prefix, api.SimulateOptions(topology="Ring,Switch", npus_per_dim="2,4", collective="ring,direct")
    )
    assert mixed.setup is not None and mixed.setup.system["all-gather-implementation"] == ["ring", "direct"]
    assert all(r.collectives == 1 for r in mixed.ranks)
    chunks = api.simulate(prefix, api.SimulateOptions(topology="Ring", active_chunks=4))
    assert chunks.setup is not None and chunks.setup.system["active-chunks-per-dimension"] == 4
    assert all(r.collectives == 1 for r in chunks.ranks)


@pytest.mark.parametrize(
    ("topology", "ranks"), [("Ring", 4), ("Switch", 3), ("FullyConnected", 4), ("FullyConnected", 2)]
)
def test_the_aware_backend_on_every_topology_it_takes(
    simulator: Path, tmp_path: Path, topology: str, ranks: int
) -> None:
    """Network analytical 599a047's congestion-aware backend: one dimension of any topology (more
    dimensions: "only support 1-dim topology"; a Ring of 2 aborts: refused before the run)."""
    prefix = write_job(tmp_path / "job", ranks)
    result = api.simulate(prefix, api.SimulateOptions(topology=topology, backend="aware"))
    assert len(result.ranks) == ranks and all(r.collectives == 1 and r.nodes == 3 for r in result.ranks)


# -- reading results and sweeps beyond ranks and one core (issue 26, goals 7 and 9) ---------------
def test_communication_splits_into_transfer_and_waiting(simulator: Path, tmp_path: Path) -> None:
    """Rank 0 issues the all-reduce 50 us before rank 1 (its compute is 50 us shorter): it waits
    50 us for its peer, rank 1 none; the rest of each is the transfer."""
    prefix = write_job(tmp_path / "job", 2, compute_us=50)
    fast, slow = api.simulate(prefix).ranks
    assert (fast.waiting_ns, slow.waiting_ns) == (50_000, 0)
    assert fast.transfer_ns == fast.comm_ns - 50_000 and slow.transfer_ns == slow.comm_ns
    # both move 1 MiB at 50 GB/s at least; ASTRA-sim's ring ends the ranks a few us apart
    assert min(fast.transfer_ns, slow.transfer_ns) >= (1 << 20) / 50
    assert abs(fast.transfer_ns - slow.transfer_ns) <= 0.15 * slow.transfer_ns
    done = run_cli("simulate", prefix)
    assert "transfer" in done.stdout and "waiting" in done.stdout and "last rank of its group" in done.stdout


def _points(path: Path) -> list[dict[str, object]]:
    skip = {"seconds", "scale_seconds"}  # wall times
    return [{k: v for k, v in p.items() if k not in skip} for p in json.loads(path.read_text())["points"]]


def test_a_parallel_sweep_gives_the_serial_sweeps_points(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 2)
    work = tmp_path / "work"
    work.mkdir()
    for name, extra in (("serial", ()), ("parallel", ("--jobs", "3"))):
        done = run_cli(
            "simulate",
            prefix,
            "--sweep",
            "ranks=2,4",
            "--topology",
            "Ring",
            "--topology",
            "Switch",
            "--out",
            tmp_path / name,
            "--work-dir",
            work,
            *extra,
        )
        assert done.returncode == 0, done.stderr
    assert _points(tmp_path / "parallel.json") == _points(tmp_path / "serial.json")
    assert (tmp_path / "parallel.md").read_text().count("\n") == 2 + 4
    assert not list(work.iterdir())  # each point's temporary folder removed


def test_sweeps_of_bandwidth_and_accelerator(simulator: Path, tmp_path: Path) -> None:
    prefix = write_job(tmp_path / "job", 4, comm_bytes=16 << 20)
    done = run_cli("simulate", prefix, "--sweep", "bandwidth=10,100", "--out", tmp_path / "bw", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    points = json.loads((tmp_path / "bw.json").read_text())
    assert points["key"] == "bandwidth" and [p["value"] for p in points["points"]] == ["10", "100"]
    slow, fast = points["points"]
    assert fast["step_ns"] < slow["step_ns"] and fast["links"] == "100 GB/s 500 ns"
    assert (tmp_path / "bw.md").read_text().startswith("| bandwidth (GB/s) |")
    roofline = write_job(tmp_path / "acc", 2, roofline=True)
    a100, h100 = api.simulate_sweep(
        roofline, ["A100", "H100"], ["Ring"], key="accelerator", out_prefix=tmp_path / "acc"
    ).points
    assert (a100.value, h100.value) == ("A100", "H100") and h100.step_ns < a100.step_ns
    assert (tmp_path / "acc.png").read_bytes()[:4] == b"\x89PNG"
    refused = run_cli("simulate", prefix, "--sweep", "accelerator=H100", "--out", tmp_path / "cpu")
    assert_one_error(refused, "--sweep accelerator=H100", "no accelerator (non-CPU) compute node")


def test_a_sweep_task_survives_pickling(simulator: Path, tmp_path: Path) -> None:
    """A Ray task is the pickled ``run_task`` and its ``_Task`` (the scale function included): after
    a round trip through pickle it simulates the same points (tests/test_ray.py runs it on a cluster)."""
    import pickle

    from chakra_convert_fast.converter.simulate import sweep as sweep_module

    prefix = write_job(tmp_path / "job", 2)
    task = sweep_module._Task(
        0,
        "ranks",
        "4",
        str(prefix),
        ("Ring",),
        api.SimulateOptions(),
        str(tmp_path),
        functools.partial(api._scale_point, compact=False),
        4,
    )
    here = sweep_module.run_task(task)
    function, copied = pickle.loads(pickle.dumps((sweep_module.run_task, task)))
    there = function(copied)
    assert here.error is None and there.error is None and len(here.points) == 1
    assert [(p.step_ns, p.comm_busy_ns, p.waiting_ns) for p in there.points] == [
        (p.step_ns, p.comm_busy_ns, p.waiting_ns) for p in here.points
    ]
