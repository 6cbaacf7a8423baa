"""End to end: tiny GPT-2 and BERT DDP runs on 1 and 2 CPU ranks, offline, traced and converted.

Each run is started once (module-scoped fixture) through the real launcher; the tests then read
what it left in its output directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets  # noqa: F401 - a missing profiler extra fails here, loudly
import pytest
import torch  # noqa: F401 - a missing dependency fails, never skips
import transformers  # noqa: F401

from chakra_convert_fast.converter import api
from chakra_convert_fast.fixtures.reference import reference_convert
from chakra_convert_fast.profiler import convert

from .conftest import load_trace, reference_link

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Run:
    model: str
    nproc: int
    wait: int
    warmup: int
    active: int
    extra: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.model}{self.nproc}"

    @property
    def steps(self) -> list[int]:
        return list(range(self.wait + self.warmup, self.wait + self.warmup + self.active))

    def argv(self, outdir: Path) -> list[str]:
        return [
            "--model", self.model, "--size", "tiny", "--seq-len", "32", "--batch-size", "2",
            "--nproc", str(self.nproc), "--steps", str(self.wait + self.warmup + self.active),
            "--wait", str(self.wait), "--warmup", str(self.warmup), "--active", str(self.active),
            "--outdir", str(outdir), "--name", self.name, *self.extra,
        ]


RUNS = [
    Run("gpt2", 1, wait=0, warmup=1, active=2),
    Run("bert", 1, wait=1, warmup=1, active=1, extra=("--save-dir", "SAVE")),
    Run("gpt2", 2, wait=1, warmup=1, active=1, extra=("--convert",)),
    Run("bert", 2, wait=0, warmup=1, active=1),
]


@dataclass(frozen=True)
class Done:
    run: Run
    outdir: Path
    output: str

    def host(self, rank: int) -> Path:
        return self.outdir / f"{self.run.name}_rank{rank}_host.json"

    def device(self, rank: int) -> Path:
        return self.outdir / f"{self.run.name}_rank{rank}_device.json"

    def summary(self) -> dict[str, Any]:
        return json.loads((self.outdir / f"{self.run.name}_summary.json").read_text())


def offline_env(tmp: Path) -> dict[str, str]:
    """No hub, fresh caches, one thread per rank, and this checkout importable."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(tmp / "hf"), CHAKRA_PROFILE_CACHE=str(tmp / "cache"), OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
    )
    return env


@pytest.fixture(scope="module", params=RUNS, ids=lambda r: f"{r.model}-{r.nproc}rank")
def done(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Done:
    run: Run = request.param
    tmp = tmp_path_factory.mktemp(run.name)
    argv = [str(tmp / "save") if a == "SAVE" else a for a in run.argv(tmp / "outputs")]
    proc = subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.profiler.cli", *argv],
        cwd=tmp, env=offline_env(tmp), capture_output=True, text=True, timeout=600,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    return Done(run, tmp / "outputs", output)


def test_files_are_one_pair_per_rank(done: Done) -> None:
    name, ranks = done.run.name, range(done.run.nproc)
    expected = {f"{name}_summary.json"}
    expected |= {f"{name}_rank{r}_{kind}.json" for r in ranks for kind in ("host", "device")}
    if "--convert" in done.run.extra:
        expected |= {f"{name}.{r}.et" for r in ranks}
    assert {p.name for p in done.outdir.iterdir()} == expected


def test_host_traces_are_single_documents_with_the_traced_steps(done: Done) -> None:
    pids = set()
    for rank in range(done.run.nproc):
        doc = json.loads(done.host(rank).read_text())  # fails on a second document ("Extra data")
        assert doc["schema"].startswith("1.1.")
        names = [node["name"] for node in doc["nodes"]]
        steps = sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))
        assert steps == done.run.steps
        assert "## process_group:init ##" in names
        pids.add(doc["pid"])
    assert len(pids) == done.run.nproc


def test_device_traces_match_their_host_traces(done: Done) -> None:
    for rank in range(done.run.nproc):
        doc = json.loads(done.device(rank).read_text())
        names = {e.get("name", "") for e in doc["traceEvents"]}
        steps = sorted(int(n.split("#")[1]) for n in names if n.startswith("ProfilerStep#"))
        assert steps == done.run.steps
        info = doc["distributedInfo"]
        assert (info["rank"], info["world_size"], info["backend"]) == (rank, done.run.nproc, "gloo")


def test_summary_reports_steps_and_sizes(done: Done) -> None:
    summary = done.summary()
    assert summary["model"] == done.run.model
    assert (summary["world_size"], summary["threads"]) == (done.run.nproc, 1)
    assert [r["rank"] for r in summary["ranks"]] == list(range(done.run.nproc))
    for rank in summary["ranks"]:
        assert rank["phases"].count("active") == done.run.active
        assert rank["host"]["bytes"] == done.host(rank["rank"]).stat().st_size
    assert summary["step_time_s"]["traced_median"] > 0
    assert summary["trace_bytes_per_step_per_rank"]["host"] > 0


def test_rank0_logs_every_step(done: Done) -> None:
    total = done.run.wait + done.run.warmup + done.run.active
    for step in range(1, total + 1):
        assert f"[rank0] step {step}/{total} loss " in done.output


def test_host_trace_converts_like_the_reference(done: Done, tmp_path: Path) -> None:
    for rank in range(done.run.nproc):
        ours, theirs = tmp_path / f"fast.{rank}.et", tmp_path / f"reference.{rank}.et"
        api.convert(done.host(rank), ours)
        reference_convert(done.host(rank), theirs)
        assert ours.read_bytes() == theirs.read_bytes(), f"rank {rank}: outputs differ"


def test_both_converters_get_the_same_merged_input(done: Done, tmp_path: Path) -> None:
    """--converter fast and --converter reference link first, so their outputs are comparable."""
    for rank in range(done.run.nproc):
        fast, ref = tmp_path / f"fast.{rank}.et", tmp_path / f"ref.{rank}.et"
        convert.convert_rank(done.host(rank), done.device(rank), fast, rank, "fast")
        info = convert.convert_rank(done.host(rank), done.device(rank), ref, rank, "reference")
        assert Path(info["merged"]).is_file()
        assert fast.read_bytes() == ref.read_bytes(), f"rank {rank}: outputs differ"


def test_pairs_link_like_the_reference_linker(done: Done, tmp_path: Path) -> None:
    """Issue 4: on any pair the profiler produces, ``link`` writes chakra_trace_link's document."""
    for rank in range(done.run.nproc):
        ours = tmp_path / f"ours.{rank}.json"
        api.link(done.host(rank), done.device(rank), ours, rank=rank)
        theirs = reference_link(done.host(rank), done.device(rank), tmp_path / f"ref.{rank}.json", tmp_path, rank)
        assert load_trace(ours) == theirs


def test_et_files_only_when_converting(done: Done) -> None:
    ranks = done.summary()["ranks"]
    if "--convert" not in done.run.extra:
        assert all(rank["et"] is None for rank in ranks)
        return
    for rank in ranks:
        et = rank["et"]
        assert Path(et["path"]).name == f"{done.run.name}.{rank['rank']}.et"
        assert et["nodes_written"] >= rank["host"]["nodes"] - 1
        assert Path(et["path"]).stat().st_size == et["bytes"] > 0


def test_model_and_tokenizer_saved_only_when_asked(done: Done) -> None:
    save = done.outdir.parent / "save"
    if "--save-dir" not in done.run.extra:
        assert not save.exists()
        return
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in save.iterdir()}
