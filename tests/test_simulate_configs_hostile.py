"""``simulate``'s classes of the fourth hostile round (issue 40): the user's config files are inputs
like the command line (read once, strictly, within the same bounds, and given to ASTRA-sim as
read), ``SimulateOptions`` is checked as the flags are, ``--replay`` refuses what it ignores, a
FIFO as a config is refused, ``--ranks`` takes what ``scale`` takes, one ``--sweep``, ``--step``
bounded. Against a stand-in simulator that records the configs it was given; one real run."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.cli.main import build_parser
from chakra_convert_fast.converter.errors import ConverterError, OptionError

from .clirun import assert_one_error, run_cli

DATA = Path(__file__).resolve().parent / "data" / "astra_sim"

# Every rank of the job it is given finishes at 1,000 + rank cycles; FAKE_RECORD gets a JSON line
# per run: the network, system and remote-memory configs as ASTRA-sim would read them.
_FAKE = """
import glob, json, os, re, sys
arg = dict(a[2:].split("=", 1) for a in sys.argv[1:])
log = re.search(r'filename = "(.*)"', open(arg["logging-configuration"]).read()).group(1)
ranks = len(glob.glob(glob.escape(arg["workload-configuration"]) + ".*.et"))
if os.environ.get("FAKE_RECORD"):
    with open(os.environ["FAKE_RECORD"], "a") as out:
        out.write(json.dumps({
            "network": open(arg["network-configuration"]).read(),
            "network_is_link": os.path.islink(arg["network-configuration"]),
            "system": json.load(open(arg["system-configuration"])),
            "remote": json.load(open(arg["remote-memory-configuration"])),
            "ranks": ranks}) + "\\n")
with open(log, "w") as out:
    for rank in range(ranks):
        out.write(f"[0] [workload] [info] sys[{rank}] finished, {1000 + rank} cycles, "
                  "exposed communication 0 cycles\\n")
"""

NETWORK = "topology: [ Ring ]\nnpus_count: [ 2 ]\nbandwidth: [ 50 ]\nlatency: [ 500 ]\n"
SYSTEM: dict[str, Any] = {
    "scheduling-policy": "LIFO",
    "endpoint-delay": 10,
    "active-chunks-per-dimension": 1,
    "preferred-dataset-splits": 4,
    "all-reduce-implementation": ["ring"],
    "all-gather-implementation": ["ring"],
    "reduce-scatter-implementation": ["ring"],
    "all-to-all-implementation": ["ring"],
    "collective-optimization": "localBWAware",
    "local-mem-bw": 1600,
    "boost-mode": 0,
    "roofline-enabled": 0,
    "peak-perf": 900,
}


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ASTRA-sim as ``ASTRA_SIM_HOME``; returns the file its runs are recorded in."""
    home = tmp_path / "fake-astra-sim"
    (home / "bin").mkdir(parents=True)
    for name in ("AstraSim_Analytical_Congestion_Unaware", "AstraSim_Analytical_Congestion_Aware"):
        script = home / "bin" / name
        script.write_text(f"#!{sys.executable}\n{_FAKE}")
        script.chmod(0o755)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("ASTRA_SIM_HOME", str(home))
    monkeypatch.setenv("FAKE_RECORD", str(record))
    return record


def _job(where: Path, ranks: int = 2) -> Path:
    for rank in range(ranks):
        (where / f"job.{rank}.et").write_bytes((DATA / f"tiny.{rank % 2}.et").read_bytes())
    return where / "job"


def _runs(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


# -- 1, 22: the network file: read once, strictly; ASTRA-sim is given what we read ---------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NETWORK + "bandwidth: [ 1 ]\n", "line 5: bandwidth is given twice"),
        (
            NETWORK.replace("[ 2 ]", "[ 02 ]"),
            "npus_count '02': not a whole number in plain decimal (yaml-cpp, ASTRA-sim's reader, takes a leading 0",
        ),
        (NETWORK.replace("[ 2 ]", "[ 0x2 ]"), "npus_count '0x2': not a whole number in plain decimal"),
        (NETWORK + "bandwith: [ 1 ]\n", "unknown key 'bandwith'"),
        (NETWORK.replace("[ 50 ]", "[ 1e-300 ]"), "bandwidth '1e-300': must be a number from 0.001 to 1e+06 GB/s"),
        (NETWORK.replace("[ 500 ]", "[ nan ]"), "latency 'nan': must be a number from 0.001"),
        (NETWORK.replace("[ 500 ]", "[ 1e300 ]"), "latency '1e300': must be a number"),
        (NETWORK.replace("[ 50 ]", "[ 50, ]"), "an empty value in bandwidth's list"),
    ],
)
def test_network_file_refusals(tmp_path: Path, fake: Path, text: str, expected: str) -> None:
    (tmp_path / "net.yml").write_text(text)
    with pytest.raises(ConverterError) as caught:
        api.simulate(_job(tmp_path), api.SimulateOptions(network_config=str(tmp_path / "net.yml")))
    assert "`network_config`" in str(caught.value) and "net.yml" in str(caught.value)
    assert expected in str(caught.value)
    assert not _runs(fake)  # ASTRA-sim never ran


def test_config_refusal_on_the_command_line(tmp_path: Path, fake: Path) -> None:
    """The contract: one line naming the flag and the file, exit 1, ASTRA-sim never started."""
    (tmp_path / "net.yml").write_text(NETWORK + "bandwidth: [ 1 ]\n")
    done = run_cli("simulate", _job(tmp_path), "--network-config", tmp_path / "net.yml")
    assert_one_error(done, "--network-config", "net.yml", "line 5: bandwidth is given twice: give it once")
    (tmp_path / "sys.json").write_text(json.dumps({**SYSTEM, "preferred-dataset-splits": -4}))
    done = run_cli("simulate", _job(tmp_path), "--system-config", tmp_path / "sys.json")
    assert_one_error(done, "--system-config", "sys.json", "preferred-dataset-splits -4: must be a whole number")
    assert not _runs(fake)


def test_network_file_is_given_as_read(tmp_path: Path, fake: Path) -> None:
    """The scalar form (``topology: Ring``, which ASTRA-sim aborts on), quotes and block lists are
    read, and ASTRA-sim gets them written back as lists: never the user's file itself."""
    (tmp_path / "net.yml").write_text(
        "topology: Ring   # one dimension\nnpus_count:\n  - '2'\nbandwidth: \"25\"\nlatency: [ 500 ]\n"
    )
    done = run_cli("simulate", _job(tmp_path), "--network-config", tmp_path / "net.yml")
    assert done.returncode == 0, done.stderr
    (run,) = _runs(fake)
    assert not run["network_is_link"]
    assert run["network"].splitlines()[:4] == [
        "topology: [ Ring ]",
        "npus_count: [ 2 ]",
        "bandwidth: [ 25.0 ]  # GB/s",
        "latency: [ 500.0 ]  # ns",
    ]


def test_network_file_with_ranks_exact_gets_the_file_as_read(tmp_path: Path, fake: Path) -> None:
    """``--ranks 4 --exact`` ran ASTRA-sim on the user's file itself (a link): now on what was read."""
    (tmp_path / "net.yml").write_text("topology: Switch\nnpus_count: [ 4 ]\nbandwidth: [ 10 ]\nlatency: [ 5 ]\n")
    done = run_cli("simulate", _job(tmp_path), "--network-config", tmp_path / "net.yml", "--ranks", "4", "--exact")
    assert done.returncode == 0, done.stderr
    (run,) = _runs(fake)
    assert run["ranks"] == 4 and not run["network_is_link"]
    assert run["network"].startswith("topology: [ Switch ]\nnpus_count: [ 4 ]\nbandwidth: [ 10.0 ]")


# -- 4, 22: the system and remote-memory configs ------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"preferred-dataset-splits": -4}, "preferred-dataset-splits -4: must be a whole number from 1 to 1,024"),
        ({"preferred-dataset-splits": 0}, "preferred-dataset-splits 0: must be a whole number from 1"),
        ({"preferred-dataset-splits": 2.5}, "preferred-dataset-splits 2.5: must be a whole number"),
        ({"endpoint-delay": -1}, "endpoint-delay -1: must be a whole number from 0"),
        ({"endpoint-delay": 10**30}, "endpoint-delay 1000000000000000000000000000000: must be"),
        ({"local-mem-bw": 1e-300}, "local-mem-bw 1e-300: must be a number from 0.001 to 1e+06 GB/s"),
        ({"peak-perf": 0}, "peak-perf 0: must be a number from 0.001 to 1e+06 TFLOPS"),
        ({"roofline-enabled": 2}, "roofline-enabled 2: must be 0 or 1"),
        ({"roofline-enabled": "0"}, 'roofline-enabled "0": must be 0 or 1'),
        ({"scheduling-policy": "RANDOM"}, 'scheduling-policy "RANDOM": must be one of LIFO, FIFO'),
        ({"peak_perf": 900}, "unknown key 'peak_perf' (ASTRA-sim would ignore it"),
        ({"all-reduce-implementation-custom": ["x.et"]}, "unknown key 'all-reduce-implementation-custom'"),
        ({"local-mem-trace-filename": "/etc/x"}, "must be a plain file name"),
    ],
)
def test_system_config_bounds(tmp_path: Path, fake: Path, change: dict[str, Any], expected: str) -> None:
    (tmp_path / "sys.json").write_text(json.dumps({**SYSTEM, **change}))
    with pytest.raises(ConverterError) as caught:
        api.simulate(_job(tmp_path), api.SimulateOptions(system_config=str(tmp_path / "sys.json")))
    assert str(caught.value).startswith(f"`system_config` {tmp_path / 'sys.json'}: ")
    assert expected in str(caught.value)
    assert not _runs(fake)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"endpoint-delay": 10, "endpoint-delay": 20}', "the key 'endpoint-delay' is given twice"),
        ('{"peak-perf": NaN}', "NaN is not a JSON number"),
        ('{"peak-perf": Infinity}', "Infinity is not a JSON number"),
        ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested 100,001 levels deep (at most 32)"),
        ("\xff", "not UTF-8 text"),
    ],
)
def test_system_config_json_refusals(tmp_path: Path, fake: Path, text: str, expected: str) -> None:
    (tmp_path / "sys.json").write_bytes(text.encode() if text != "\xff" else b"\xff")
    with pytest.raises(ConverterError) as caught:
        api.simulate(_job(tmp_path), api.SimulateOptions(system_config=str(tmp_path / "sys.json")))
    assert str(caught.value).startswith(f"`system_config` {tmp_path / 'sys.json'}: ")
    assert expected in str(caught.value)


@pytest.mark.parametrize("padding", [0, 2 << 20])
def test_system_config_is_given_as_read(tmp_path: Path, fake: Path, padding: int) -> None:
    """A switch written ``false`` (which ASTRA-sim's ``!= 0`` takes for on) is given as 0; a file
    of 2 MiB (whitespace inside its object) is read whole (it was "not JSON": 1 MiB was read)."""
    text = json.dumps({**SYSTEM, "roofline-enabled": False, "model-shared-bus": True}, indent=2)
    (tmp_path / "sys.json").write_text(text[:-1] + " " * padding + "}")
    done = run_cli("simulate", _job(tmp_path), "--system-config", tmp_path / "sys.json")
    assert done.returncode == 0, done.stderr
    (run,) = _runs(fake)
    switches = (run["system"]["roofline-enabled"], run["system"]["model-shared-bus"])
    assert switches == (0, 1) and all(type(v) is int for v in switches)  # not JSON false/true
    assert run["system"]["preferred-dataset-splits"] == 4


def test_remote_memory_bounds(tmp_path: Path, fake: Path) -> None:
    (tmp_path / "mem.json").write_text('{"memory-type": "NO_MEMORY_EXPANSION", "remote-mem-bw": -1}')
    with pytest.raises(ConverterError, match=r"`remote_memory_config` .*remote-mem-bw -1: must be a number from 0.001"):
        api.simulate(_job(tmp_path), api.SimulateOptions(remote_memory_config=str(tmp_path / "mem.json")))


# -- 11: a FIFO (or a device) as a config is refused, never waited on --------------------------------
def test_fifo_config_refused(tmp_path: Path, fake: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    done = run_cli("simulate", _job(tmp_path), "--system-config", fifo, "--timeout", "5", timeout=30)
    assert_one_error(done, "config.fifo: --system-config: is a FIFO, not a regular file")
    for name in ("system_config", "network_config", "remote_memory_config"):
        for path, kind in ((str(fifo), "FIFO"), ("/dev/zero", "character device")):
            with pytest.raises(ConverterError, match=f"`{name}`: is a {kind}, not a regular file"):
                api.simulate(_job(tmp_path), api.SimulateOptions(**{name: path}))  # type: ignore[arg-type]
    assert not _runs(fake)


# -- 5: SimulateOptions checked as the command line checks its flags ----------------------------------
@pytest.mark.parametrize(
    ("options", "error", "expected"),
    [
        ({"bandwidth": "1e-300"}, OptionError, "`bandwidth` '1e-300': '1e-300' is not a number from 0.001"),
        ({"bandwidth": "50,nan"}, OptionError, "'nan' is not a number from 0.001"),
        ({"bandwidth": math.inf}, OptionError, "`bandwidth` inf: must be a number from 0.001"),
        ({"latency": [500, -1]}, OptionError, "`latency` -1: must be a number from 0.001"),
        ({"bandwidth": b"50"}, TypeError, "options.bandwidth must be a str, a number"),
        ({"timeout": -1}, OptionError, "`timeout` -1: must be a number from 0.001 to 1e+07 s"),
        ({"timeout": math.nan}, OptionError, "`timeout` nan: must be a number"),
        ({"timeout": "5"}, TypeError, "options.timeout must be a number or None, got str"),
        ({"peak_tflops": 1e-300}, OptionError, "`peak_tflops` 1e-300: must be a number from 0.001"),
        ({"mem_bandwidth": 1e9}, OptionError, "`mem_bandwidth` 1000000000.0: must be a number"),
        ({"active_chunks": 0}, OptionError, "`active_chunks` 0: must be from 1 to 1,024"),
        ({"active_chunks": 2.0}, TypeError, "options.active_chunks must be an int or None"),
        ({"system_config": 5}, TypeError, "options.system_config must be a path"),
        ({"network_config": 5}, TypeError, "options.network_config must be a path"),
        ({"backend": "fast"}, OptionError, "`backend` 'fast': one of unaware, aware"),
        ({"check": "no"}, TypeError, "options.check must be a bool"),
        ({"topology": 5}, TypeError, "options.topology must be a str"),
    ],
)
def test_simulate_options_checked(
    tmp_path: Path, fake: Path, options: dict[str, Any], error: type[Exception], expected: str
) -> None:
    with pytest.raises(error) as caught:
        api.simulate(str(_job(tmp_path)), api.SimulateOptions(**options))
    assert expected in str(caught.value)
    assert not _runs(fake)


def test_simulate_options_numbers_as_numbers(tmp_path: Path, fake: Path) -> None:
    """``bandwidth=50.0`` raised ``AttributeError``: a number, or one a dimension, is taken."""
    result = api.simulate(str(_job(tmp_path)), api.SimulateOptions(bandwidth=25.0, latency=[100]))  # type: ignore[arg-type]
    assert result.network.bandwidth == (25.0,) and result.network.latency == (100.0,)
    (run,) = _runs(fake)
    assert "bandwidth: [ 25.0 ]" in run["network"]


# -- 6: --replay refuses what it would ignore --------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"accelerator": "H100"}, "`accelerator` is only without `replay`"),
        ({"bandwidth": "100"}, "`bandwidth` is only without `replay`"),
        ({"peak_tflops": 100.0, "mem_bandwidth": 100.0}, "`peak_tflops`, `mem_bandwidth` are only without"),
        ({"topology": "Switch"}, "`topology` is only without `replay`"),
        ({"npus_per_dim": "2"}, "`npus_per_dim` is only without `replay`"),
        ({"latency": "5"}, "`latency` is only without `replay`"),
        ({"collective": "direct"}, "`collective` is only without `replay`"),
        ({"active_chunks": 2}, "`active_chunks` is only without `replay`"),
    ],
)
def test_replay_refuses_what_it_ignores(tmp_path: Path, fake: Path, options: dict[str, Any], expected: str) -> None:
    with pytest.raises(OptionError) as caught:
        api.simulate(_job(tmp_path), api.SimulateOptions(replay=True, **options))
    assert expected in str(caught.value)
    with pytest.raises(OptionError, match="`replay` is only for one simulation"):
        api.simulate_sweep(_job(tmp_path), [2, 4], ["Ring"], api.SimulateOptions(replay=True))
    assert not _runs(fake)


def test_replay_header_with_a_roofline_system_config(tmp_path: Path, fake: Path) -> None:
    """A system config that turns the roofline on is replayed all the same: the header says so (it
    named the system config's roofline)."""
    (tmp_path / "sys.json").write_text(json.dumps({**SYSTEM, "roofline-enabled": 1}))
    done = run_cli("simulate", _job(tmp_path), "--replay", "--system-config", tmp_path / "sys.json")
    assert done.returncode == 0, done.stderr
    assert "compute: traced durations (replay-only)" in done.stdout.splitlines()[0], done.stdout
    (run,) = _runs(fake)
    assert run["system"]["replay-only"] == 1


def test_replay_refusals_on_the_command_line(tmp_path: Path, fake: Path) -> None:
    done = run_cli("simulate", _job(tmp_path), "--replay", "--accelerator", "H100")
    assert_one_error(done, "--accelerator is only without --replay (every node takes its traced duration", status=2)
    done = run_cli("simulate", _job(tmp_path), "--replay", "--sweep", "bandwidth=25,50")
    assert_one_error(done, "--replay is only for one simulation (a sweep of traced durations is flat)", status=2)
    assert not _runs(fake)


# -- 20, 21: --ranks takes what scale takes; one --sweep; --step bounded ------------------------------
def test_ranks_not_a_multiple(tmp_path: Path, fake: Path) -> None:
    """``--ranks 3`` of a 2-rank job: ``scale`` and ``--sweep ranks=3`` take it; so does ``--ranks``."""
    done = run_cli("simulate", _job(tmp_path), "--ranks", "3", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ranks"] == 3 and result["simulated_ranks"] == 3
    assert "3 is not a multiple of the 2 captured ranks" in done.stderr  # the full job ran, and why
    assert [r["ranks"] for r in _runs(fake)] == [3]


def test_repeated_sweep_refused(tmp_path: Path, fake: Path) -> None:
    done = run_cli("simulate", _job(tmp_path), "--sweep", "ranks=2,4", "--sweep", "bandwidth=25,50")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        "error: --sweep is given 2 times (ranks, bandwidth): a sweep varies one thing" in done.stderr.splitlines()[-1]
    )
    assert not _runs(fake)


@pytest.mark.parametrize("command", ["convert", "convert-all"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("٣", "argument --step: must be a whole number from 0 to 9,223,372,036,854,775,807, got '٣'"),
        ("-1", "argument --step: must be at least 0, got -1"),
        ("9" * 30, "argument --step: must be at most 9,223,372,036,854,775,807"),
    ],
)
def test_step_bounded(
    tmp_path: Path, command: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "a", "b", "--step", value])
    assert exc.value.code == 2 and expected in capsys.readouterr().err
    with pytest.raises(OptionError, match="`step` 9223372036854775808: must be from 0"):
        api.convert_kineto(tmp_path / "k.json", tmp_path / "o.et", step=1 << 63)


# -- one real ASTRA-sim run: the scalar form it aborted on runs, normalised --------------------------
def test_scalar_network_file_runs_in_astra_sim(tmp_path: Path, simulator: Path) -> None:
    (tmp_path / "net.yml").write_text("topology: Ring\nnpus_count: 2\nbandwidth: 50\nlatency: 500\n")
    result = api.simulate(
        str(_job(tmp_path)), api.SimulateOptions(network_config=str(tmp_path / "net.yml"), astra_sim_bin=str(simulator))
    )
    assert len(result.ranks) == 2 and all(r.step_ns > 0 for r in result.ranks)
