"""``simulate``'s own classes of the third hostile round (issue 29), against a stand-in simulator:
outputs checked against every input before anything runs, all or nothing, the timeout over the
simulator's children and over a FIFO's reader, linear log reading, numbers in stated ranges,
relative simulator paths, odd temporary directories, truncated rank files, and sweeps (every
check before the first point, ``--comm-groups`` at every point, ``--json FILE``)."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.cli.main import build_parser
from chakra_convert_fast.converter.errors import ConverterError, OutputError, TraceFormatError
from chakra_convert_fast.converter.simulate.job import find_job
from chakra_convert_fast.converter.simulate.logs import MAX_LINE, LogReader
from chakra_convert_fast.converter.simulate.outputs import Outputs

from .clirun import CLI, assert_one_error, run_cli
from .simjobs import write_job

DATA = Path(__file__).resolve().parent / "data" / "astra_sim"
_F_SETPIPE_SZ = 1031

# A stand-in for ASTRA-sim: every rank of the job it is given finishes at 1,000 + rank cycles.
# FAKE_RECORD: a JSON line per run (its working folder, its group file's content, its workload
# argument). FAKE_MODE: "child-writes" leaves a child writing into the log pipe forever;
# "child-holds" leaves one holding it open, asleep (its pid in FAKE_PID).
_FAKE = """
import glob, json, os, re, sys, time
arg = dict(a[2:].split("=", 1) for a in sys.argv[1:])
log = re.search(r'filename = "(.*)"', open(arg["logging-configuration"]).read()).group(1)
ranks = len(glob.glob(glob.escape(arg["workload-configuration"]) + ".*.et"))
groups = arg["comm-group-configuration"]
if os.environ.get("FAKE_RECORD"):
    with open(os.environ["FAKE_RECORD"], "a") as out:
        got = None if groups == "empty" else json.load(open(groups))
        out.write(json.dumps({"cwd": os.getcwd(), "groups_arg": groups, "groups": got, "ranks": ranks,
                              "workload": arg["workload-configuration"]}) + "\\n")
mode = os.environ.get("FAKE_MODE", "ok")
with open(log, "w") as out:
    for rank in range(ranks):
        out.write(f"[0] [workload] [info] sys[{rank}] finished, {1000 + rank} cycles, "
                  "exposed communication 0 cycles\\n")
    out.flush()
    if mode != "ok" and os.fork() == 0:
        with open(os.environ["FAKE_PID"], "w") as pid:
            pid.write(str(os.getpid()))
        while True:
            if mode == "child-writes":
                out.write("x" * 1000 + "\\n")
                out.flush()
            else:
                time.sleep(1)
"""


def _fake(where: Path) -> Path:
    home = where / "fake-astra-sim"
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for name in ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware"):
        script = home / "bin" / name
        script.write_text(f"#!{sys.executable}\n{_FAKE}")
        script.chmod(0o755)
    return home


def _job(where: Path, ranks: int = 2, name: str = "job") -> Path:
    for rank in range(ranks):
        (where / f"{name}.{rank}.et").write_bytes((DATA / f"tiny.{rank % 2}.et").read_bytes())
    return where / name


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" in status.read_text()


# -- outputs: checked against every input and each other, before anything runs ---------------------
@pytest.mark.parametrize(
    ("outputs", "options", "expected"),
    [
        ({"json_output": "job.0.et"}, {}, "job.0.et: `json_output`: the output would overwrite the input job.0.et"),
        ({"timeline": "job.1.et"}, {}, "job.1.et: `timeline`: the output would overwrite the input job.1.et"),
        (
            {"json_output": "job.comm_group.json"},
            {},
            "`json_output`: the output would overwrite the input job.comm_group",
        ),
        ({"timeline": "mine.json"}, {"comm_groups": "mine.json"}, "`timeline`: the output would overwrite"),
        (
            {"json_output": "sys.json"},
            {"system_config": "sys.json"},
            "`json_output`: the output would overwrite the input sys",
        ),
        ({"json_output": "BIN"}, {}, "`json_output`: the output would overwrite the input"),
        ({"timeline": "BIN"}, {}, "`timeline`: the output would overwrite the input"),
        ({"json_output": "same", "timeline": "same"}, {}, "same: `json_output`: `timeline` names the same file (same)"),
        ({"json_output": "same", "timeline": "./same"}, {}, "`timeline` names the same file"),
        ({"json_output": "missing/r.json"}, {}, "r.json: `json_output`: output directory"),
        ({"out_prefix": "job.comm_group"}, {}, "job.comm_group.json: `out_prefix`: the output would overwrite"),
        ({"out_prefix": "x", "json_output": "x.md"}, {}, "x.md: `json_output`: `out_prefix` names the same file"),
    ],
)
def test_an_output_naming_an_input_is_refused_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    outputs: dict[str, str],
    options: dict[str, str],
    expected: str,
) -> None:
    _job(tmp_path)
    (tmp_path / "job.comm_group.json").write_text("{}")
    (tmp_path / "mine.json").write_text('{"1": [0, 1]}')
    (tmp_path / "sys.json").write_text('{"scheduling-policy": "LIFO"}')
    simulator = _fake(tmp_path) / "bin" / "AstraSim_Analytical_Congestion_Unaware"
    outputs = {k: str(simulator) if v == "BIN" else v for k, v in outputs.items()}
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code = simulator.read_bytes()
    record = tmp_path.parent / f"{tmp_path.name}-record"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.chdir(tmp_path)
    chosen = api.SimulateOptions(
        astra_sim_bin=str(simulator), comm_groups=options.get("comm_groups"), system_config=options.get("system_config")
    )
    json_output = outputs.get("json_output")
    with pytest.raises(OutputError, match=re.escape(expected)):
        if "out_prefix" in outputs:
            api.simulate_sweep(
                "job",
                [50, 100],
                ["Ring"],
                chosen,
                key="bandwidth",
                out_prefix=outputs["out_prefix"],
                json_output=json_output,
            )
        else:
            api.simulate("job", chosen, json_output=json_output, timeline=outputs.get("timeline"))
    assert not record.exists()  # the simulator never ran
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert simulator.read_bytes() == code


def test_an_output_naming_an_input_is_one_line_from_the_command(tmp_path: Path) -> None:
    _job(tmp_path)
    done = run_cli("simulate", "job", "--astra-sim-bin", _fake(tmp_path), "--json", "job.0.et", cwd=tmp_path)
    assert_one_error(done, "job.0.et: --json: the output would overwrite the input job.0.et; choose another path")
    assert (tmp_path / "job.0.et").read_bytes() == (DATA / "tiny.0.et").read_bytes()


def test_json_on_a_full_device_leaves_the_timeline_as_it_was(tmp_path: Path) -> None:
    """``--timeline T --json /dev/full``: it replaced T, then exited 1."""
    _job(tmp_path)
    (tmp_path / "t.json").write_text("old")
    done = run_cli(
        "simulate",
        "job",
        "--astra-sim-bin",
        _fake(tmp_path),
        "--timeline",
        "t.json",
        "--json",
        "/dev/full",
        cwd=tmp_path,
    )
    assert_one_error(done, "/dev/full: --json: cannot write: No space left on device")
    assert (tmp_path / "t.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-astra-sim", "job.0.et", "job.1.et", "t.json"]


def test_both_outputs_are_written_together(tmp_path: Path) -> None:
    _job(tmp_path)
    done = run_cli(
        "simulate", "job", "--astra-sim-bin", _fake(tmp_path), "--timeline", "t.json", "--json", "r.json", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["timeline"] == "t.json" and result["step_ns"] == 1001
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"] is not None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_a_sweep_whose_plot_is_a_fifo_nobody_reads_is_refused_before_its_first_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OUT.png a FIFO nobody reads: the sweep simulated every point, committed OUT.md, then failed."""
    _job(tmp_path)
    os.mkfifo(tmp_path / "x.png")
    record = tmp_path.parent / f"{tmp_path.name}-record"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    options = api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path)))
    with pytest.raises(OutputError, match=r"x\.png: `out_prefix`: is a FIFO that no process is reading"):
        api.simulate_sweep(tmp_path / "job", [50, 100], ["Ring"], options, key="bandwidth", out_prefix=tmp_path / "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-astra-sim", "job.0.et", "job.1.et", "x.png"]
    assert not record.exists()


def test_a_sweep_whose_last_output_cannot_be_written_writes_none(tmp_path: Path) -> None:
    """``--json /dev/full``, written after the points: OUT.md, OUT.png and OUT.json stay unwritten."""
    pytest.importorskip("matplotlib")
    _job(tmp_path)
    options = api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path)))
    with pytest.raises(OutputError, match="/dev/full: `json_output`: cannot write: No space left on device"):
        api.simulate_sweep(
            tmp_path / "job",
            [50],
            ["Ring"],
            options,
            key="bandwidth",
            out_prefix=tmp_path / "x",
            json_output="/dev/full",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-astra-sim", "job.0.et", "job.1.et"]


# -- a device or FIFO output: never waited on past --timeout, a signal ends the wait ---------------
def _stalled_reader(fifo: Path) -> subprocess.Popen[bytes]:
    """A process that opens ``fifo`` for reading, shrinks its buffer to a page and never reads."""
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(fifo)!r}, os.O_RDONLY | os.O_NONBLOCK)\n"
        f"fcntl.fcntl(fd, {_F_SETPIPE_SZ}, 4096)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    reader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert reader.stdout is not None and reader.stdout.readline() == b"ready\n"
    return reader


def test_a_fifo_output_whose_reader_stalls_is_given_up_at_the_timeout(tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = _stalled_reader(fifo)
    try:
        outputs = Outputs.check([("--json", str(fifo))], [], timeout=0.5)
        with outputs, pytest.raises(OutputError, match=r"its reader did not take the output within `timeout` 0\.5 s"):
            outputs.put(str(fifo), b"x" * (1 << 20))
    finally:
        reader.kill()
        reader.wait()


@pytest.mark.slow
def test_sigterm_while_a_fifo_reader_stalls_ends_the_sweep(tmp_path: Path) -> None:
    """It ignored SIGTERM and --timeout, then exited 1 "Broken pipe" instead of 143."""
    pytest.importorskip("matplotlib")
    _job(tmp_path)
    fifo = tmp_path / "x.png"
    os.mkfifo(fifo)
    reader = _stalled_reader(fifo)
    try:
        with subprocess.Popen(
            [*CLI, "simulate", "job", "--astra-sim-bin", str(_fake(tmp_path)), "--sweep", "bandwidth=50", "--out", "x"],
            cwd=tmp_path,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as process:
            deadline = time.monotonic() + 60
            while _pipe_bytes(fifo, reader.pid) == 0:  # the plot is being written: the reader's buffer is full
                assert time.monotonic() < deadline and process.poll() is None, process.stderr
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            _, err = process.communicate(timeout=30)
    finally:
        reader.kill()
        reader.wait()
    assert process.returncode == 143 and err.strip().endswith("terminated by SIGTERM; no output written"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-astra-sim", "job.0.et", "job.1.et", "x.png"]


def _pipe_bytes(fifo: Path, reader: int) -> int:
    """Bytes waiting in the pipe of ``fifo`` (FIONREAD on the reader's descriptor)."""
    for fd in Path(f"/proc/{reader}/fd").iterdir():
        try:
            if os.path.samefile(fd, fifo):
                with open(fd, "rb", buffering=0) as pipe:
                    buf = bytearray(4)
                    fcntl.ioctl(pipe, 0x541B, buf)  # FIONREAD
                    return int.from_bytes(buf, sys.byteorder)
        except OSError:
            continue
    return 0


# -- the simulator's children ---------------------------------------------------------------------
def test_a_child_writing_into_the_log_is_stopped_with_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--timeout`` was not checked once the simulator itself had exited, and its child kept
    the log coming: the run never ended."""
    _job(tmp_path)
    pid = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_MODE", "child-writes")
    monkeypatch.setenv("FAKE_PID", str(pid))
    options = api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path)), timeout=20)
    assert api.simulate(tmp_path / "job", options).step_ns == 1001
    assert pid.exists() and _gone(int(pid.read_text()))


def test_a_child_the_simulator_leaves_running_ends_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job(tmp_path)
    pid = tmp_path / "child.pid"
    monkeypatch.setenv("FAKE_MODE", "child-holds")
    monkeypatch.setenv("FAKE_PID", str(pid))
    assert api.simulate(tmp_path / "job", api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path)))).step_ns == 1001
    assert pid.exists() and _gone(int(pid.read_text()))


# -- the log --------------------------------------------------------------------------------------
def test_a_log_line_without_end_is_read_in_bounded_memory() -> None:
    """A 100 MB line with no newline was re-copied on every read (230 MB; 40-64 s)."""
    reader = LogReader(2)
    piece = "x" * (1 << 16)
    tracemalloc.start()
    try:
        for _ in range(300):  # 19.7 MB of one line
            reader.feed(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE + 4 * len(piece), peak
    reader.feed("tail\n[0] [workload] [info] sys[1] finished, 7 cycles, exposed communication 0 cycles\n")
    reader.close()
    assert reader.ranks[1].finished and reader.ranks[1].cycles == 7 and not reader.ranks[0].finished


def test_log_lines_split_anywhere_read_the_same() -> None:
    text = "".join(
        f"[0] [workload] [info] sys[{r}] finished, {100 + r} cycles, exposed communication {r} cycles\n"
        for r in range(2)
    )
    for size in (1, 3, 7, 64):
        reader = LogReader(2)
        for start in range(0, len(text), size):
            reader.feed(text[start : start + size])
        reader.close()
        assert [(r.cycles, r.finished) for r in reader.ranks] == [(100, True), (101, True)]


# -- numbers --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--timeout", "nan"), "argument --timeout: must be a number from 0.001 to 1e+07 s, got 'nan'"),
        (("--timeout", "0"), "got '0'"),
        (("--timeout", "-1"), "got '-1'"),
        (("--timeout", "-0"), "got '-0'"),
        (("--timeout", "inf"), "got 'inf'"),
        (("--bandwidth", "1e-300"), "argument --bandwidth: must be a number from 0.001 to 1e+06 GB/s"),
        (("--bandwidth", "50,nan"), "got 'nan' (in '50,nan')"),
        (("--latency", "1e300"), "argument --latency: must be a number from 0.001 to 1e+09 ns, got '1e300'"),
        (("--latency", "1e18"), "got '1e18'"),
        (("--peak-tflops", "1e-300"), "argument --peak-tflops: must be a number from 0.001 to 1e+06 TFLOPS"),
        (("--mem-bandwidth", "٣"), "argument --mem-bandwidth: must be a number"),
        (("--active-chunks", "0"), "argument --active-chunks: must be at least 1, got 0"),
        (("--ranks", "2000000"), "argument --ranks: must be at most 1,048,576"),
        (("--jobs", "٣"), "argument -j/--jobs: must be a whole number from 1 to 4,096"),
    ],
)
def test_numbers_outside_their_range_are_usage_errors(
    args: tuple[str, ...], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["simulate", "job", *args])
    assert stop.value.code == 2 and expected in capsys.readouterr().err


def test_numbers_inside_their_range_are_taken() -> None:
    args = build_parser().parse_args(
        ["simulate", "job", "--timeout", "0.5", "--bandwidth", "200, 50", "--latency", "1e3", "--peak-tflops", "989"]
    )
    assert (args.timeout, args.bandwidth, args.latency, args.peak_tflops) == (0.5, "200,50", "1e3", 989.0)
    assert isinstance(args, argparse.Namespace)


def test_a_sweeps_bandwidths_are_in_range(tmp_path: Path) -> None:
    _job(tmp_path)
    done = run_cli("simulate", "job", "--sweep", "bandwidth=50,1e-300", cwd=tmp_path)
    assert done.returncode == 2 and "must be a number from 0.001 to 1e+06 GB/s, got '1e-300'" in done.stderr


# -- inputs and paths -----------------------------------------------------------------------------
def test_a_relative_simulator_path_or_home_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It always failed "No such file": the simulator runs in a temporary folder."""
    _job(tmp_path)
    _fake(tmp_path)
    monkeypatch.chdir(tmp_path)
    by_option = api.simulate("job", api.SimulateOptions(astra_sim_bin="fake-astra-sim"))
    monkeypatch.setenv("ASTRA_SIM_HOME", "fake-astra-sim")
    by_home = api.simulate("job")
    assert (
        by_option.simulator
        == by_home.simulator
        == str(tmp_path / "fake-astra-sim" / "bin" / "AstraSim_Analytical_Congestion_Unaware")
    )
    assert by_option.step_ns == by_home.step_ns == 1001


@pytest.mark.parametrize("folder", ["empty", "two words", "a=b", "new\nline"])
def test_no_temporary_folder_changes_what_the_simulator_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    """A TMPDIR holding "empty" made ASTRA-sim ignore the group file; a newline in a job's path
    reached its option parser."""
    where = tmp_path / folder
    where.mkdir()
    _job(where)
    (where / "job.comm_group.json").write_text('{"1": [0, 1]}')
    record = tmp_path / "record"
    monkeypatch.setattr(tempfile, "tempdir", str(where))  # TMPDIR, as tempfile reads it
    monkeypatch.setenv("FAKE_RECORD", str(record))
    assert api.simulate(where / "job", api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path)))).step_ns == 1001
    (run,) = _records(record)
    assert run["groups_arg"] == "groups.json" and run["groups"] == {"1": [0, 1]} and run["ranks"] == 2
    assert str(run["cwd"]).startswith(str(where))  # the temporary folder was the odd one
    assert "\n" not in str(run["workload"]) and "empty" not in str(run["workload"])


def test_a_stray_rank_file_is_refused_by_name_at_no_cost(tmp_path: Path) -> None:
    """``set(range(N))`` took 3 GB for an empty ``PREFIX.30000000.et``."""
    prefix = _job(tmp_path)
    (tmp_path / "job.30000000.et").write_bytes(b"")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(ConverterError, match=r"job\.2\.et: rank 2 of 0\.\.30000000 is missing \(29,999,998 missing\)"):
        find_job(str(prefix))
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_AS)


def test_a_truncated_rank_file_is_refused_whatever_its_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past 8 ranks only 4 are decoded; the others were looked at only by a terminal's progress bar."""
    _job(tmp_path, ranks=10)
    cut = tmp_path / "job.5.et"  # not among the 4 decoded (0, 3, 6, 9)
    cut.write_bytes(cut.read_bytes()[:-5])
    record = tmp_path / "record"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    with pytest.raises(TraceFormatError, match=r"job\.5\.et: truncated: the record at byte \d+ ends past the end"):
        api.simulate(tmp_path / "job", api.SimulateOptions(astra_sim_bin=str(_fake(tmp_path))))
    assert not record.exists()


# -- sweeps ---------------------------------------------------------------------------------------
def test_a_sweep_checks_every_rank_count_before_the_first_point(tmp_path: Path) -> None:
    """It simulated ranks=2 and 4, then refused 3 naming --ranks, which the user never gave."""
    _job(tmp_path)
    (tmp_path / "job.comm_group.json").write_text('{"1": [0]}')  # a sub-group: counts must be multiples of 2
    record = tmp_path / "record"
    done = run_cli(
        "simulate",
        "job",
        "--astra-sim-bin",
        _fake(tmp_path),
        "--sweep",
        "ranks=2,4,3",
        "--no-check",
        cwd=tmp_path,
        env={**os.environ, "FAKE_RECORD": str(record)},
    )
    assert_one_error(done, "--sweep ranks=3: ", "the rank count must be a multiple of the 2 captured ranks", status=2)
    assert "--ranks" not in done.stderr and not record.exists()


def test_a_sweep_uses_comm_groups_at_every_point_and_writes_its_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    _job(tmp_path)
    (tmp_path / "job.comm_group.json").write_text("{}")
    (tmp_path / "mine.json").write_text('{"1": [0, 1]}')
    record = tmp_path / "record"
    monkeypatch.setenv("FAKE_RECORD", str(record))
    options = api.SimulateOptions(
        astra_sim_bin=str(_fake(tmp_path)), comm_groups=str(tmp_path / "mine.json"), check=False
    )
    api.simulate_sweep(tmp_path / "job", [2, 4], ["Ring"], options, exact=True, json_output=tmp_path / "all.json")
    assert [(r["ranks"], r["groups"]) for r in _records(record)] == [(2, {"1": [0, 1]}), (4, {"1": [0, 1, 2, 3]})]
    written = json.loads((tmp_path / "all.json").read_text())
    assert written == json.loads((tmp_path / "job.sweep.json").read_text())
    assert [p["ranks"] for p in written["points"]] == [2, 4]


# -- the real simulator ---------------------------------------------------------------------------
def test_a_tmpdir_holding_empty_keeps_the_group_file(simulator: Path, tmp_path: Path) -> None:
    """ASTRA-sim ignores a group file whose path holds "empty": under such a TMPDIR a job whose
    collectives name group 1 failed ("communicator group 1 not found")."""
    odd = tmp_path / "empty dir"
    odd.mkdir()
    prefix = write_job(tmp_path / "job", 2, pg_name="1", groups={"1": [0, 1]})
    plain = run_cli("simulate", prefix, "--json", tmp_path / "plain.json")
    assert plain.returncode == 0, plain.stderr
    done = run_cli("simulate", prefix, "--json", tmp_path / "odd.json", env={**os.environ, "TMPDIR": str(odd)})
    assert done.returncode == 0, done.stderr
    steps = [json.loads((tmp_path / f"{name}.json").read_text())["per_rank"] for name in ("plain", "odd")]
    assert steps[0] == steps[1] and list(odd.iterdir()) == []
