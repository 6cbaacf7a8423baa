"""The profiler's cost per op measured in a host trace itself (``convert/selfmeasure.py``,
``overhead.measured``): the host path's figure where no calibration is beside the trace. On the
committed H200 and H100 captures; the replays against the untraced steps in the real ASTRA-sim
(the held-out ones: the H100's, the factor was chosen on the H200's)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api, overhead
from chakra_convert_fast.converter.et.decode import CPU_OP_TRUE, read_et

from .traces import REAL_TRACES_DIR

H200 = REAL_TRACES_DIR / "gpu_h200"
H100 = REAL_TRACES_DIR / "gpu_h100"


def uncalibrated(folder: Path, name: str, work: Path) -> tuple[Path, Path]:
    """The capture's host and Kineto traces, without the calibration beside them."""
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for kind in ("host", "device"):
        trace = folder / name / f"{name}_rank0_{kind}.json.gz"
        shutil.copy(trace, work / trace.name)
        out.append(work / trace.name)
    return out[0], out[1]


# -- the figure ---------------------------------------------------------------------------------
def test_too_few_wrappers_measure_nothing() -> None:
    assert overhead.measured({1: [10] * (overhead.MEASURED_MIN_SAMPLES - 1)}) is None
    assert overhead.measured({}) is None
    one = overhead.measured({1: [10] * overhead.MEASURED_MIN_SAMPLES})
    assert one is not None and one.per_op_us == pytest.approx(overhead.MEASURED_FACTOR * 10)
    assert one.by_thread is None and "10 us (50)" in one.source


def test_a_descheduled_wrapper_is_left_out_of_the_mean() -> None:
    """A loaded CPU host: 4-9 ms among 10 us wrappers is the thread descheduled, not the profiler."""
    samples = [10] * 98 + [4061, 8910]
    model = overhead.measured({1: samples}, factor=1.0)
    assert model is not None and model.per_op_us == pytest.approx(10)
    kept = [10] * 98 + [60, 90]  # within ten times the median: the profiler's tail, kept
    model = overhead.measured({1: kept}, factor=1.0)
    assert model is not None and model.per_op_us == pytest.approx(statistics.fmean(kept))


def test_each_thread_pays_its_own_figure() -> None:
    model = overhead.measured({1: [20] * 60, 2: [10] * 240, 3: [50] * 3}, factor=1.0)
    assert model is not None and model.by_thread is not None
    pooled = statistics.fmean([20] * 60 + [10] * 240 + [50] * 3)
    assert model.by_thread == {1: 20, 2: 10, 3: pytest.approx(pooled)}  # too few on 3: the figure of all
    assert "by thread: 10 us (240) and 20 us (60)" in model.source
    durations, removed = overhead.untrace([(100, overhead.OP)] * 3, model, costs=[20.0, 10.0, 20.0])
    assert durations == [80, 90, 80] and removed.removed_us == 50
    assert "x 10-20 us each, by thread" in removed.line()


# -- on real captures ---------------------------------------------------------------------------
@pytest.mark.slow  # a 10,000-node capture
def test_the_threads_that_paid_differently_are_measured_apart(tmp_path: Path) -> None:
    """BERT at batch 8 on the H200, host + Kineto: in that run the forward's thread paid about
    twice per op what the autograd engine's did (its wrappers: 21.9 and 11.7 us), which the same
    ops at batch 32 did not (13.8 and 11.2 us). Measured per thread, each op is charged its own."""
    host, device = uncalibrated(H200, "bert_base_bf16_b8", tmp_path / "in")
    options = api.ConvertOptions(astra_sim=True, rank=0)
    done = api.convert_pair(host, device, tmp_path / "m.0.et", options, rank=0).conversion.overhead
    assert done is not None and done.model.source.startswith("measured in the trace")
    assert done.model.by_thread is not None and len(done.model.by_thread) == 2
    low, high = sorted(done.model.by_thread.values())
    assert high > 1.6 * low
    assert "by thread" in done.line()
    traced = api.convert_pair(
        host, device, tmp_path / "n.0.et", api.ConvertOptions(astra_sim=True, rank=0, tracing_overhead="none"), rank=0
    )
    assert traced.conversion.overhead is None
    before = read_et(tmp_path / "n.0.et")
    after = read_et(tmp_path / "m.0.et")
    cpu = [i for i in range(len(before)) if before.cpu_ops[i] == CPU_OP_TRUE]
    assert sum(before.durations[i] for i in cpu) - sum(after.durations[i] for i in cpu) == pytest.approx(
        done.removed_us, rel=0.01
    )


@pytest.mark.slow
def test_a_cpu_capture_keeps_the_default_model(tmp_path: Path) -> None:
    """On a CPU the view-family ops' time is a third of what an op costs the profiler: not used."""
    folder = REAL_TRACES_DIR / "cpu_overhead"
    host, device = uncalibrated(folder, "gpt2_ddp", tmp_path / "in")
    done = api.convert_pair(host, device, tmp_path / "c.0.et", api.ConvertOptions(astra_sim=True, rank=0), rank=0)
    assert done.conversion.overhead is not None
    assert done.conversion.overhead.model.source.startswith("default model for host trace")


def _untraced_ms(folder: Path, name: str) -> float:
    summary = json.loads((folder / name / f"{name}_summary.json").read_text())
    return float(summary["step_time_s"]["untraced_median"]) * 1e3


@pytest.mark.parametrize(("folder", "name"), [(H100, "gpt2_base_bf16_b8"), (H200, "bert_base_bf16_b32")])
def test_an_uncalibrated_host_trace_replays_near_its_untraced_step(
    simulator: Path, folder: Path, name: str, tmp_path: Path
) -> None:
    """No calibration: the figure the trace measures of itself. GPT-2 at batch 8 on the H100 is
    held out (the factor was chosen on the H200's captures) and host-bound: its traced replay is
    2.3 times the untraced step."""
    uncalibrated(folder, name, tmp_path / "in")
    done = api.convert_all(tmp_path / "in", tmp_path / "one", api.ConvertOptions(astra_sim=True), jobs=1)
    assert not done.failed, [o.message for o in done.outcomes]
    removed = done.outcomes[0].overhead
    assert removed is not None and removed.model.source.startswith("measured in the trace")
    api.scale(tmp_path / "one" / done.prefix, tmp_path / "two" / done.prefix, 2)
    result = api.simulate(tmp_path / "two" / done.prefix, api.SimulateOptions(replay=True))
    measured = _untraced_ms(folder, name)
    assert abs(result.step_ns / 1e6 - measured) / measured < 0.05, (result.step_ns / 1e6, measured)


# -- how sure: the step within the figure's spread ----------------------------------------------
def test_a_host_bound_step_is_said_to_be_uncertain() -> None:
    """Ten ops of 10 us in a chain (the host is the step): 3 us per op takes 30 us off, and the
    step moves with the figure; beside a 200 us kernel (the GPU is the step) it does not."""
    timeline = [(10, overhead.OP)] * 10
    model = overhead.Model(3.0, 0.0, "test", spread=2.0)
    durations, removed = overhead.untrace(timeline, model, step=lambda d: float(sum(d)))
    assert durations == [7] * 10
    assert removed.step_us == (70.0, 40.0, 85.0)  # 6 us per op: 40; 1.5 us (whole us paid as owed): 85
    assert removed.uncertain()
    assert "uncertain: the step comes to 0.1 ms, 0.0-0.1 ms for 1.5-6 us per op" in removed.line()
    bound = overhead.untrace(timeline, model, step=lambda d: max(200.0, float(sum(d))))[1]
    assert bound.step_us == (200.0, 200.0, 200.0) and not bound.uncertain()
    assert "uncertain" not in bound.line()
    calibrated_or_yours = overhead.Model(3.0, 0.0, "--tracing-overhead")  # no spread: nothing said
    assert overhead.untrace(timeline, calibrated_or_yours, step=lambda d: float(sum(d)))[1].step_us is None


@pytest.mark.slow  # four Kineto conversions
@pytest.mark.parametrize(
    ("folder", "name", "uncertain"),
    [
        (H100, "kineto_gpt2_base_bf16_b8", True),  # host-bound: the default model is +37.8% off
        (H100, "bert_base_bf16_b8", True),
        (H200, "kineto_gpt2_base_bf16_b32", False),  # GPU-bound: any figure gives nearly the same step
        (H200, "gpt2_base_bf16_b32", False),
    ],
)
def test_the_range_said_holds_the_untraced_step(folder: Path, name: str, uncertain: bool, tmp_path: Path) -> None:
    """Without a calibration: where the step moves with the figure, the conversion says so, and the
    range it gives holds the step the job took untraced; where it does not, the estimate is
    within 3% of it."""
    work = tmp_path / "in"
    work.mkdir()
    device = folder / name / f"{name}_rank0_device.json.gz"
    shutil.copy(device, work / device.name)
    host = folder / name / f"{name}_rank0_host.json.gz"
    if host.exists():
        shutil.copy(host, work / host.name)
        options = api.ConvertOptions(astra_sim=True, rank=0)
        removed = api.convert_pair(work / host.name, work / device.name, tmp_path / "o.0.et", options, rank=0)
        done = removed.conversion.overhead
    else:
        done = api.convert_kineto(work / device.name, tmp_path / "o.0.et").overhead
    assert done is not None and done.step_us is not None
    at, least, most = (us / 1000 for us in done.step_us)
    measured = _untraced_ms(folder, name)
    assert done.uncertain() == uncertain
    if uncertain:
        assert least <= measured <= most, (least, measured, most)
        assert "uncertain: the step comes to" in done.line()
    else:
        assert abs(at - measured) / measured < 0.03 and "uncertain" not in done.line()
