"""``simulate`` without the simulator: configs, job discovery, the log reader on real ASTRA-sim
logs (``tests/data/astra_sim``, provenance in its README), the timeline against the log, and the
command against fake ASTRA-sim binaries (one that replays a real log, one that crashes, one
killed, one that hangs): every failure one line, exit 1, no output file."""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError
from chakra_convert_fast.converter.simulate import configs
from chakra_convert_fast.converter.simulate.job import find_job
from chakra_convert_fast.converter.simulate.logs import LogReader, Span, read_lines
from chakra_convert_fast.converter.simulate.run import find_simulator
from chakra_convert_fast.converter.simulate.timeline import TimelineWriter

from .clirun import CLI, assert_one_error, run_cli

DATA = Path(__file__).resolve().parent / "data" / "astra_sim"
TINY_LOG = DATA / "tiny.events.log"


def _raw_events(path: Path) -> list[tuple[str, int, int, int, int]]:
    """(event, rank, tick, node, type) of each issue/callback line, read with plain splitting."""
    events = []
    for line in path.read_text().splitlines():
        for event in ("issue,", "callback,"):
            if event in line:
                fields = dict(part.split("=", 1) for part in line.split(event, 1)[1].split(", "))
                events.append(
                    (
                        event[:-1],
                        int(fields["sys->id"]),
                        int(fields["tick"]),
                        int(fields["node->id"]),
                        int(fields["node->type"]),
                    )
                )
    return events


def _finished(path: Path) -> dict[int, tuple[int, int]]:
    found = re.findall(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+)", path.read_text())
    return {int(r): (int(c), int(e)) for r, c, e in found}


# -- configs ---------------------------------------------------------------------------------------
def test_network_dimensions_sizes_and_links() -> None:
    net = configs.network("Ring,Switch", 32, "4,*", "200,50", "100")
    assert (net.topology, net.npus, net.bandwidth, net.latency) == (
        ("Ring", "Switch"),
        (4, 8),
        (200.0, 50.0),
        (100.0, 100.0),
    )
    assert net.yaml() == (
        "topology: [ Ring, Switch ]\nnpus_count: [ 4, 8 ]\nbandwidth: [ 200.0, 50.0 ]  # GB/s\n"
        "latency: [ 100.0, 100.0 ]  # ns\n"
    )
    assert configs.network("fullyconnected", 8).npus == (8,)
    assert configs.network("Ring", 8).bandwidth == (50.0,)


@pytest.mark.parametrize(
    ("topology", "ranks", "sizes", "bandwidth", "expected"),
    [
        ("Torus", 8, None, None, "unknown topology 'Torus'"),
        ("Ring,Switch", 8, None, None, "give their sizes with `npus_per_dim`"),
        ("Ring,Switch", 8, "2,2", None, "4 NPUs, but the job has 8 ranks"),
        ("Ring,Switch", 8, "3,*", None, "8 ranks are not a multiple of 3"),
        ("Ring,Switch", 8, "*,*", None, "at most one '*'"),
        ("Ring,Switch", 8, "8,*", None, "a Switch of 1 NPU(s)"),
        ("Ring", 1, None, None, "a Ring of 1 NPU(s)"),
        ("Ring,Switch", 8, "2,4", "1,2,3", "3 value(s) for 2 dimension(s)"),
        ("Ring", 8, None, "-5", "values must be positive"),
        ("Ring", 8, None, "fast", "numbers, one a dimension"),
    ],
)
def test_network_refusals(topology: str, ranks: int, sizes: str | None, bandwidth: str | None, expected: str) -> None:
    with pytest.raises(ConverterError, match=re.escape(expected)):
        configs.network(topology, ranks, sizes, bandwidth)


def test_roofline_presets_and_system_config() -> None:
    h100 = configs.accelerator("h100", None, None)
    assert h100 is not None and (h100.peak_tflops, h100.mem_bandwidth_gbps) == (989.0, 3350.0)
    assert "datasheet" in h100.source
    custom = configs.accelerator(None, 100.0, 1000.0)
    assert custom is not None and custom.name == "custom"
    mixed = configs.accelerator("A100", 200.0, None)
    assert mixed is not None and (mixed.peak_tflops, mixed.mem_bandwidth_gbps) == (200.0, 2039.0)
    assert configs.accelerator(None, None, None) is None
    for args, expected in (
        ((None, 100.0, None), "needs both"),
        (("TPU", None, None), "unknown"),
        ((None, -1.0, 5.0), "must be positive"),
    ):
        with pytest.raises(ConverterError, match=expected):
            configs.accelerator(*args)
    system = configs.system_config(2, custom)
    assert (system["roofline-enabled"], system["peak-perf"], system["local-mem-bw"]) == (1, 100.0, 1000.0)
    assert system["trace-enabled"] == 1 and system["all-reduce-implementation"] == ["ring", "ring"]
    assert configs.system_config(1, None)["roofline-enabled"] == 0


def test_the_aware_backend_refuses_a_ring_of_two() -> None:
    with pytest.raises(ConverterError, match="aborts on a Ring of 2"):
        configs.check_backend(configs.network("Ring", 2), "aware")
    configs.check_backend(configs.network("Switch", 2), "aware")
    configs.check_backend(configs.network("Ring", 2), "unaware")


# -- the job ---------------------------------------------------------------------------------------
def _copy_job(tmp_path: Path, name: str = "tiny", ranks: int = 2) -> Path:
    for rank in range(ranks):
        (tmp_path / f"job.{rank}.et").write_bytes((DATA / f"{name}.{rank}.et").read_bytes())
    return tmp_path / "job"


def test_job_ranks_and_group_files(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    (tmp_path / "job.10.et.bak").write_text("not a rank")
    job = find_job(str(prefix))
    assert (job.ranks, job.comm_groups, job.groups) == (2, None, {})
    assert job.estimate_nodes() == 6
    (tmp_path / "comm_group.json").write_text('{"3": [0, 1]}')  # convert-all's name: found too
    assert find_job(str(prefix)).groups == {"3": [0, 1]}
    Path(f"{prefix}.comm_group.json").write_text("{}")  # the job's own file wins
    assert find_job(str(prefix)).groups == {}
    (tmp_path / "mine.json").write_text('{"5": [1]}')  # a named one wins over both
    assert find_job(str(prefix), str(tmp_path / "mine.json")).groups == {"5": [1]}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"1": [0, 4]}', "group 1 names rank 4, but the job has ranks 0..1"),
        ('{"0": [0, 1]}', "group id '0': ASTRA-sim needs whole numbers > 0"),
        ('{"1": "0,1"}', "group 1: expected a non-empty list of ranks"),
        ('{"1": [0, 0]}', "group 1 lists a rank twice"),
        ("[1, 2]", "not a communicator group file"),
        ("{", "not a JSON communicator group file"),
    ],
)
def test_group_files_that_do_not_match(tmp_path: Path, content: str, expected: str) -> None:
    prefix = _copy_job(tmp_path)
    Path(f"{prefix}.comm_group.json").write_text(content)
    with pytest.raises(ConverterError, match=re.escape(expected)):
        find_job(str(prefix))


def test_missing_ranks(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    (tmp_path / "job.3.et").write_bytes((DATA / "tiny.0.et").read_bytes())
    with pytest.raises(ConverterError, match=re.escape("job.2.et: rank 2 of 0..3 is missing (1 missing)")):
        find_job(str(prefix))
    with pytest.raises(ConverterError, match=re.escape("no other.<rank>.et files")):
        find_job(str(tmp_path / "other"))
    with pytest.raises(ConverterError, match="no such directory"):
        find_job(str(tmp_path / "nowhere" / "job"))


# -- the log ---------------------------------------------------------------------------------------
def test_real_log_read_into_per_rank_numbers() -> None:
    reader = read_lines(2, TINY_LOG.read_text().splitlines())
    events = _raw_events(TINY_LOG)
    finished = _finished(TINY_LOG)
    assert reader.problems == [] and reader.dropped() == []
    for run in reader.ranks:
        assert run.finished and (run.cycles, run.astra_exposed) == finished[run.rank]
        assert run.nodes_done == 3 and run.comm_done == {"collective": 1}
        issued = next(t for e, r, t, n, _ in events if (e, r, n) == ("issue", run.rank, 2))
        done = next(t for e, r, t, n, _ in events if (e, r, n) == ("callback", run.rank, 2))
        # the all-reduce is alone on the rank between the two compute nodes: all of it is exposed
        assert run.comm_time == run.comm_busy == run.exposed_comm == done - issued > 0
    # rank 0 waits for rank 1 (twice its compute) in the all-reduce
    assert reader.ranks[0].comm_time > reader.ranks[1].comm_time


def test_both_log_formats_read_the_same() -> None:
    ours = read_lines(2, TINY_LOG.read_text().splitlines())
    default = read_lines(2, (DATA / "tiny.log.log").read_text().splitlines())
    assert [r.__dict__ for r in ours.ranks] == [r.__dict__ for r in default.ranks]


def test_log_read_in_chunks_of_any_size() -> None:
    text = TINY_LOG.read_text()
    whole = read_lines(2, text.splitlines())
    for size in (1, 7, 100):
        reader = LogReader(2)
        for start in range(0, len(text), size):
            reader.feed(text[start : start + size])
        reader.close()
        assert [r.__dict__ for r in reader.ranks] == [r.__dict__ for r in whole.ranks]


def test_real_log_of_a_dropped_node() -> None:
    reader = read_lines(2, (DATA / "dropped.events.log").read_text().splitlines())
    assert [r.finished for r in reader.ranks] == [True, False]
    (dropped,) = reader.dropped()
    assert (dropped.rank, dropped.node_id, dropped.name, dropped.node_type) == (1, 3, "Optimizer.step", 4)
    assert reader.problems == ["warning! a callable is removed before call Attribute num_ops not found in node 3"]


def test_comm_overlapping_compute_is_not_exposed() -> None:
    lines = [
        f"issue,sys->id=0, tick={t}, node->id={n}, node->name=x, node->type={k}"
        if e == "i"
        else f"callback,sys->id=0, tick={t}, node->id={n}, node->name=x, node->type={k}"
        for e, t, n, k in (
            ("i", 0, 1, 4),
            ("i", 10, 2, 7),
            ("c", 30, 1, 4),
            ("c", 50, 2, 7),
            ("i", 60, 3, 5),
            ("c", 70, 3, 5),
        )
    ]
    run = read_lines(1, [*lines, "sys[0] finished, 70 cycles, exposed communication 70 cycles."]).ranks[0]
    assert (run.comm_time, run.comm_busy, run.exposed_comm) == (50, 50, 30)
    assert run.comm_done == {"collective": 1, "send": 1}


# -- the timeline ----------------------------------------------------------------------------------
def test_timeline_events_are_the_logs_nodes() -> None:
    out = io.StringIO()
    writer = TimelineWriter(out, 2, "tiny")
    read_lines(2, TINY_LOG.read_text().splitlines(), writer.span)
    writer.close()
    trace = json.loads(out.getvalue())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    issued = {(r, n): t for e, r, t, n, _ in _raw_events(TINY_LOG) if e == "issue"}
    done = {(r, n): (t, k) for e, r, t, n, k in _raw_events(TINY_LOG) if e == "callback"}
    assert len(spans) == len(done) == writer.events == 6
    for span in spans:
        key = (span["pid"], span["args"]["node"])
        assert span["ts"] == issued[key] / 1000 and span["dur"] == (done[key][0] - issued[key]) / 1000
        assert span["cat"] == ("communication" if done[key][1] == 7 else "compute")
    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and "name" in e["args"]
    }
    assert names[(0, None)] == "rank 0" and {names[(0, 1)], names[(0, 2)]} == {"compute", "communication"}


def test_timeline_tracks_never_overlap() -> None:
    out = io.StringIO()
    writer = TimelineWriter(out, 1, "overlap")
    for span in (
        Span(0, 2, "b", 4, 10, 20),
        Span(0, 1, "a", 4, 0, 30),
        Span(0, 3, "c", 4, 25, 40),
        Span(0, 4, "d", 7, 5, 45),
    ):
        writer.span(span)
    writer.close()
    events = [e for e in json.loads(out.getvalue())["traceEvents"] if e["ph"] == "X"]
    tracks: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        tracks.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert len(tracks) == 3  # two compute tracks (a overlaps b), one communication track


# -- the command against fake simulators -----------------------------------------------------------
FAKES = {
    "replay": f"""
import re, shutil, sys
config = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--logging-configuration="))
target = re.search(r'filename = "(.*)"', open(config).read()).group(1)
with open(target, "w") as out:
    out.write(open({str(DATA / "tiny.events.log")!r}).read())
""",
    "dropped": f"""
import re, sys
config = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--logging-configuration="))
target = re.search(r'filename = "(.*)"', open(config).read()).group(1)
with open(target, "w") as out:
    out.write(open({str(DATA / "dropped.events.log")!r}).read())
""",
    "crash": """
import sys
sys.stderr.write("terminate called after throwing an instance of 'std::runtime_error'\\n")
sys.stderr.write("  what():  Comm node should not be on CPU\\n")
sys.exit(134)
""",
    "killed": """
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
""",
    "abort_at_exit": f"""
import os, re, signal, sys
config = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--logging-configuration="))
target = re.search(r'filename = "(.*)"', open(config).read()).group(1)
with open(target, "w") as out:
    out.write(open({str(DATA / "tiny.events.log")!r}).read())
sys.stderr.write("free(): corrupted unsorted chunks\\n")
os.kill(os.getpid(), signal.SIGABRT)
""",
    "abort_early": """
import os, signal
os.kill(os.getpid(), signal.SIGABRT)
""",
    "hang": """
import os, sys, time
workdir = os.getcwd()  # ASTRA-sim runs in the temporary folder of its configs
with open(os.environ["FAKE_PID_FILE"], "w") as out:
    out.write(f"{os.getpid()} {workdir}")
time.sleep(60)
""",
}


_RECORD = """
import os, sys
if os.environ.get("FAKE_WORKDIR_FILE"):
    with open(os.environ["FAKE_WORKDIR_FILE"], "w") as out:
        out.write(os.getcwd())
"""


def _fake(tmp_path: Path, kind: str) -> Path:
    home = tmp_path / f"fake-{kind}"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware"):
        script = home / "bin" / name
        script.write_text(f"#!{sys.executable}\n{_RECORD}{FAKES[kind]}")
        script.chmod(0o755)
    return home


def test_command_reads_the_simulators_log(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    done = run_cli(
        "simulate",
        prefix,
        "--astra-sim-bin",
        _fake(tmp_path, "replay"),
        "--json",
        tmp_path / "r.json",
        "--timeline",
        tmp_path / "t.json",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    finished = _finished(TINY_LOG)
    assert [r["step_ns"] for r in result["per_rank"]] == [finished[0][0], finished[1][0]]
    assert result["step_ns"] == max(c for c, _ in finished.values()) and result["slowest_rank"] == 1
    assert result["network"] == {
        "topology": ["Ring"],
        "npus_per_dim": [2],
        "bandwidth_gbps": [50.0],
        "latency_ns": [500.0],
    }
    assert len([e for e in json.loads((tmp_path / "t.json").read_text())["traceEvents"] if e["ph"] == "X"]) == 6
    printed = run_cli(
        "simulate",
        prefix,
        "--astra-sim-bin",
        _fake(tmp_path, "replay") / "bin" / "AstraSim_Analytical_Congestion_Unaware",
    )
    assert printed.returncode == 0, printed.stderr
    assert f"job step: {finished[1][0] / 1e6:,.3f} ms (rank 1, the slowest)" in printed.stdout


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            "dropped",
            "rank 1 did not finish (1 of 2 ranks unfinished); the first node ASTRA-sim dropped: rank 1 node 3 "
            "'Optimizer.step'",
        ),
        ("crash", "failed with exit status 134: Comm node should not be on CPU"),
        ("killed", "was killed by SIGKILL"),
        ("abort_early", "was killed by SIGABRT"),
    ],
)
def test_simulator_failures_are_one_line_and_write_nothing(
    tmp_path: Path, kind: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = _copy_job(tmp_path)
    record = tmp_path.parent / f"{tmp_path.name}-workdir"
    monkeypatch.setenv("FAKE_WORKDIR_FILE", str(record))
    done = run_cli(
        "simulate",
        prefix,
        "--astra-sim-bin",
        _fake(tmp_path, kind),
        "--json",
        tmp_path / "r.json",
        "--timeline",
        tmp_path / "t.json",
    )
    assert_one_error(done, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-" + kind, "job.0.et", "job.1.et"]
    workdir = Path(record.read_text())
    assert workdir.name.startswith("chakra-simulate-") and not workdir.exists()  # the configs, logs: gone


@pytest.mark.slow
def test_simulator_that_hangs_is_stopped_by_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _copy_job(tmp_path)
    monkeypatch.setenv("FAKE_PID_FILE", str(tmp_path / "pid"))
    done = run_cli(
        "simulate",
        prefix,
        "--astra-sim-bin",
        _fake(tmp_path, "hang"),
        "--timeout",
        "1",
        "--timeline",
        tmp_path / "t.json",
        timeout=30,
    )
    assert_one_error(done, "ASTRA-sim did not end within 1 s")
    assert not (tmp_path / "t.json").exists()


def test_missing_simulator_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = _copy_job(tmp_path)
    nothing = tmp_path / "nothing-here"
    nothing.mkdir()
    assert_one_error(
        run_cli("simulate", prefix, "--astra-sim-bin", nothing),
        "no ASTRA-sim there",
        "astra-sim/build.sh DEST (docs/getting-astra-sim.md)",
    )
    monkeypatch.delenv("ASTRA_SIM_HOME", raising=False)
    monkeypatch.setenv("PATH", str(nothing))
    with pytest.raises(api.SimulatorError, match=r"ASTRA_SIM_HOME is not set and \S+ is not on PATH; build it"):
        find_simulator("unaware")
    monkeypatch.setenv("ASTRA_SIM_HOME", str(nothing))
    with pytest.raises(api.SimulatorError, match="holds no bin/AstraSim_Analytical_Congestion_Aware"):
        find_simulator("aware")


@pytest.mark.parametrize(
    ("args", "expected", "status"),
    [
        (("--topology", "Torus"), "unknown topology 'Torus'", 2),  # options that cannot apply: usage errors
        (("--accelerator", "TPU9"), "--accelerator TPU9: unknown", 2),
        (("--backend", "aware"), "aborts on a Ring of 2", 2),
        (("--comm-groups", "missing.json"), "missing.json: --comm-groups: no such file", 1),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, args: tuple[str, ...], expected: str, status: int) -> None:
    prefix = _copy_job(tmp_path)
    done = run_cli("simulate", prefix, "--astra-sim-bin", _fake(tmp_path, "replay"), *args, cwd=tmp_path)
    assert_one_error(done, expected, status=status)


def test_missing_rank_is_one_line(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    (tmp_path / "job.0.et").unlink()
    assert_one_error(
        run_cli("simulate", prefix, "--astra-sim-bin", _fake(tmp_path, "replay")),
        "job.0.et: rank 0 of 0..1 is missing (1 missing): the first rank file is job.1.et",
    )


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_simulator_and_leaves_nothing(tmp_path: Path, signum: int, status: int) -> None:
    prefix = _copy_job(tmp_path)
    pid_file = tmp_path / "pid"
    with subprocess.Popen(
        [
            *CLI,
            "simulate",
            str(prefix),
            "--astra-sim-bin",
            str(_fake(tmp_path, "hang")),
            "--timeline",
            str(tmp_path / "t.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FAKE_PID_FILE": str(pid_file)},
        start_new_session=True,
    ) as process:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        simulator, workdir = pid_file.read_text().split(" ", 1)
        process.send_signal(signum)
        _, err = process.communicate(timeout=30)
    assert process.returncode == status and len(err.splitlines()) == 1 and "no output written" in err, err
    assert not Path(f"/proc/{simulator}").exists() or "zombie" in Path(f"/proc/{simulator}/status").read_text()
    assert not Path(workdir).exists() and not (tmp_path / "t.json").exists()


def test_usage_errors(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    for args in (
        ("--topology", "Ring", "--topology", "Switch"),
        ("--sweep", "nodes=2"),
        ("--sweep", "ranks=2,x"),
        ("--out", "x"),
        ("--sweep", "ranks=2", "--timeline", "t.json"),
    ):
        done = run_cli("simulate", prefix, *args)
        assert done.returncode == 2 and "usage:" in done.stderr and "Traceback" not in done.stderr, (args, done)


def test_the_log_file_cannot_be_an_output(tmp_path: Path) -> None:
    prefix = _copy_job(tmp_path)
    for option in ("--json", "--timeline"):
        done = run_cli(
            "simulate",
            prefix,
            "--astra-sim-bin",
            _fake(tmp_path, "replay"),
            option,
            tmp_path / "out",
            "--log-filename",
            tmp_path / "out",
        )
        assert_one_error(done, "the log file would overwrite")
        assert not (tmp_path / "out").exists()


def test_a_crash_at_exit_after_every_rank_finished_keeps_the_result(tmp_path: Path) -> None:
    """ASTRA-sim 518bd51 can abort in its closing statistics after every rank logged ``finished``
    (collectives over sub-groups): the result is read from the log, with one warning."""
    prefix = _copy_job(tmp_path)
    done = run_cli(
        "simulate", prefix, "--astra-sim-bin", _fake(tmp_path, "abort_at_exit"), "--json", tmp_path / "r.json"
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "warning:" in line and "ranks differ in compute" not in line]
    assert len(warned) == 1 and "died of SIGABRT after every rank had finished" in warned[0]
    finished = _finished(TINY_LOG)
    assert [r["step_ns"] for r in json.loads((tmp_path / "r.json").read_text())["per_rank"]] == [
        finished[0][0],
        finished[1][0],
    ]


# -- reading results (issue 26, goal 9) -----------------------------------------------------------
def _rank(rank: int, step: int) -> api.RankResult:
    return api.RankResult(rank, step, 10, 10, 5, step, 3, 1, 0, 0, 4)


@pytest.mark.parametrize("slowest", [0, 5, 7, 20, 31])
def test_big_tables_show_each_rank_once(slowest: int) -> None:
    from chakra_convert_fast.converter.cli.simulate import result_lines

    ranks = [_rank(r, 2_000_000 if r == slowest else 1_000_000) for r in range(32)]
    result = api.SimulationResult("job", ranks, configs.network("Ring", 32), "unaware", None, None, "sim", 1.0, None, 0)
    rows = [line.split()[0] for line in result_lines(result)[2:] if line.split()[0].isdigit()]
    assert len(rows) == len(set(rows)), rows
    assert rows[:8] == [str(r) for r in range(8)] and str(slowest) in rows
    more = next(line for line in result_lines(result) if "more; step per rank" in line)
    assert f"... {32 - len(rows)} more" in more


def test_waiting_for_peers_rule() -> None:
    from chakra_convert_fast.converter.simulate.logs import RankLog
    from chakra_convert_fast.converter.simulate.waiting import waiting_for_peers

    logs = [RankLog(r) for r in range(3)]
    # (node, issue, callback): the 1st collective, rank 2 last to issue at 100; the 2nd, rank 0 last at 300
    logs[0].collectives = [[7, 10, 150], [9, 300, 400]]
    logs[1].collectives = [[7, 40, 150], [9, 200, 400]]
    logs[2].collectives = [[7, 100, 150], [9, 250, -1]]  # its 2nd never completed: counts nothing
    assert waiting_for_peers(logs) == [90, 60 + 100, 0]
    # with groups: node 9 on group 1 of ranks 0 and 1 only
    groups = {(0, 7): "0", (1, 7): "0", (2, 7): "0", (0, 9): "1", (1, 9): "1"}
    logs[2].collectives = logs[2].collectives[:1]
    assert waiting_for_peers(logs, groups) == [90, 60 + 100, 0]


def test_the_sweep_plot_states_its_range_and_network() -> None:
    from chakra_convert_fast.converter.simulate.plot import step_axis_label
    from chakra_convert_fast.converter.simulate.sweep import SweepPoint, SweepResult, plot_title

    assert step_axis_label(2879.0, 2889.0) == "simulated step (ms)\naxis 2,879 to 2,889 ms, not from 0"
    assert step_axis_label(0.0, 10.0).endswith("axis 0 to 10 ms")
    point = SweepPoint(4, "Ring", "Ring 4", 1, 1, 1, 1.0, 0.1, 0.0, "4", "50 GB/s 500 ns")
    result = SweepResult("out/gpt2", 2, "unaware", [point], "a", "b", "c")
    title = plot_title(result, api.SimulateOptions())
    assert title.endswith("scaled, ASTRA-sim congestion-unaware\nlinks 50 GB/s 500 ns")
    bandwidth = SweepResult("out/gpt2", 2, "unaware", [point], "a", "b", "c", key="bandwidth")
    assert "bandwidth as on the x axis, latency 500 ns" in plot_title(bandwidth, api.SimulateOptions())


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        ("ranks=2,x", "rank counts are whole numbers"),
        ("nodes=2", "KEY one of ranks, bandwidth, accelerator"),
        ("bandwidth=0,5", "positive numbers"),
        ("accelerator=H100,TPU9", "--accelerator TPU9: unknown"),
        ("ranks=2,2", "given twice"),
        ("ranks=", "expected KEY=V1,V2"),
    ],
)
def test_sweep_values_are_checked(tmp_path: Path, sweep: str, expected: str) -> None:
    prefix = _copy_job(tmp_path)
    done = run_cli("simulate", prefix, "--sweep", sweep)
    assert done.returncode == 2 and expected in done.stderr, done.stderr


def test_a_ray_start_that_times_out_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """ray.init raises a bare Exception when its local instance does not start in time (a loaded
    machine): ``--ray`` (sweeps, convert-all) reports it in one line, as any failure to connect."""
    import types

    from chakra_convert_fast.converter.ranks import onray

    def init(**_: object) -> None:
        raise Exception("The current node timed out during startup. This could happen because ...")

    fake = types.SimpleNamespace(init=init, shutdown=lambda: None)
    monkeypatch.setattr(onray, "ray_module", lambda: fake)
    with pytest.raises(ConverterError, match="cannot connect to the Ray cluster at local: The current node timed out"):
        list(onray.run_on_ray("local", str, [1], (), lambda task, reason: reason))
