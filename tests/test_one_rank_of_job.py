"""One captured rank of an N-rank job (issue 37, goal 2): the trace's ``distributedInfo`` (rank,
world size, process groups) goes into the .et's GlobalMetadata record, the output is named for its
rank, and ``scale`` and ``simulate`` run the N-rank job from it, saying so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.ranks.jobsize import et_job, job_metadata, rank_output

from .clirun import run_cli
from .traces import REAL_TRACES_DIR

KINETO = REAL_TRACES_DIR / "kineto_public"
GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"


def test_kineto_output_records_the_job_and_takes_the_rank_in_its_name(tmp_path: Path) -> None:
    done = run_cli("convert", KINETO / "hta_sampled_rank1of128.json.gz", tmp_path / "job.et")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["job.1.et"]  # not job.et: ASTRA-sim reads PREFIX.<rank>.et
    assert "rank 1 of a 128-rank job" in done.stderr and "simulate " + str(tmp_path / "job") in done.stderr
    assert et_job(str(tmp_path / "job.1.et")) == {"world_size": 128, "rank": 1}


@pytest.mark.slow
def test_kineto_groups_go_into_the_metadata(tmp_path: Path) -> None:
    api.convert_kineto(KINETO / "hta_a100_nccl_rank0of2.json.gz", tmp_path / "a.0.et")
    job = et_job(str(tmp_path / "a.0.et"))
    assert job["world_size"] == 2 and job["rank"] == 0
    assert json.loads(job["process_groups"]) == {"0": [0, 1]}


def test_a_name_with_a_rank_or_a_trace_of_no_job_keeps_its_name(tmp_path: Path) -> None:
    assert rank_output("out/x.3.et", 1, 128) == "out/x.3.et"
    assert rank_output("out/x.et", 1, 128) == "out/x.1.et"
    assert rank_output("out/x", 1, 128) == "out/x.1.et"
    assert rank_output("out/x.et", 0, 1) == "out/x.et"  # a one-rank job
    assert rank_output("out/x.et", None, 8) == "out/x.et"
    done = run_cli("convert", KINETO / "hta_mi250_rocm6.json.gz", tmp_path / "mi.et")  # no distributedInfo
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "mi.et").is_file()


def test_insane_distributed_info_is_not_recorded() -> None:
    assert job_metadata({"world_size": 2, "pg_config": [{"pg_name": "0", "ranks": [0, 9]}]}, 5) == {"world_size": 2}
    assert job_metadata({"world_size": 10**12}, 0) == {"rank": 0}
    assert job_metadata({"world_size": "8", "pg_config": "x"}, None) == {}


@pytest.mark.slow
def test_host_path_records_the_job_with_astra_sim_only(tmp_path: Path) -> None:
    pair = ("--host", GPT2 / "rank1_host.json.gz", "--device", GPT2 / "rank1_device.json.gz")
    done = run_cli("convert", *pair, tmp_path / "g.et", "--astra-sim")
    assert done.returncode == 0, done.stderr
    assert et_job(str(tmp_path / "g.1.et")) == {"world_size": 2, "rank": 1, "process_groups": '{"0":[0,1]}'}
    done = run_cli("convert", *pair, tmp_path / "plain.et")  # the reference's bytes: name and metadata as given
    assert done.returncode == 0, done.stderr
    assert et_job(str(tmp_path / "plain.et")) == {}


def test_host_trace_alone_records_its_job_with_astra_sim(tmp_path: Path) -> None:
    # the job from the host trace's ## process_group:init ## node; its own rank from --rank
    host = GPT2 / "rank1_host.json.gz"
    done = run_cli("convert", host, tmp_path / "h.et", "--astra-sim", "--rank", "1")
    assert done.returncode == 0, done.stderr
    assert et_job(str(tmp_path / "h.1.et")) == {"world_size": 2, "rank": 1, "process_groups": '{"0":[0,1]}'}
    api.convert(host, tmp_path / "plain.et")  # the reference's bytes: nothing added
    assert et_job(str(tmp_path / "plain.et")) == {}


def test_scale_runs_the_recorded_job_from_one_rank(tmp_path: Path) -> None:
    api.convert_kineto(KINETO / "hta_sampled_rank1of128.json.gz", tmp_path / "one.1.et")
    done = run_cli("scale", tmp_path / "one", tmp_path / "all")
    assert done.returncode == 0, done.stderr
    assert "one.1.et is one captured rank of a 128-rank job" in done.stderr
    outputs = sorted(tmp_path.glob("all.*.et"), key=lambda p: int(p.name.split(".")[1]))
    assert len(outputs) == 128
    for r in (0, 1, 127):
        assert et_job(str(outputs[r])) == {"world_size": 128, "rank": r}  # each rank its own number
    assert len(read_et(str(outputs[5]))) == len(read_et(str(tmp_path / "one.1.et")))


def test_a_lone_rank_file_of_no_recorded_job_is_still_refused(tmp_path: Path) -> None:
    api.convert_kineto(KINETO / "hta_mi250_rocm6.json.gz", tmp_path / "one.3.et", rank=3)  # no world size
    done = run_cli("scale", tmp_path / "one", tmp_path / "all", "--ranks", "4")
    assert done.returncode == 1 and "rank 0 of 0..3 is missing" in done.stderr


def test_simulate_one_rank_of_two_runs_two(simulator: Path, tmp_path: Path) -> None:
    # the two commands of a new user: convert, then simulate the prefix the summary names
    done = run_cli("convert", KINETO / "hta_a100_nccl_rank0of2.json.gz", tmp_path / "a100.et")
    assert done.returncode == 0, done.stderr
    done = run_cli("simulate", tmp_path / "a100", "--replay")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("1 rank file(s) of a job of 2 ranks (world_size in a100.0.et): simulated at its size") == 1
    rows = [line.split() for line in done.stdout.splitlines()]
    assert sum(1 for row in rows if row[:1] in (["0"], ["1"]) and row[-1].endswith("%")) == 2
