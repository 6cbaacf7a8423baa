"""The job's size from the traces: a user traced rank 0 of a 2-rank job. The rank count the traces
record (Kineto ``distributedInfo``, the host trace's ``## process_group:init ##``) goes into the
``--astra-sim`` output; ``scale`` defaults ``--ranks`` to it; ``simulate`` of the one rank file
simulates the job at its 2 ranks and says so."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import OptionError
from chakra_convert_fast.converter.ranks.jobsize import et_world_size, host_world_size

from .clirun import assert_one_error, run_cli
from .traces import REAL_TRACES_DIR, load_trace, read_et, write_trace

OWN = REAL_TRACES_DIR / "own_tracer_gpt2_ddp2"
HOST, DEVICE = OWN / "rank0_host.json.gz", OWN / "rank0_device.json.gz"


def _metadata(path: Path) -> dict[str, Any]:
    metadata, _ = read_et(path)
    return {a.name: a for a in metadata.attr}


def test_the_traces_record_two_ranks() -> None:
    assert load_trace(DEVICE)["distributedInfo"]["world_size"] == 2
    assert host_world_size(str(HOST)) == 2


@pytest.mark.slow
def test_astra_sim_output_records_the_job_size_and_the_default_does_not(tmp_path: Path) -> None:
    api.convert_pair(HOST, DEVICE, tmp_path / "job.0.et", api.ConvertOptions(astra_sim=True))
    assert et_world_size(str(tmp_path / "job.0.et")) == 2
    assert _metadata(tmp_path / "job.0.et")["world_size"].uint64_val == 2  # the real schema reads it
    api.convert_pair(HOST, DEVICE, tmp_path / "ref.et")  # chakra_converter's bytes: nothing added
    assert "world_size" not in _metadata(tmp_path / "ref.et")
    api.convert_pair(HOST, DEVICE, tmp_path / "c.0.et", api.ConvertOptions(compact=True))
    assert et_world_size(str(tmp_path / "c.0.et")) == 2


@pytest.mark.slow
def test_scale_defaults_to_the_recorded_size(tmp_path: Path) -> None:
    api.convert_pair(HOST, DEVICE, tmp_path / "job.0.et", api.ConvertOptions(astra_sim=True))
    done = run_cli("scale", tmp_path / "job", tmp_path / "full" / "job")
    assert done.returncode == 0, done.stderr
    assert "scaled 1 captured rank(s) of" in done.stderr and " to 2: " in done.stderr
    assert sorted(p.name for p in (tmp_path / "full").glob("*.et")) == ["job.0.et", "job.1.et"]
    assert et_world_size(str(tmp_path / "full" / "job.1.et")) == 2
    api.scale(tmp_path / "job", tmp_path / "four" / "job", 4)
    assert [et_world_size(str(tmp_path / "four" / f"job.{r}.et")) for r in range(4)] == [4] * 4


@pytest.mark.slow
def test_scale_without_a_recorded_size_asks_for_ranks(tmp_path: Path) -> None:
    # a host trace alone without its process_group:init node (the one place it records the job's size)
    trace = load_trace(REAL_TRACES_DIR / "cpu_gpt2_ddp2" / "rank0_host.json.gz")
    trace["nodes"] = [n for n in trace["nodes"] if "process_group:init" not in n["name"]]
    host = write_trace(trace, tmp_path / "host.json")
    run_cli("convert", "--astra-sim", host, tmp_path / "job.0.et")
    assert (tmp_path / "job.0.et").exists() and et_world_size(str(tmp_path / "job.0.et")) is None
    done = run_cli("scale", tmp_path / "job", tmp_path / "out")
    assert_one_error(done, "records no job size", "--astra-sim", "(give --ranks)", status=2)
    with pytest.raises(OptionError, match=r"records no job size .*`astra_sim`") as raised:  # the API's words
        api.scale(tmp_path / "job", tmp_path / "out")
    assert raised.value.hint == "give `ranks`" and "--" not in str(raised.value)


def test_simulate_one_rank_file_of_a_two_rank_job(simulator: Path, tmp_path: Path) -> None:
    api.convert_pair(HOST, DEVICE, tmp_path / "job.0.et", api.ConvertOptions(astra_sim=True))
    done = run_cli("simulate", tmp_path / "job", timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.search(r"job: 2 rank\(s\) on Ring 2 ", done.stdout), done.stdout
    assert "1 rank file(s) of a job of 2 ranks (world_size in job.0.et): simulated at its size" in done.stderr
    assert "simulated at its size, each rank a copy of a captured one, as --ranks 2 does" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.0.et"]  # the scaled copy was temporary
    result = api.simulate(tmp_path / "job")
    assert len(result.ranks) == 2 and result.ranks[0].nodes == result.ranks[1].nodes
    assert result.warnings and "job of 2 ranks" in result.warnings[0]
    assert result.warnings[0].endswith("as `ranks` 2 does")  # the API's words


@pytest.mark.slow
def test_convert_all_names_the_job_after_the_capture(tmp_path: Path) -> None:
    job = tmp_path / "capture"
    job.mkdir()
    for kind in ("host", "device"):
        shutil.copy(OWN / f"rank0_{kind}.json.gz", job / f"mygpt_np2_rank0_{kind}.json.gz")
    done = run_cli("convert-all", job, tmp_path / "et", "--astra-sim")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "et").iterdir()) == ["mygpt_np2.0.et", "mygpt_np2.comm_group.json"]
    assert "job mygpt_np2: " in done.stderr
    assert "warning" not in done.stderr, done.stderr  # every op of the traced step found its Kineto op
    assert et_world_size(str(tmp_path / "et" / "mygpt_np2.0.et")) == 2
    plain = run_cli("convert-all", OWN, tmp_path / "plain", "--astra-sim")  # rank0_host.json: no name to take
    assert plain.returncode == 0 and (tmp_path / "plain" / "trace.0.et").exists(), plain.stderr


def test_no_device_op_warning_is_gone_for_a_whole_capture() -> None:
    """The observer's own ``## process_group:init ##`` record has no Kineto twin: it is no host op
    that "found no device op" (it was the "1 of N" warning of every CPU capture)."""
    gpt2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
    result = api.link(gpt2 / "rank0_host.json.gz", gpt2 / "rank0_device.json.gz", None)
    assert result.stats.linked == result.stats.host_ops and not result.warnings, result.warnings
