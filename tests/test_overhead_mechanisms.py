"""The mechanisms behind the corrected replay (``docs/overhead.md``), each on its own: the step
estimate a calibration is found on (``overhead.critical_path``), a calibration that brings that
estimate to the untraced step (the profiler's time the GPU hid included), the host waiting for
the GPU in the host + Kineto path (``convert/waits.py``), and the host path reading the
calibration ``chakra-profile`` wrote beside its host trace; on the committed H200 and H100
captures. The replays in the real ASTRA-sim: ``test_tracing_overhead_astra.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api, overhead
from chakra_convert_fast.converter.convert import waits
from chakra_convert_fast.converter.et.decode import CPU_OP_TRUE, read_et

from .traces import REAL_TRACES_DIR

H200 = REAL_TRACES_DIR / "gpu_h200"
H100 = REAL_TRACES_DIR / "gpu_h100"


def pair(folder: Path, name: str) -> tuple[Path, Path]:
    return folder / name / f"{name}_rank0_host.json.gz", folder / name / f"{name}_rank0_device.json.gz"


# -- the step estimate --------------------------------------------------------------------------
def test_critical_path_runs_one_node_per_resource_at_a_time() -> None:
    """A CPU chain of three ops launching two kernels: the kernels wait for their launch and for
    each other (one GPU), a CPU op after a wait for the second waits for it."""
    cpu, gpu = 0, 1
    durations = [10, 10, 10, 50, 50, 5]
    deps = [[], [0], [1], [0], [1], [2, 4]]  # 3: kernel of op 0; 4: kernel of op 1; 5: after a sync on 4
    estimate = overhead.critical_path(durations, deps, [cpu, cpu, cpu, gpu, gpu, cpu])
    assert estimate([], []) == 10 + 50 + 50 + 5  # the second kernel starts when the first ends
    assert estimate([3], [0]) == 20 + 50 + 5  # without the first kernel: after its launch (op 1)
    assert estimate([0, 1, 2], [1, 1, 1]) == 1 + 50 + 50 + 5  # the host's time is off the critical path


def test_a_calibration_brings_the_step_to_the_untraced_one_not_the_host_time() -> None:
    """Ten host ops of 10 us, a 30 us kernel after the first: the step is host-bound (100 us).
    Calibrated to 60 us, 4 us come off each op; calibrated to 20 us, the kernel is the floor, and
    the host gives up only what reaches it."""
    durations = [10] * 10 + [30]
    deps = [[i - 1] if i else [] for i in range(10)] + [[0]]
    estimate = overhead.critical_path(durations, deps, [0] * 10 + [1])
    timeline = [(10, overhead.OP)] * 10
    host = list(range(10))

    def step(new: list[int]) -> float:
        return estimate(host, new)

    model = overhead.Model(0.0, 0.0, "test", target_us=40.0, untraced_us=60.0)
    durations_after, removed = overhead.untrace(timeline, model, step=lambda d: step(list(d)))
    assert step(durations_after) == pytest.approx(60, abs=1) and removed.model.per_op_us == pytest.approx(4, abs=0.1)
    floor = overhead.Model(0.0, 0.0, "test", target_us=80.0, untraced_us=20.0)
    durations_after, removed = overhead.untrace(timeline, floor, step=lambda d: step(list(d)))
    assert step(durations_after) == pytest.approx(31, abs=1)  # the kernel after the first op's 1 us
    assert removed.removed_us < 100


def test_calibration_takes_out_what_the_gpu_hid_on_the_h100(tmp_path: Path) -> None:
    """GPT-2 fp32 at batch 4, Kineto alone, on the H100: traced 80.4 ms (host-bound), untraced
    60.5 ms (GPU-bound). Taking out only the difference of host time (19.9 ms) left the replay
    17% long: the GPU hid part of the profiler's cost. The calibration takes out what brings the
    step to the untraced one: more than the difference."""
    name = "kineto_gpt2_base_fp32_b4"
    calibration = json.loads((H100 / name / f"{name}_rank0_overhead.json").read_text())
    done = api.convert_kineto(H100 / name / f"{name}_rank0_device.json.gz", tmp_path / "k.0.et")
    removed = done.overhead
    assert removed is not None and "calibrated in the same run" in removed.model.source
    difference = calibration["traced_step_us"] - calibration["untraced_step_us"]
    assert removed.removed_us > 1.5 * difference


# -- the host waiting for the GPU ---------------------------------------------------------------
def test_which_device_to_host_copies_the_host_waits_for() -> None:
    assert waits.is_wait("Memcpy DtoH (Device -> Pinned)", "aten::_local_scalar_dense")  # item()
    assert waits.is_wait("Memcpy DtoH (Device -> Pageable)", "aten::copy_")  # synchronous in CUDA
    assert not waits.is_wait("Memcpy DtoH (Device -> Pinned)", "aten::copy_")  # may be non_blocking
    assert not waits.is_wait("Memcpy HtoD (Pageable -> Device)", "aten::_local_scalar_dense")


@pytest.mark.slow
def test_host_path_op_after_item_waits_for_its_copy(tmp_path: Path) -> None:
    """BERT on the H200, host + Kineto: ``loss.item()`` (``aten::_local_scalar_dense``) before the
    optimizer step. With ``--astra-sim`` the optimizer's first op depends on the copy the item
    waited for; the reference's output (no ``--astra-sim``) is left without the edge."""
    host, device = pair(H200, "bert_base_bf16_b32")
    api.convert_pair(host, device, tmp_path / "a.0.et", api.ConvertOptions(astra_sim=True, rank=0), rank=0)
    api.convert_pair(host, device, tmp_path / "r.0.et", api.ConvertOptions(), rank=0)
    for out, expected in (("a.0.et", True), ("r.0.et", False)):
        trace = read_et(tmp_path / out)
        copies = {
            i: node_id
            for i, (node_id, name) in enumerate(zip(trace.ids, trace.names, strict=True))
            if name.startswith(waits.DTOH_PREFIX)
        }
        assert len(copies) == 2  # is_nonzero at the step's start, item() before the optimizer
        waiting = [
            trace.names[i]
            for i in range(len(trace))
            if trace.cpu_ops[i] == CPU_OP_TRUE
            and set(trace.dependencies(i)[trace.ctrl_count[i] :]) & set(copies.values())
        ]
        if expected:
            assert "Optimizer.step#AdamW.step" in waiting and len(waiting) == 2, waiting
        else:
            assert waiting == []


# -- the host path's calibration ----------------------------------------------------------------
def test_host_path_reads_the_calibration_beside_its_host_trace(tmp_path: Path) -> None:
    host, device = pair(H100, "gpt2_base_bf16_b8")
    options = api.ConvertOptions(astra_sim=True, rank=0)
    done = api.convert_pair(host, device, tmp_path / "c.0.et", options, rank=0).conversion.overhead
    assert done is not None and done.model.source == "calibrated in the same run, gpt2_base_bf16_b8_rank0_overhead.json"
    alone = tmp_path / "alone"
    alone.mkdir()
    for trace in (host, device):  # the same traces without their calibration: measured in the trace
        shutil.copy(trace, alone / trace.name)
    model = api.convert_pair(
        alone / host.name, alone / device.name, tmp_path / "m.0.et", options, rank=0
    ).conversion.overhead
    assert model is not None and model.model.source.startswith("measured in the trace")


# -- a parent's own time over its children ------------------------------------------------------
def _cpu_durations(path: Path) -> dict[int, int]:
    trace = read_et(path)
    return {node_id: trace.durations[i] for i, node_id in enumerate(trace.ids) if trace.cpu_ops[i] == CPU_OP_TRUE}


@pytest.mark.slow  # four conversions of a 10,000-node capture
def test_host_path_spreads_a_parents_own_time_over_its_children(tmp_path: Path) -> None:
    """GPT-2 on the H100, host + Kineto: ``DistributedDataParallel.forward`` holds 12.6 ms of
    its own time (the Python between the forward's ops), which the reference's graph runs as one
    block before the forward's first op. With ``--astra-sim`` and the profiler's time taken out,
    each parent keeps 1 us and its children get the rest: the host's time is the same, and the
    calibration no longer needs more per op than the profiler costs (49.9 us before).
    ``--tracing-overhead none`` keeps every traced duration where it was."""
    host, device = pair(H100, "gpt2_base_bf16_b32")
    api.convert_pair(host, device, tmp_path / "r.0.et", api.ConvertOptions(), rank=0)
    nothing = api.ConvertOptions(astra_sim=True, rank=0, tracing_overhead=0.0)  # the spread alone
    api.convert_pair(host, device, tmp_path / "a.0.et", nothing, rank=0)
    kept = api.ConvertOptions(astra_sim=True, rank=0, tracing_overhead="none")
    api.convert_pair(host, device, tmp_path / "n.0.et", kept, rank=0)
    reference, spread, traced = (_cpu_durations(tmp_path / f"{n}.0.et") for n in "ran")
    assert traced == {node: reference[node] for node in traced}
    assert sum(spread.values()) == sum(reference[node] for node in spread)  # the host's time is the same
    trace = read_et(tmp_path / "a.0.et")
    forward = trace.ids[trace.names.index("DistributedDataParallel.forward")]
    assert reference[forward] > 12_000 and spread[forward] == 1
    moved = sum(1 for node, duration in spread.items() if duration != reference[node])
    assert moved > 1_000  # every parent with time of its own, and its children
    calibrated = api.convert_pair(
        host, device, tmp_path / "c.0.et", api.ConvertOptions(astra_sim=True, rank=0), rank=0
    ).conversion.overhead
    assert calibrated is not None and "calibrated in the same run" in calibrated.model.source
    assert calibrated.model.per_op_us < 20  # bench.gpu.overhead: 16.1-19.6 us an op on this H100
