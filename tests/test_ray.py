"""``convert-all --ray``: a real two-node Ray cluster on this machine (``ray start --head``, then
``ray start --address``, one CPU each: ``fixtures.raycluster``), 16 ranks, outputs byte-identical
to the local run, a failing rank reported as locally, progress rank by rank. The cluster's
processes are ours: the fixture stops them by process id when the module's tests are done."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import ray  # noqa: F401 - the ray extra is part of the test install: missing, this fails, never skips

from chakra_convert_fast.converter import api, cli
from chakra_convert_fast.fixtures.raycluster import free_port, local_cluster
from tests.linkcases import edge_case_pair

from .clirun import CLI, ERROR_PREFIX, kill_session

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RANKS = 16


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """The address of a head and a second node, one CPU each, started here and stopped after."""
    with local_cluster(nodes=2, cpus_per_node=1) as address:
        yield address


def make_job(directory: Path) -> None:
    for rank in range(RANKS):
        edge_case_pair(directory, layers=6, rank=rank, world=RANKS)


def test_ray_cluster_converts_like_local_processes(ray_cluster: str, tmp_path: Path) -> None:
    make_job(tmp_path / "job")
    host = tmp_path / "job" / "rank5_host.json.gz"
    host.write_bytes(gzip.compress(gzip.decompress(host.read_bytes())[:-300]))  # a truncated host trace
    local = api.convert_all(tmp_path / "job", tmp_path / "local", jobs=2)
    done: list[int] = []
    remote = api.convert_all(
        tmp_path / "job",
        tmp_path / "ray",
        ray_address=ray_cluster,
        on_rank_done=lambda outcome: done.append(outcome.rank),
    )
    assert sorted(done) == list(range(RANKS))  # progress: every rank reported as it finished
    assert [o.rank for o in remote.outcomes] == list(range(RANKS))
    assert [(o.ok, o.message) for o in remote.outcomes] == [(o.ok, o.message) for o in local.outcomes]
    assert not remote.outcomes[5].ok and "truncated JSON" in remote.outcomes[5].message
    for rank in range(RANKS):
        if rank != 5:
            name = f"trace.{rank}.et"
            assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    assert not (tmp_path / "ray" / "trace.5.et").exists()
    groups = "trace.comm_group.json"
    assert (tmp_path / "ray" / groups).read_bytes() == (tmp_path / "local" / groups).read_bytes()


def test_ray_from_the_command_line(ray_cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(tmp_path / "job")
    code = cli.main(["convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "--ray", ray_cluster])
    err = capsys.readouterr().err
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.et")) == sorted(f"trace.{r}.et" for r in range(RANKS))
    assert err.count("  ok  ") == RANKS


def test_no_cluster_there_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_job(tmp_path / "job")
    code = cli.main(["convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "--ray", f"127.0.0.1:{free_port()}"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot connect to the Ray cluster" in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("signum", "after_connect", "line", "status"),
    [
        (signal.SIGINT, 0.0, "interrupted", 130),  # ray.init under way: it used to hold the command a minute
        (signal.SIGTERM, 1.0, "terminated by SIGTERM", 143),  # the tasks under way: Ray's own handler used to end it
    ],
)
def test_a_signal_ends_a_ray_run_within_a_second(
    ray_cluster: str, tmp_path: Path, signum: int, after_connect: float, line: str, status: int
) -> None:
    """A stop signal once the driver has opened its connection to the cluster: one line, 130 or
    143, within a second, no output. ray.init runs in a thread of its own (its C++ client can block
    a minute after a signal), and the command's handlers are put back in front of Ray's C++ one."""
    make_job(tmp_path / "job")
    port = int(ray_cluster.rsplit(":", 1)[1])
    process = subprocess.Popen(
        [*CLI, "convert-all", str(tmp_path / "job"), str(tmp_path / "out"), "--ray", ray_cluster],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(c.raddr and c.raddr.port == port for c in psutil.Process(process.pid).net_connections()):
            assert process.poll() is None and time.monotonic() < deadline, "never connected"
            time.sleep(0.005)
        time.sleep(after_connect)
        assert process.poll() is None, "the run ended before the signal: make the job larger"
        sent = time.monotonic()
        os.kill(process.pid, signum)
        stderr = process.communicate(timeout=60)[1]
        took = time.monotonic() - sent
    finally:
        kill_session(process.pid)
        process.communicate()
    assert process.returncode == status, stderr
    assert stderr.splitlines() == [f"{ERROR_PREFIX}{line}; no output written"], stderr
    assert took < 5.0, took  # it ends within a second when quiet; 5 s leaves room for a loaded machine
    assert not (tmp_path / "out").exists()


def test_a_sweep_on_ray_gives_the_local_sweeps_points(ray_cluster: str, simulator: Path, tmp_path: Path) -> None:
    """Issue 26 goal 7: ``simulate --sweep ... --ray ADDRESS``, each value a task on the cluster,
    the same points as one by one here (wall times aside). Needs ASTRA-sim (the simulator fixture)."""
    from .simjobs import write_job

    prefix = write_job(tmp_path / "job", 2)
    runs = {}
    for name, ray_address in (("local", None), ("ray", ray_cluster)):
        result = api.simulate_sweep(prefix, [2, 4, 8], ["Ring", "Switch"], out_prefix=tmp_path / name, ray=ray_address)
        runs[name] = [
            (p.ranks, p.topology, p.step_ns, p.comm_busy_ns, p.waiting_ns, p.nodes_per_rank) for p in result.points
        ]
    assert runs["ray"] == runs["local"] and len(runs["ray"]) == 6
