"""End to end with the real ASTRA-sim: capture -> link -> convert --astra-sim -> simulate (bench/astrasim.py).

The simulator is found through ``ASTRA_SIM_HOME`` (``.ci/run`` sets it to ``../shared/astra-sim``
and installs its one shared library); without it these tests are skipped, with the reason. Each
workload must finish on every rank (ASTRA-sim exits 0 even when a rank hangs), simulate as many
communication nodes as the files hold, and spend time communicating where there are collectives.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.schema.chakra import NodeType

from .captures import BERT_2, GPT2_2, GPT2_4, Done, Run
from .traces import REAL_TRACES_DIR

RESNET_MERGED = REAL_TRACES_DIR / "resnet_ddp_synthetic_kineto" / "rank0_merged_by_chakra_trace_link.json.gz"
BACKENDS = ("unaware", "aware")


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "chakra_convert_fast.converter", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )


def comm_nodes(prefix: Path, npus: int) -> list[dict[str, int]]:
    """Communication nodes per rank, by kind, read back from the files."""
    kinds = {NodeType.COMM_COLL_NODE: "collective", NodeType.COMM_SEND_NODE: "send", NodeType.COMM_RECV_NODE: "recv"}
    counts = []
    for rank in range(npus):
        trace = read_et(Path(f"{prefix}.{rank}.et"))
        found: dict[str, int] = {}
        for node_type in trace.types:
            if node_type in kinds:
                found[kinds[NodeType(node_type)]] = found.get(kinds[NodeType(node_type)], 0) + 1
        counts.append(found)
    return counts


def assert_simulates(prefix: Path, npus: int, comm_groups: Path | None, workdir: Path) -> None:
    expected = comm_nodes(prefix, npus)
    for backend in BACKENDS:
        run = astrasim.simulate(prefix, npus, backend=backend, comm_groups=comm_groups, workdir=workdir / backend)
        assert run.returncode == 0, run.output[-3000:]
        unfinished = [r.rank for r in run.ranks if not r.finished]
        assert run.all_finished, f"{backend}: ranks that never finished: {unfinished}"
        for rank, counts in zip(run.ranks, expected, strict=True):
            assert rank.comm_done == counts, (backend, rank.rank)
            if counts.get("collective"):
                assert rank.comm_cycles > 0, (backend, rank.rank)


@pytest.mark.parametrize("run", [GPT2_2, BERT_2, GPT2_4], ids=lambda r: r.name)
def test_cpu_capture_simulates_its_collectives(
    run: Run, simulator: Path, captured: Callable[[Run], Done], tmp_path: Path
) -> None:
    done = captured(run)
    job = tmp_path / "job"
    job.mkdir()
    for path in done.outdir.glob("*_rank*_*.json"):
        shutil.copy(path, job)
    converted = cli("convert-all", job, tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    name = run.name  # convert-all names the job after the capture (its files: <name>_rank<R>_host.json)
    prefix, groups = tmp_path / "et" / name, tmp_path / "et" / f"{name}.comm_group.json"
    checked = cli("check", *(f"{prefix}.{r}.et" for r in range(run.nproc)), "--comm-groups", groups)
    assert checked.returncode == 0, checked.stderr
    counts = comm_nodes(prefix, run.nproc)
    assert all(c.get("collective", 0) >= 1 for c in counts), counts  # DDP's gradient all-reduce at least
    assert_simulates(prefix, run.nproc, groups, tmp_path)


def test_every_gloo_op_simulates_with_sends_and_receives(simulator: Path, tmp_path: Path) -> None:
    """All collectives ASTRA-sim simulates, broadcast, and send/recv pairs between ranks 0 and 1,
    with the job's sub-groups in the communicator group file."""
    converted = cli("convert-all", REAL_TRACES_DIR / "gloo_ops_np4", tmp_path / "et", "--astra-sim")
    assert converted.returncode == 0, converted.stderr
    prefix, groups = tmp_path / "et" / "trace", tmp_path / "et" / "trace.comm_group.json"
    assert comm_nodes(prefix, 4) == [{"collective": 14, "send": 1, "recv": 1}] * 2 + [{"collective": 14}] * 2
    assert_simulates(prefix, 4, groups, tmp_path)


def test_profiler_output_simulates_as_written(simulator: Path, captured: Callable[[Run], Done], tmp_path: Path) -> None:
    """``chakra-profile --convert`` writes .et files and the comm group file ASTRA-sim runs as they are."""
    done = captured(GPT2_2)
    prefix = done.outdir / GPT2_2.name
    assert_simulates(prefix, GPT2_2.nproc, done.outdir / f"{GPT2_2.name}.comm_group.json", tmp_path)


def test_resnet_gpu_trace_simulates_its_nccl_collectives(simulator: Path, tmp_path: Path) -> None:
    """The shared ResNet merged trace (rank 0 of 2, NCCL kernels), run as both ranks."""
    result = api.convert(RESNET_MERGED, tmp_path / "resnet.0.et", ConvertOptions(astra_sim=True))
    assert result.comm_nodes == 21
    shutil.copy(tmp_path / "resnet.0.et", tmp_path / "resnet.1.et")
    assert_simulates(tmp_path / "resnet", 2, None, tmp_path)


def test_default_output_is_refused_and_check_says_why(simulator: Path, tmp_path: Path) -> None:
    """The reference's bytes abort ASTRA-sim; ``check`` names each problem, --astra-sim fixes them."""
    for rank in range(2):
        api.convert(RESNET_MERGED, tmp_path / f"ref.{rank}.et")
    run = astrasim.simulate(tmp_path / "ref", 2, workdir=tmp_path / "sim")
    assert not run.all_finished and "not found in index" in run.output
    checked = cli("check", tmp_path / "ref.0.et", tmp_path / "ref.1.et")
    assert checked.returncode == 1
    assert "dependencies name no node" in checked.stderr and "METADATA" in checked.stderr
