"""End to end: tiny GPT-2 and BERT DDP runs on 1, 2 and 4 CPU ranks, offline, traced and converted.

Each run is started once per session (``tests/captures.py``) through the real launcher; the tests
then read what it left in its output directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import datasets  # noqa: F401 - a missing profiler extra fails here, loudly
import pytest
import torch  # a missing dependency fails, never skips
import transformers  # noqa: F401

from chakra_convert_fast.converter import api
from chakra_convert_fast.fixtures.reference import reference_convert
from chakra_convert_fast.profiler import convert, train

from .captures import RUNS, Done, Run
from .traces import load_trace, reference_link

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module", params=RUNS, ids=lambda r: f"{r.model}-{r.nproc}rank")
def done(request: pytest.FixtureRequest, captured: Callable[[Run], Done]) -> Done:
    return captured(request.param)


def test_files_are_one_pair_per_rank(done: Done) -> None:
    name, ranks = done.run.name, range(done.run.nproc)
    expected = {f"{name}_summary.json"}
    expected |= {f"{name}_rank{r}_{kind}.json" for r in ranks for kind in ("host", "device")}
    if "--convert" in done.run.extra:
        expected |= {f"{name}.{r}.et" for r in ranks} | {f"{name}.comm_group.json", f"{name}.layout.json"}
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
    assert summary["malloc"] == train.malloc_in_use()  # the ranks inherit this process's allocator
    # on CPU (gloo) no GPU or NCCL is named; CUDA's version is torch's build (None on a CPU wheel)
    assert (summary["gpu"], summary["gpu_count"], summary["nccl"]) == (None, 0, None)
    assert summary["cuda"] == torch.version.cuda
    assert [r["rank"] for r in summary["ranks"]] == list(range(done.run.nproc))
    for rank in summary["ranks"]:
        assert rank["phases"].count("active") == done.run.active
        assert rank["host"]["bytes"] == done.host(rank["rank"]).stat().st_size
    assert summary["step_time_s"]["traced_median"] > 0
    # data parallel only: one replica per rank, every rank in the data-parallel group
    assert (summary["layout"]["dp"], summary["layout"]["tp"], summary["layout"]["pp"]) == (done.run.nproc, 1, 1)
    assert all(r["groups"]["dp"]["ranks"] == list(range(done.run.nproc)) for r in summary["ranks"])
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
        convert.convert_rank(done.host(rank), done.device(rank), fast, rank, "fast", astra_sim=False)
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
        # less the process node (dropped as dangling) and, with --astra-sim, the METADATA node
        assert et["nodes_written"] >= rank["host"]["nodes"] - 2 and et["astra_sim"]
        assert et["comm_nodes"] >= 1  # DDP's gradient all-reduce, a communication node for ASTRA-sim
        assert Path(et["path"]).stat().st_size == et["bytes"] > 0


def test_model_and_tokenizer_saved_only_when_asked(done: Done) -> None:
    save = done.outdir.parent / "save"
    if "--save-dir" not in done.run.extra:
        assert not save.exists()
        return
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in save.iterdir()}


@pytest.mark.parametrize(
    ("maps", "expected"),
    [
        ("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n", "glibc"),
        (
            "7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f02-7f03 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4.5.10\n",
            "libtcmalloc_minimal.so.4.5.10",
        ),
        ("7f02-7f03 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n", "libjemalloc.so.2"),
        (None, "unknown"),
    ],
)
def test_summary_names_the_allocator(tmp_path: Path, maps: str | None, expected: str) -> None:
    path = tmp_path / "maps"
    if maps is not None:
        path.write_text(maps)
    assert train.malloc_in_use(path) == expected


def test_convert_rank_writes_accelerator_nodes_with_roofline_target(done: Done, tmp_path: Path) -> None:
    """Issue 26 goal 5: ``chakra-profile --convert --roofline --target accelerator`` writes the
    accelerator nodes that ``simulate --accelerator`` times (a default conversion has none)."""
    from chakra_convert_fast.converter.et.decode import CPU_OP_FALSE, read_et
    from chakra_convert_fast.converter.schema.chakra import NodeType

    def accelerator_nodes(path: Path) -> int:
        trace = read_et(path)
        return sum(
            1
            for t, cpu in zip(trace.types, trace.cpu_ops, strict=True)
            if t == NodeType.COMP_NODE and cpu == CPU_OP_FALSE
        )

    plain, roofline = tmp_path / "plain.0.et", tmp_path / "roofline.0.et"
    convert.convert_rank(done.host(0), done.device(0), plain, 0, "fast")
    info = convert.convert_rank(done.host(0), done.device(0), roofline, 0, "fast", roofline=True, target="accelerator")
    assert info["roofline"] and info["target"] == "accelerator"
    assert accelerator_nodes(plain) == 0
    assert accelerator_nodes(roofline) > 0


def test_accelerator_facts_name_the_gpu_and_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU run's summary names the GPU, CUDA and NCCL (read through torch; faked here, no GPU)."""

    class Props:
        total_memory = 150_000_000_000

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: Props())
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    where = train.Placement(0, 1, 0, 1, torch.device("cuda", 0), "nccl")
    facts = train.accelerator_facts(where)
    assert facts == {
        "gpu": "NVIDIA H200",
        "gpu_count": 1,
        "cuda": "13.0",
        "nccl": "2.27.7",
        "gpu_memory_bytes": 150_000_000_000,
    }
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: 21801)  # torch before 2.x gave an int
    assert train.accelerator_facts(where)["nccl"] == "21801"


def test_kineto_alone_capture_in_bf16_converts_by_the_kineto_front_end(tmp_path: Path) -> None:
    """``--no-host-trace --no-record-shapes --precision bf16 --convert``: the lightest capture (no
    host trace written), converted by the Kineto front end into a .et that passes check; the
    summary says how it was traced and in which precision."""
    from chakra_convert_fast.converter.check.rules import check_file
    from chakra_convert_fast.converter.et.decode import read_et
    from chakra_convert_fast.profiler import cli

    argv = ["--model", "gpt2", "--size", "tiny", "--seq-len", "32", "--batch-size", "2", "--steps", "2"]
    argv += ["--wait", "1", "--warmup", "0", "--active", "1", "--outdir", str(tmp_path), "--name", "light"]
    argv += ["--no-host-trace", "--no-record-shapes", "--precision", "bf16", "--convert", "--threads", "1"]
    assert cli.main(argv) == 0
    assert not (tmp_path / "light_rank0_host.json").exists()
    summary = json.loads((tmp_path / "light_summary.json").read_text())
    assert (summary["host_trace"], summary["record_shapes"], summary["precision"]) == (False, False, "bf16")
    et = summary["ranks"][0]["et"]
    assert et["kineto_only"] and et["step"] == 1 and et["nodes_written"] > 100
    device = json.loads((tmp_path / "light_rank0_device.json").read_text())
    ops = [e for e in device["traceEvents"] if e.get("cat") == "cpu_op"]
    assert ops and not any("Input Dims" in e.get("args", {}) for e in ops)  # no shapes recorded
    assert any("BFloat16" in str(e.get("args", {})) or e["name"] == "aten::_to_copy" for e in ops)  # autocast ran
    problems = check_file(read_et(tmp_path / "light.0.et"), 0)[1]
    assert not [p for p in problems if p.fatal], problems
