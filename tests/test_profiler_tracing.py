"""Trace capture in isolation: schedule phases, file names, and one JSON document per file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from chakra_convert_fast.profiler import tracing

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.parametrize(
    ("step", "phase"),
    [(0, "wait"), (1, "wait"), (2, "warmup"), (3, "active"), (4, "active"), (5, "untraced"), (99, "untraced")],
)
def test_schedule_phases(step: int, phase: str) -> None:
    assert tracing.Schedule(wait=2, warmup=1, active=2).phase(step) == phase


def test_active_steps_are_the_profiler_step_numbers() -> None:
    assert tracing.Schedule(wait=2, warmup=1, active=2).active_steps() == [3, 4]


def test_paths_are_rank_specific(tmp_path: Path) -> None:
    paths = tracing.TracePaths.for_rank(tmp_path, "quick", 3)
    assert paths.host.name == "quick_rank3_host.json"
    assert paths.device.name == "quick_rank3_device.json"


def test_a_second_document_in_one_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    one = json.dumps({"schema": "1.1.1-chakra.0.0.4", "nodes": []})
    path.write_text(one + "\n" + one)
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        tracing.inspect_host(path)


def test_a_device_trace_is_not_a_host_trace(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ValueError, match="not an execution trace"):
        tracing.inspect_host(path)


def run_toy_capture(outdir: Path, schedule: tracing.Schedule, steps: int) -> tracing.TracePaths:
    paths = tracing.TracePaths.for_rank(outdir, "toy", 0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    with tracing.capture(paths, schedule, cuda=False) as prof:
        for _ in range(steps):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    return paths


@pytest.mark.parametrize("steps", [4, 7])  # 7 runs past the window: nothing more may be recorded
def test_capture_writes_one_host_and_one_device_document(tmp_path: Path, steps: int) -> None:
    schedule = tracing.Schedule(wait=1, warmup=1, active=2)
    paths = run_toy_capture(tmp_path, schedule, steps)
    host, device = tracing.inspect_host(paths.host), tracing.inspect_device(paths.device)
    assert host["schema"].startswith("1.")
    assert host["profiler_steps"] == device["profiler_steps"] == schedule.active_steps()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy_rank0_device.json", "toy_rank0_host.json"]


def test_capturing_again_replaces_the_files(tmp_path: Path) -> None:
    run_toy_capture(tmp_path, tracing.Schedule(wait=0, warmup=1, active=2), 3)
    paths = run_toy_capture(tmp_path, tracing.Schedule(wait=0, warmup=1, active=1), 2)
    assert tracing.inspect_host(paths.host)["profiler_steps"] == [1]
    assert tracing.inspect_device(paths.device)["profiler_steps"] == [1]


def test_each_rank_stores_its_tracing_overhead_calibration(tmp_path: Path) -> None:
    """Beside a rank's traces, its traced step and the median of its untraced ones (the first step
    left out), where the Kineto front end finds them (``converter/overhead.py``); none without an
    untraced step to compare with."""
    import argparse

    from chakra_convert_fast.converter import overhead
    from chakra_convert_fast.profiler import train

    paths = tracing.TracePaths.for_rank(tmp_path, "job", 1)
    phases = ["wait", "wait", "wait", "warmup", "active", "untraced", "untraced"]
    record = train.StepRecord(rank=1, step_times_s=[0.9, 0.04, 0.05, 0.07, 0.12, 0.06, 0.045], phases=phases)
    args = argparse.Namespace(host_trace=False, record_shapes=True)
    train.write_calibration(record, args, paths)
    written = tmp_path / "job_rank1_overhead.json"
    data = json.loads(written.read_text())
    assert (data["rank"], data["traced_step_us"], data["untraced_step_us"], data["untraced_steps"]) == (
        1,
        120000.0,
        47500.0,
        4,
    )
    assert (data["host_trace"], data["record_shapes"]) == (False, True)
    model = overhead.read_calibration(written)
    assert model is not None and model.target_us == 72500.0
    assert overhead.calibration_path(paths.device) == written
    record = train.StepRecord(rank=2, step_times_s=[0.9, 0.07, 0.12], phases=["wait", "warmup", "active"])
    train.write_calibration(record, args, tracing.TracePaths.for_rank(tmp_path, "job", 2))
    assert not (tmp_path / "job_rank2_overhead.json").exists()
