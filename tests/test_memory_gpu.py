"""``memory`` on the committed GPU captures (``tests/data/traces/gpu_memory``, PROVENANCE.md there:
GPT-2 and BERT base, bf16, batch 8 and 32, one NVIDIA H100 and one H200): each within 5% of
``torch.cuda.max_memory_allocated`` over the traced step (issue 36's GPU table;
bench/results/memory.md), the host trace alone within its measured bound, and the fit check on them
and on a converted capture."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from chakra_convert_fast.converter.memory.job import from_folder, rank_memory

from .clirun import assert_one_error, run_cli

GPU = Path(__file__).parent / "data" / "traces" / "gpu_memory"
CAPTURES = sorted(p for p in GPU.glob("*/*") if p.is_dir())
WITH_HOST = [p for p in CAPTURES if any(p.glob("*_rank0_host.json.gz"))]
#: host + Kineto captures without memory events, whose summaries record the same truth
#: (tests/data/traces/gpu_h100/PROVENANCE.md): the host trace alone at batch 32 too
H100_HOST = [GPU.parent / "gpu_h100" / f"{m}_base_bf16_b{b}" for m in ("gpt2", "bert") for b in (8, 32)]
H100_GPT2 = GPU / "h100" / "mem_gpt2_base_bf16_b8"
H100_BYTES = 85_017_493_504  # torch.cuda total_memory, the H100 captures' summary gpu_memory_bytes


def _name(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


def _truth(folder: Path) -> dict[str, Any]:
    summary = json.loads(next(folder.glob("*_summary.json")).read_text())
    memory: dict[str, Any] = summary["ranks"][0]["memory"]
    return memory


def _memory(*args: str) -> dict[str, Any]:
    done = run_cli("memory", *args, "--json")
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _within(estimate: int, truth: int, share: float) -> bool:
    return abs(estimate - truth) <= share * truth


def test_the_captures_are_all_there() -> None:
    assert len(CAPTURES) == 8 and len(WITH_HOST) == 4
    assert all("b8" in p.name for p in WITH_HOST)
    for folder in H100_HOST:  # no memory events, a host trace and the truth
        summary = json.loads(next(folder.glob("*_summary.json")).read_text())
        assert not summary["profile_memory"] and any(folder.glob("*_rank0_host.json.gz"))
        assert summary["ranks"][0]["memory"]["cuda_max_allocated"] > 0


@pytest.mark.parametrize("folder", CAPTURES, ids=_name)
def test_within_five_percent_of_max_memory_allocated(folder: Path) -> None:
    """Kineto's memory events: the CUDA caching allocator's "Total Allocated" counts what was live
    before the window (unlike the CPU's), so the window's running sum over it is the allocator's
    own count: the peak is the trace's highest "Total Allocated" to the byte (the summary's
    ``kineto_peak_total_allocated``), which is ``max_memory_allocated`` on all eight."""
    truth = _truth(folder)
    [rank] = _memory(str(folder))["ranks"]
    assert rank["rank"] == 0 and rank["source"] == "kineto" and rank["device"] == "cuda"
    assert _within(rank["peak_bytes"], truth["cuda_max_allocated"], 0.05), (rank["peak_bytes"], truth)
    assert rank["peak_bytes"] == truth["kineto_peak_total_allocated"]
    assert sum(rank["at_peak"].values()) == rank["peak_bytes"]
    assert rank["peak_bytes"] <= truth["cuda_max_reserved"]
    state = truth["state_bytes_at_start"]
    if folder in WITH_HOST:  # the host trace names what the step found live
        assert _within(rank["at_peak"]["parameters"], state["parameters"], 0.01)
        assert _within(rank["at_peak"]["optimizer"], state["optimizer"], 0.01)
        assert _within(rank["at_peak"]["communication"], truth["ddp_bucket_bytes"], 0.01)
        assert not rank["notes"]
    else:  # counted by the allocator's total, not named: said in a note
        assert rank["at_peak"]["parameters"] == 0
        assert rank["at_peak"]["other"] >= state["parameters"] + state["optimizer"]
        assert "not named" in rank["notes"][0]


@pytest.mark.parametrize("folder", WITH_HOST + H100_HOST, ids=_name)
def test_the_host_trace_alone_within_five_percent_below(folder: Path) -> None:
    """The host trace's tensors alone (a capture without memory events): measured under
    ``max_memory_allocated`` on every capture, 1.2% (GPT-2) and 2.7% (BERT) at batch 8, 0.3% and
    0.9% at batch 32. Under, because what no op of the trace names is not in it: 67-78 MiB the
    step found live that no op touches (the allocator's total has them; cuBLAS's workspaces are
    such), and the temporaries inside an op. Before the observer's storage ids were read as the
    addresses they are (a freed block's id comes back with the next tensor there), the batch-8
    captures gave +9% to +10%."""
    # what `memory` reads of a folder, in-process (the command's --json is checked above): the
    # memory captures' host trace alone; the H100 set's folder as it is (no memory events)
    host = str(next(folder.glob("*_rank0_host.json.gz")))
    [rank] = [rank_memory(0, host, None)] if folder in WITH_HOST else from_folder(str(folder))
    truth = _truth(folder)
    assert rank.source == "host" and rank.device == "cuda"
    assert 0.95 * truth["cuda_max_allocated"] <= rank.peak_bytes <= truth["cuda_max_allocated"], (
        rank.peak_bytes,
        truth["cuda_max_allocated"],
    )
    assert _within(rank.baseline["parameters"], truth["state_bytes_at_start"]["parameters"], 0.01)
    assert _within(rank.baseline["optimizer"], truth["state_bytes_at_start"]["optimizer"], 0.01)


def test_fit_on_the_capture_and_below_its_peak() -> None:
    """GPT-2 base, batch 8 (~7.7 GiB) fits an H100 (its measured 79.18 GiB); in less than its
    peak, its one rank is named."""
    doc = _memory(str(H100_GPT2), "--accelerator", "H100")
    assert doc["fit"]["fits"] and doc["fit"]["capacity_bytes"] == H100_BYTES and doc["fit"]["ranks_not_fitting"] == []
    peak = doc["ranks"][0]["peak_bytes"]
    table = run_cli("memory", str(H100_GPT2), "--gpu-memory", str(peak - 1))
    assert table.returncode == 0, table.stderr
    assert "memory: 1 of 1 ranks would not fit in 7.71 GiB (given on the command line): ranks 0;" in table.stdout


def test_simulate_says_whether_the_converted_capture_fits(simulator: Path, tmp_path: Path) -> None:
    """Converted with its memory (and the roofline, which ``--accelerator`` runs), simulated as
    the 2-rank DDP job it stands for: it fits an H100; in 7 GB neither rank does. Without the
    roofline, ``--accelerator`` is refused before ASTRA-sim runs (it would drop every kernel
    without ``num_ops`` and never finish)."""
    env = {**os.environ, "ASTRA_SIM_HOME": str(simulator)}
    job = tmp_path / "et"
    done = run_cli("convert-all", str(H100_GPT2), str(job), "--astra-sim", "--memory", "--roofline", "-q", timeout=120)
    assert done.returncode == 0, done.stderr
    prefix = str(job / H100_GPT2.name)
    done = run_cli("simulate", prefix, "--ranks", "2", "--accelerator", "H100", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "memory: every rank fits in 79.18 GiB" in done.stdout
    done = run_cli("simulate", prefix, "--ranks", "2", "--gpu-memory", str(7 * 10**9), "--json", "-", env=env)
    assert done.returncode == 0, done.stderr
    fit = json.loads(done.stdout)["memory"]
    assert not fit["fits"] and fit["ranks_not_fitting"] == [0, 1] and fit["capacity_bytes"] == 7 * 10**9
    bare = tmp_path / "bare"
    done = run_cli("convert-all", str(H100_GPT2), str(bare), "--astra-sim", "-q", timeout=120)
    assert done.returncode == 0, done.stderr
    done = run_cli("simulate", str(bare / H100_GPT2.name), "--ranks", "2", "--accelerator", "H100", env=env)
    assert_one_error(done, "without num_ops", "--roofline")
