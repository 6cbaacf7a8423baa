"""``convert-all`` keeps jobs apart (issue 37, goal 3): a folder holding the traces of several jobs
is refused, naming the files of each, and nothing is written; never one job of mixed ranks."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

from chakra_convert_fast.converter.ranks.discover import discover
from chakra_convert_fast.converter.ranks.jobs import split

from .clirun import assert_one_error, run_cli
from .traces import REAL_TRACES_DIR, load_trace, write_trace

KINETO = REAL_TRACES_DIR / "kineto_public"
GPT2 = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
GLOO4 = REAL_TRACES_DIR / "gloo_ops_np4"


def _copy(folder: Path, *paths: Path, names: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n, path in enumerate(paths):
        shutil.copy(path, folder / (names[n] if names else path.name))
    return folder


def _refused(folder: Path, tmp_path: Path, *files: str) -> str:
    out = tmp_path / "out"
    done = run_cli("convert-all", folder, out, "-j", "1", "-q")
    assert_one_error(done)
    assert "jobs, not one" in done.stderr
    for name in files:
        assert name in done.stderr
    assert not out.exists()  # nothing written, not even the folder
    return done.stderr


def test_two_kineto_jobs_of_different_world_sizes_are_refused(tmp_path: Path) -> None:
    # rank 0 of a 2-rank A100 job and rank 1 of a 128-rank job: before, one "job" of ranks 0 and 1
    folder = _copy(
        tmp_path / "mixed", KINETO / "hta_a100_nccl_rank0of2.json.gz", KINETO / "hta_sampled_rank1of128.json.gz"
    )
    err = _refused(folder, tmp_path, "hta_a100_nccl_rank0of2.json.gz", "hta_sampled_rank1of128.json.gz")
    assert "world size 2" in err and "world size 128" in err and "NVIDIA A100" in err


def test_a_v100_job_and_an_a100_rank_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    with tarfile.open(REAL_TRACES_DIR / "gpu_public" / "dlrm_kineto.tar.gz") as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".json"):
                member.name = Path(member.name).name
                tar.extract(member, folder, filter="data")
    _copy(folder, KINETO / "hta_a100_nccl_rank0of2.json.gz")
    err = _refused(folder, tmp_path, "hta_a100_nccl_rank0of2.json.gz", "worker0_step_12")
    assert "ranks 0..7, world size 8" in err and "V100" in err


def test_two_host_jobs_of_different_world_sizes_are_refused(tmp_path: Path) -> None:
    folder = _copy(
        tmp_path / "mixed",
        GPT2 / "rank0_host.json.gz",
        GPT2 / "rank1_host.json.gz",
        GLOO4 / "rank2_host.json.gz",
        GLOO4 / "rank3_host.json.gz",
        names=[
            "gpt2_rank0_host.json.gz",
            "gpt2_rank1_host.json.gz",
            "ops_rank2_host.json.gz",
            "ops_rank3_host.json.gz",
        ],
    )
    err = _refused(folder, tmp_path, "gpt2_rank0_host.json.gz", "ops_rank3_host.json.gz")
    assert "world size 2" in err and "world size 4" in err


def test_two_jobs_of_one_size_are_parted_by_their_names(tmp_path: Path) -> None:
    # the same recorded job twice (world size 2, same schema): the file names part them
    names = ["gpt2_rank0_host.json.gz", "gpt2_rank1_host.json.gz", "bert_rank0_host.json.gz", "bert_rank1_host.json.gz"]
    paths = [GPT2 / "rank0_host.json.gz", GPT2 / "rank1_host.json.gz"] * 2
    folder = _copy(tmp_path / "mixed", *paths, names=names)
    _refused(folder, tmp_path, *names)


def test_one_job_is_one_job(tmp_path: Path) -> None:
    folder = _copy(tmp_path / "job", *sorted(GPT2.glob("rank[01]_*.json.gz")))
    found = discover(str(folder))
    assert len(split(found)) == 1
    assert {m.world_size for m in found.marks.values()} == {2}
    assert {m.backend for m in found.marks.values() if m.kind == "device"} == {"gloo"}


def test_a_rank_beyond_its_world_is_another_job(tmp_path: Path) -> None:
    # a trace saying rank 3 of a 2-rank job is not of the 2-rank job beside it, whatever else agrees
    trace = load_trace(GPT2 / "rank1_device.json.gz")
    trace["distributedInfo"] = {**trace["distributedInfo"], "rank": 3}
    folder = _copy(tmp_path / "job", GPT2 / "rank0_device.json.gz", GPT2 / "rank1_device.json.gz")
    write_trace(trace, folder / "other_rank3_device.json.gz")
    jobs = split(discover(str(folder)))
    assert sorted(map(len, jobs)) == [1, 2]


def test_host_traces_of_one_job_and_kineto_traces_of_another_are_refused(tmp_path: Path) -> None:
    folder = _copy(
        tmp_path / "mixed",
        GPT2 / "rank0_host.json.gz",
        GPT2 / "rank1_host.json.gz",
        *(GLOO4 / f"rank{r}_device.json.gz" for r in range(4)),
    )
    err = _refused(folder, tmp_path, "rank0_host.json.gz", "rank3_device.json.gz")
    assert "world size 2" in err and "world size 4" in err
