"""Compacted traces simulate exactly as the uncompacted ones, in the real ASTRA-sim.

For real captures (GPT-2 and BERT DDP on CPU ranks, ``chakra-profile --convert``) and the ResNet
GPU trace (NCCL kernels, CPU and GPU compute), each rank's simulated time (its ``finished`` line)
must be the same number of cycles, every rank must finish, and each rank must complete the same
communication nodes, read from ASTRA-sim's own log. Found through ``ASTRA_SIM_HOME`` (see
tests/test_astra_sim.py); skipped with the reason when it is unset, failing under CI.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bench import astrasim
from chakra_convert_fast.converter import ConvertOptions, api

from .captures import BERT_2, GPT2_2, GPT2_4, Done, Run
from .test_astra_sim import RESNET_MERGED


def assert_same_simulation(
    prefix: Path, npus: int, comm_groups: Path | None, tmp_path: Path, *, fewer_nodes: bool = True
) -> None:
    results = api.compact_ranks(prefix, tmp_path / "compact")
    assert len(results) == npus
    assert all(r.dependencies_written < r.dependencies_read for r in results)
    if fewer_nodes:
        assert all(r.nodes_written * 100 < r.nodes_read for r in results)
    runs = {}
    for label, which in (("before", prefix), ("after", tmp_path / "compact")):
        run = astrasim.simulate(which, npus, comm_groups=comm_groups, workdir=tmp_path / label)
        assert run.returncode == 0, run.output[-3000:]
        assert run.all_finished, (label, [r.rank for r in run.ranks if not r.finished])
        runs[label] = run
    before, after = runs["before"].ranks, runs["after"].ranks
    assert [r.cycles for r in after] == [r.cycles for r in before]
    assert [r.exposed_communication for r in after] == [r.exposed_communication for r in before]
    assert [r.comm_done for r in after] == [r.comm_done for r in before]
    assert all(r.comm_done.get("collective", 0) >= 1 for r in after)


@pytest.mark.parametrize("run", [GPT2_2, BERT_2, GPT2_4], ids=lambda r: r.name)
def test_compacted_capture_simulates_the_same(
    run: Run, simulator: Path, captured: Callable[[Run], Done], tmp_path: Path
) -> None:
    done = captured(run)
    assert_same_simulation(done.outdir / run.name, run.nproc, done.outdir / f"{run.name}.comm_group.json", tmp_path)


def test_compacted_resnet_gpu_trace_simulates_the_same(simulator: Path, tmp_path: Path) -> None:
    api.convert(RESNET_MERGED, tmp_path / "resnet.0.et", ConvertOptions(astra_sim=True))
    shutil.copy(tmp_path / "resnet.0.et", tmp_path / "resnet.1.et")
    # Its kernels wait only for their launches and it has two CPU threads, so several nodes of a slot
    # may be ready at once: runs merge only where no rival with a lower id can be (plan.py).
    assert_same_simulation(tmp_path / "resnet", 2, None, tmp_path, fewer_nodes=False)
    assert api.compact(tmp_path / "resnet.0.et", tmp_path / "again.et").nodes_written * 3 < 16_778
