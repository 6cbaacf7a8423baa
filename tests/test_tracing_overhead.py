"""The profiler's own time taken out of the host timeline (``converter/overhead.py``,
``docs/overhead.md``): the model, where its figure comes from (the user's, a calibration beside
the trace, the default model), both front ends, the one-line message, and the options; on the
committed H200 captures and CPU captures."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api, overhead
from chakra_convert_fast.converter.errors import OptionError, TraceContentError
from chakra_convert_fast.converter.et.decode import CPU_OP_TRUE, EtTrace, read_et

from .clirun import assert_one_error, run_cli
from .traces import REAL_TRACES_DIR

GPU = REAL_TRACES_DIR / "gpu_h200"
CPU_PAIR = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
SMALL = "kineto_gpt2_base_fp32_b4"  # the smallest H200 capture
HOST_AND_KINETO = "gpt2_base_bf16_b8"


def device(name: str) -> Path:
    return GPU / name / f"{name}_rank0_device.json.gz"


def calibration(name: str) -> dict[str, float]:
    data: dict[str, float] = json.loads((GPU / name / f"{name}_rank0_overhead.json").read_text())
    return data


def split(trace: EtTrace) -> tuple[int, Counter[tuple[str, int]]]:
    """(the CPU ops' summed duration, the other nodes' (name, duration) multiset)."""
    cpu = sum(d for d, c in zip(trace.durations, trace.cpu_ops, strict=True) if c == CPU_OP_TRUE)
    others = Counter(
        (n, d) for n, d, c in zip(trace.names, trace.durations, trace.cpu_ops, strict=True) if c != CPU_OP_TRUE
    )
    return cpu, others


# -- the model ----------------------------------------------------------------------------------
def test_parse_takes_auto_none_and_microseconds() -> None:
    assert overhead.parse("auto") == "auto" and overhead.parse("NONE") == "none"
    assert overhead.parse("12.5") == 12.5 and overhead.parse("3us") == 3.0 and overhead.parse("0") == 0.0
    for bad in ("-1", "fast", "", "nan", "inf"):
        with pytest.raises(ValueError):
            overhead.parse(bad)


def test_debt_is_paid_in_order_down_to_zero_and_forgiven_at_a_wait() -> None:
    debt = overhead.Debt(overhead.Model(5.0, 1.0, "test"))
    debt.charge(runtime=False)
    assert debt.pay(3) == 0  # the op's own 3 us, 2 still owed
    assert debt.pay(10) == 8  # the gap after it pays the rest
    debt.charge(runtime=True)
    assert debt.pay(4) == 3
    debt.charge(runtime=False)
    debt.forgive()  # the host waited for the GPU: nothing is owed after it
    assert debt.pay(7) == 7
    removed = debt.removed
    assert (removed.ops, removed.calls, removed.removed_us, removed.host_us) == (2, 1, 6, 24)


def test_a_calibration_spreads_the_measured_difference_over_the_ops() -> None:
    phases = ["wait"] * 3 + ["warmup", "active", "untraced"]
    found = overhead.calibration(0, [0.5, 0.040, 0.042, 0.080, 0.200, 0.041], phases)
    assert found is not None
    assert (found["traced_step_us"], found["untraced_step_us"], found["untraced_steps"]) == (200000.0, 41000.0, 3)
    assert overhead.calibration(0, [0.1, 0.2], ["wait", "wait"]) is None  # nothing traced
    path = Path("out/gpt2_rank3_device.json.gz")
    assert overhead.calibration_path(path) == Path("out/gpt2_rank3_overhead.json")
    assert overhead.calibration_path("rank0_device.json") is None  # not chakra-profile's names


# -- the Kineto front end -----------------------------------------------------------------------
@pytest.mark.slow
def test_kineto_default_takes_host_time_out_and_keeps_gpu_durations(tmp_path: Path) -> None:
    kept = api.convert_kineto(device(SMALL), tmp_path / "kept.0.et", tracing_overhead="none")
    assert kept.overhead is None
    source = tmp_path / f"{SMALL}_rank0_device.json.gz"  # no calibration beside it: the default model
    shutil.copy(device(SMALL), source)
    done = api.convert_kineto(source, tmp_path / "out.0.et")
    removed = done.overhead
    assert removed is not None and removed.model.source == "default model for Kineto alone"
    assert removed.model.per_op_us == overhead.KINETO_PER_OP_US == removed.model.per_call_us
    cpu_kept, others_kept = split(read_et(tmp_path / "kept.0.et"))
    cpu, others = split(read_et(tmp_path / "out.0.et"))
    assert others == others_kept  # every GPU and communication node as CUPTI timed it
    assert cpu_kept - cpu == removed.removed_us > 0 and removed.host_us <= cpu_kept
    assert removed.removed_us <= (removed.ops + removed.calls) * overhead.KINETO_PER_OP_US
    assert done.nodes == kept.nodes  # the same nodes and ids: compare and --ranks-as match them


@pytest.mark.parametrize("name", ["kineto_bert_base_bf16_b8", SMALL])
def test_kineto_calibration_beside_the_trace_is_used(name: str, tmp_path: Path) -> None:
    done = api.convert_kineto(device(name), tmp_path / "out.0.et")
    removed = done.overhead
    assert removed is not None and f"{name}_rank0_overhead.json" in removed.model.source
    c = calibration(name)
    assert removed.model.untraced_us == c["untraced_step_us"]
    if name == SMALL:  # GPU-bound: the traced graph's step is the untraced one already
        assert removed.removed_us == 0
        return
    # the per-op cost that brings the step down to the untraced one: at least the difference of
    # host time (what a node gives up comes off the step's critical path at most once)
    assert removed.removed_us >= c["traced_step_us"] - c["untraced_step_us"] - 2
    assert removed.model.per_op_us > 0


@pytest.mark.slow
def test_the_users_figure_wins_over_a_calibration(tmp_path: Path) -> None:
    done = api.convert_kineto(device(SMALL), tmp_path / "out.0.et", tracing_overhead=1.5)
    assert done.overhead is not None and done.overhead.model.source == "--tracing-overhead"
    assert done.overhead.model.per_op_us == 1.5 == done.overhead.model.per_call_us


@pytest.mark.slow
def test_an_unreadable_calibration_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "job_rank0_device.json.gz"
    shutil.copy(device(SMALL), source)
    (tmp_path / "job_rank0_overhead.json").write_text('{"schema": "something else"}')
    with pytest.raises(TraceContentError, match="not a tracing-overhead calibration"):
        api.convert_kineto(source, tmp_path / "out.0.et")
    assert not (tmp_path / "out.0.et").exists()
    done = run_cli("convert", source, tmp_path / "out.0.et")
    assert_one_error(done, "job_rank0_overhead.json", "not a tracing-overhead calibration")
    assert run_cli("convert", source, tmp_path / "out.0.et", "--tracing-overhead", "none").returncode == 0


# -- the host path ------------------------------------------------------------------------------
def _pair(tmp_path: Path, options: api.ConvertOptions, name: str = "out") -> api.PairResult:
    host, dev = CPU_PAIR / "rank0_host.json.gz", CPU_PAIR / "rank0_device.json.gz"
    return api.convert_pair(host, dev, tmp_path / f"{name}.0.et", options, rank=0)


@pytest.mark.slow
def test_host_path_with_astra_sim_takes_host_time_out(tmp_path: Path) -> None:
    kept = _pair(tmp_path, api.ConvertOptions(astra_sim=True, rank=0, tracing_overhead="none"), "kept")
    done = _pair(tmp_path, api.ConvertOptions(astra_sim=True, rank=0))
    assert kept.conversion.overhead is None
    removed = done.conversion.overhead
    assert removed is not None and removed.model.source == "default model for host trace + Kineto, record_shapes"
    cpu_kept, others_kept = split(read_et(tmp_path / "kept.0.et"))
    cpu, others = split(read_et(tmp_path / "out.0.et"))
    assert others == others_kept  # GPU kernels and communication nodes keep their durations
    assert cpu_kept - cpu == removed.removed_us > 0
    assert done.conversion.nodes_written == kept.conversion.nodes_written  # no node is taken out here


def test_plain_convert_keeps_every_traced_duration(tmp_path: Path) -> None:
    """The reference's output (no --astra-sim) is left alone: the parity tests pin its bytes."""
    done = _pair(tmp_path, api.ConvertOptions())
    assert done.conversion.overhead is None
    with pytest.raises(OptionError, match="`tracing_overhead` needs `astra_sim`"):
        api.ConvertOptions(tracing_overhead=3.0)
    with pytest.raises(OptionError, match="tracing_overhead"):
        api.ConvertOptions(astra_sim=True, tracing_overhead="fast")
    with pytest.raises(OptionError, match="tracing_overhead"):
        api.ConvertOptions(astra_sim=True, tracing_overhead=-1.0)


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.slow
def test_the_conversion_says_in_one_line_what_it_removed(tmp_path: Path) -> None:
    done = run_cli("convert", device(SMALL), tmp_path / "out.0.et")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "tracing overhead:" in line]
    assert len(lines) == 1 and "removed" in lines[0] and "calibrated in the same run" in lines[0], done.stderr
    kept = run_cli("convert", device(SMALL), tmp_path / "kept.0.et", "--tracing-overhead", "none")
    assert kept.returncode == 0 and "tracing overhead" not in kept.stderr
    own = run_cli("convert", device(SMALL), tmp_path / "own.0.et", "--tracing-overhead", "1.5")
    assert "runtime calls x 1.5 us each; --tracing-overhead)" in own.stderr, own.stderr


@pytest.mark.slow
def test_options_refuse_what_cannot_apply(tmp_path: Path) -> None:
    host, dev = CPU_PAIR / "rank0_host.json.gz", CPU_PAIR / "rank0_device.json.gz"
    bad = run_cli("convert", device(SMALL), tmp_path / "x.0.et", "--tracing-overhead", "fast")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "error: argument --tracing-overhead: 'fast'" in bad.stderr.splitlines()[-1]
    plain = run_cli("convert", "--host", host, "--device", dev, tmp_path / "y.0.et", "--tracing-overhead", "3")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert "--tracing-overhead" in plain.stderr.splitlines()[-1] and "--astra-sim" in plain.stderr, plain.stderr
    assert not (tmp_path / "x.0.et").exists() and not (tmp_path / "y.0.et").exists()


@pytest.mark.slow
def test_convert_all_reports_what_it_removed(tmp_path: Path) -> None:
    done = run_cli("convert-all", CPU_PAIR, tmp_path / "out", "--astra-sim", "-j", "1")
    assert done.returncode == 0, done.stderr
    assert "rank 0: tracing overhead: removed" in done.stderr, done.stderr
    assert "1 other rank(s) likewise" in done.stderr


@pytest.mark.slow
def test_chakra_profile_conversion_records_what_it_removed(tmp_path: Path) -> None:
    """``chakra-profile --convert`` keeps the line in the rank's summary (``et.tracing_overhead``)."""
    from chakra_convert_fast.profiler import convert

    info = convert.convert_rank(None, device(SMALL), tmp_path / "t.0.et", 0, "fast")
    assert str(info["tracing_overhead"]).startswith("tracing overhead: removed")
    host, dev = CPU_PAIR / "rank0_host.json.gz", CPU_PAIR / "rank0_device.json.gz"
    info = convert.convert_rank(host, dev, tmp_path / "p.0.et", 0, "fast")
    assert "default model for host trace + Kineto" in str(info["tracing_overhead"])
    info = convert.convert_rank(host, dev, tmp_path / "r.0.et", 0, "fast", astra_sim=False)
    assert info["tracing_overhead"] is None  # the reference's bytes
