"""``memory`` on a pipeline-parallel job: a DDP 2 x PP 2 CPU capture, each rank against its truth,
and ``scale`` to DDP 4 x PP 2 against the real 8-rank capture's truth, rank by rank (the
committed capture: tests/data/traces/cpu_gpt2_dp2pp2_memory/PROVENANCE.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chakra_convert_fast.converter.memory.job import from_folder
from chakra_convert_fast.converter.memory.profile import RankMemory

from .clirun import run_cli

DATA = Path(__file__).parent / "data" / "traces" / "cpu_gpt2_dp2pp2_memory"
MIB = 1 << 20


def _truths(summary: str) -> list[int]:
    doc = json.loads((DATA / summary).read_text())
    return [int(r["memory"]["truth_bytes"]) for r in doc["ranks"]]


@pytest.fixture(scope="module")
def dp2pp2() -> list[RankMemory]:
    return from_folder(str(DATA))


def test_each_rank_within_one_percent_of_its_truth(dp2pp2: list[RankMemory]) -> None:
    truths = _truths("gpt2_dp2pp2_summary.json")
    assert [m.rank for m in dp2pp2] == [0, 1, 2, 3]
    for m in dp2pp2:
        assert m.source == "kineto"
        assert abs(m.peak_bytes - truths[m.rank]) <= 0.01 * truths[m.rank], (m.rank, m.peak_bytes, truths[m.rank])
    first, last = dp2pp2[0], dp2pp2[2]
    # the first stage peaks in the optimizer step (no activations live), the last with its logits
    assert first.at_peak["activations"] < MIB and first.at_peak["optimizer"] > 2 * first.at_peak["parameters"]
    assert last.at_peak["activations"] > last.peak_bytes / 2


@pytest.mark.slow
def test_scaled_to_dp4_pp2_within_ten_percent_of_the_real_capture(dp2pp2: list[RankMemory], tmp_path: Path) -> None:
    """convert-all --memory, scale to 8 ranks (DDP 4 x PP 2: each new rank copies the captured
    rank of its stage and tensor-parallel place), memory --json: each rank within 10% of the real
    8-rank job's truth (both stages: the first peaks in the optimizer step, the last in the
    forward pass)."""
    done = run_cli("convert-all", str(DATA), str(tmp_path / "et"), "--astra-sim", "--memory", "-q", timeout=180)
    assert done.returncode == 0, done.stderr
    shutil.copy(DATA / "gpt2_dp2pp2.layout.json", tmp_path / "et")
    done = run_cli("scale", str(tmp_path / "et" / "gpt2_dp2pp2"), str(tmp_path / "s8"), "-n", "8", "-q", timeout=180)
    assert done.returncode == 0, done.stderr
    doc = json.loads(run_cli("memory", str(tmp_path / "s8"), "--json").stdout)
    real = _truths("gpt2_dp4pp2_summary.json")
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))
    for r in doc["ranks"]:
        stage = r["rank"] // 4  # the real job's mesh (pp, dp, tp) = (2, 4, 1)
        assert r["scaled_from"]["rank"] // 2 == stage, r["scaled_from"]  # the captured mesh (2, 2, 1)
        assert abs(r["peak_bytes"] - real[r["rank"]]) <= 0.10 * real[r["rank"]], (r["rank"], r["peak_bytes"])
        # each rank keeps its batch and its stage: the peak of the captured rank it copies
        assert r["peak_bytes"] == dp2pp2[r["scaled_from"]["rank"]].peak_bytes
