"""What a replay is held against (``converter/baseline.py``, ``simulate/measured.py``,
docs/overhead.md): a conversion that takes the profiler's time out records the traced step and,
where ``chakra-profile``'s calibration is beside the trace, the untraced one; ``simulate --replay``
holds the replay against the untraced step, shows the traced one beside it, and says in one line
when it can only hold it against the traced step. On the committed H200 captures
(``tests/data/traces/gpu_h200``: GPT-2 base bf16 batch 8, Kineto alone and host + Kineto, each
with its calibration)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api, baseline
from chakra_convert_fast.converter.et.decode import read_metadata
from chakra_convert_fast.converter.simulate import measured as steps

from .clirun import run_cli
from .traces import REAL_TRACES_DIR

GPU = REAL_TRACES_DIR / "gpu_h200"
KINETO = "kineto_gpt2_base_bf16_b8"  # host-bound: traced 65.3 ms, untraced 45.9 ms
HOST = "gpt2_base_bf16_b8"  # host + Kineto: traced 126.1 ms, untraced 37.7 ms


def calibration(name: str) -> dict[str, float]:
    data: dict[str, float] = json.loads((GPU / name / f"{name}_rank0_overhead.json").read_text())
    return data


def kineto_trace(name: str = KINETO) -> Path:
    return GPU / name / f"{name}_rank0_device.json.gz"


def without_calibration(name: str, into: Path) -> Path:
    """The capture's traces copied alone (no ``_overhead.json``, no summary): another tracer's."""
    into.mkdir(parents=True)
    for path in (GPU / name).glob("*.json.gz"):
        shutil.copy(path, into)
    return into


def note_of(path: Path) -> baseline.Baseline | None:
    return baseline.read(read_metadata(path))


# -- what the conversion records -------------------------------------------------------------------


def test_kineto_conversion_records_the_calibrations_untraced_step(tmp_path: Path) -> None:
    done = api.convert_kineto(kineto_trace(), tmp_path / "one.0.et")
    found = note_of(tmp_path / "one.0.et")
    assert found is not None and found.correction == baseline.CALIBRATED
    assert found.untraced_us == calibration(KINETO)["untraced_step_us"]
    assert found.traced_us == pytest.approx(done.measured_us, abs=0.1)  # the ProfilerStep span the file records
    assert done.overhead is not None and found.removed_us == pytest.approx(done.overhead.removed_us, abs=0.1)
    assert found.calibration == f"{KINETO}_rank0_overhead.json"


def test_kineto_conversion_says_which_correction(tmp_path: Path) -> None:
    """The traced durations kept (the calibration's untraced step still recorded, for the output to
    say), the user's figure, and the default model where no calibration is beside the trace."""
    api.convert_kineto(kineto_trace(), tmp_path / "none.0.et", tracing_overhead="none")
    kept = note_of(tmp_path / "none.0.et")
    assert kept is not None and kept.correction == baseline.NONE and not kept.removed and kept.removed_us == 0
    assert kept.untraced_us == calibration(KINETO)["untraced_step_us"]
    api.convert_kineto(kineto_trace(), tmp_path / "user.0.et", tracing_overhead=1.5)
    user = note_of(tmp_path / "user.0.et")
    assert user is not None and user.correction == baseline.USER and user.removed_us > 0
    alone = without_calibration(KINETO, tmp_path / "alone")
    api.convert_kineto(next(alone.glob("*.json.gz")), tmp_path / "default.0.et")
    default = note_of(tmp_path / "default.0.et")
    assert default is not None and default.correction == baseline.DEFAULT and default.untraced_us is None
    assert "default model" in default.source and default.removed_us > 0


def test_reference_output_carries_no_note(tmp_path: Path) -> None:
    """``convert`` without ``--astra-sim`` is the reference's bytes (the parity tests): no note."""
    api.convert(GPU / HOST / f"{HOST}_rank0_host.json.gz", tmp_path / "ref.et")
    assert baseline.BASELINE not in read_metadata(tmp_path / "ref.et")


def test_a_broken_note_claims_nothing() -> None:
    for text in ("{", "[]", '{"correction": "maybe"}', '{"correction": "none", "traced_us": -1}', 3):
        assert baseline.read({baseline.BASELINE: text}) is None
    assert baseline.read({}) is None


# -- how a step is judged ----------------------------------------------------------------------------


def _recorded(correction: str, untraced_us: float | None, traced_ns: int | None = 65_000_000) -> steps.Recorded:
    note = baseline.Baseline(correction, traced_ns / 1000 if traced_ns else None, untraced_us, 20_000.0, "x")
    return steps.Recorded(traced_ns, True, note)


def test_the_untraced_step_is_the_measure_where_the_time_was_taken_out() -> None:
    judged = steps.judge({0: _recorded(baseline.CALIBRATED, 45_000.0)}, [0, 1])
    assert judged[0].kind == steps.UNTRACED and judged[0].ns == 45_000_000 and judged[0].traced_ns == 65_000_000
    assert 1 not in judged and steps.note(judged) is None
    kept = steps.judge({0: _recorded(baseline.NONE, 45_000.0)}, [0])
    assert kept[0].kind == steps.TRACED and kept[0].ns == 65_000_000 and steps.note(kept) is None
    yours = steps.judge({0: _recorded(baseline.CALIBRATED, 45_000.0)}, [0, 1], 40_000_000)
    assert {r: (m.kind, m.ns) for r, m in yours.items()} == {0: ("yours", 40_000_000), 1: ("yours", 40_000_000)}


def test_only_the_traced_step_known_says_so() -> None:
    traced = steps.judge({0: _recorded(baseline.DEFAULT, None)}, [0])
    assert traced[0].kind == steps.TRACED and traced[0].ns == 65_000_000
    said = steps.note(traced) or ""
    assert said.startswith("the error is against the traced step") and "20.000 ms of profiler time removed" in said
    assert "--measured-ms" in said and "chakra-profile" in said
    nothing = steps.judge({0: _recorded(baseline.DEFAULT, None, traced_ns=None)}, [0])
    assert not nothing[0].ns and (steps.note(nothing) or "").startswith("no measured step")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--measured-ms", "0"), "argument --measured-ms: must be a number from 0.001"),
        (("--measured-ms", "-4"), "argument --measured-ms: must be a number from 0.001"),
        (("--measured-ms", "abc"), "argument --measured-ms: must be a number from 0.001"),
        (("--measured-ms", "nan"), "argument --measured-ms: must be a number from 0.001"),
        (("--measured-ms", "40", "--sweep", "ranks=2,4"), "--measured-ms is one job's step"),
    ],
)
def test_measured_ms_is_a_positive_number(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    done = run_cli("simulate", tmp_path / "job", "--replay", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert expected in done.stderr.splitlines()[-1], done.stderr


# -- the replay, in ASTRA-sim ------------------------------------------------------------------------


def _job(source: Path, work: Path, *options: str) -> Path:
    """``convert-all --astra-sim`` of a capture's folder, one rank scaled to two: the job's prefix."""
    done = run_cli("convert-all", source, work / "one", "--astra-sim", "-j", "1", *options)
    assert done.returncode == 0, done.stderr
    prefix = next((work / "one").glob("*.0.et")).name.removesuffix(".0.et")
    api.scale(work / "one" / prefix, work / "two" / prefix, 2)
    return work / "two" / prefix


def test_replay_is_held_against_the_untraced_step(simulator: Path, tmp_path: Path) -> None:
    """Kineto alone, calibrated: the table's measured column is the untraced step (within 1% of the
    replay), the traced step beside it; the JSON carries both."""
    prefix = _job(GPU / KINETO, tmp_path)
    done = run_cli("simulate", prefix, "--replay", "--json", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    untraced, traced = calibration(KINETO)["untraced_step_us"] / 1e3, 65.308
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "untraced (ms)" in line)
    assert lines[header].split() == ["rank", "untraced", "(ms)", "traced", "(ms)", "simulated", "(ms)", "error"]
    row = lines[header + 1].split()
    assert float(row[1]) == pytest.approx(untraced, abs=1e-3) and float(row[2]) == pytest.approx(traced, abs=1e-3)
    assert abs(float(row[4].rstrip("%"))) < 1.0
    assert lines[-1].startswith(f"measured step: {untraced:,.3f} ms, untraced") and f"traced {traced}" in lines[-1]
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["measured_as"] == "untraced" and result["measured_step_ns"] == round(untraced * 1e6)
    assert result["untraced_step_ns"] == round(untraced * 1e6) and result["traced_step_ns"] == round(traced * 1e6)
    assert result["tracing_overhead"]["correction"] == "calibrated" and result["measured_note"] is None
    assert abs(result["step_ns"] - result["measured_step_ns"]) / result["measured_step_ns"] < 0.01
    assert [r["measured_as"] for r in result["measured_per_rank"]] == ["untraced", "untraced"]


def test_host_path_replay_is_held_against_the_untraced_step(simulator: Path, tmp_path: Path) -> None:
    """Host + Kineto, calibrated: the reference's host path recorded no step at all; with
    ``--astra-sim`` it records the calibration's traced and untraced steps."""
    result = api.simulate(_job(GPU / HOST, tmp_path), api.SimulateOptions(replay=True))
    untraced = calibration(HOST)["untraced_step_us"] * 1000
    assert {m.kind for m in result.measured.values()} == {"untraced"}
    assert result.measured_ns == {0: round(untraced), 1: round(untraced)}
    assert all(m.traced_ns == round(calibration(HOST)["traced_step_us"] * 1000) for m in result.measured.values())
    assert abs(result.step_ns - untraced) / untraced < 0.01


def test_without_calibration_the_line_says_what_the_error_is(simulator: Path, tmp_path: Path) -> None:
    """The default model, no untraced step known: the error is against the traced step, and a line
    says so, with the time removed and what to do; ``--measured-ms`` gives the step to hold it
    against; ``--tracing-overhead none`` says the traced step is the right comparison."""
    prefix = _job(without_calibration(KINETO, tmp_path / "in"), tmp_path / "default")
    done = run_cli("simulate", prefix, "--replay", "--json", tmp_path / "d.json")
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("the error is against the traced step")]
    assert len(said) == 1 and "default model for Kineto alone" in said[0] and "--measured-ms" in said[0], done.stdout
    # the conversion's own estimate, and how sure it was: host-bound, the range holds the untraced step
    estimate = re.search(r"untraced step at ([\d.,]+) ms, uncertain: ([\d.,]+)-([\d.,]+) ms", said[0])
    assert estimate is not None, said[0]
    least, most = (float(estimate[i].replace(",", "")) for i in (2, 3))
    assert least <= calibration(KINETO)["untraced_step_us"] / 1e3 <= most
    result = json.loads((tmp_path / "d.json").read_text())
    assert result["measured_as"] == "traced" and result["untraced_step_ns"] is None
    assert result["measured_note"] == said[0] and result["tracing_overhead"]["correction"] == "default"
    untraced = calibration(KINETO)["untraced_step_us"] / 1e3
    yours = run_cli("simulate", prefix, "--replay", "--measured-ms", f"{untraced}")
    assert yours.returncode == 0, yours.stderr
    assert yours.stdout.splitlines()[-1].startswith(f"measured step: {untraced:,.3f} ms, yours (--measured-ms)")
    assert "the error is against the traced step" not in yours.stdout
    kept = run_cli("simulate", _job(GPU / KINETO, tmp_path / "none", "--tracing-overhead", "none"), "--replay")
    assert kept.returncode == 0, kept.stderr
    last = kept.stdout.splitlines()[-1]
    assert "the right comparison, --tracing-overhead none kept the traced durations" in last, last
    assert f"untraced {untraced:,.3f} ms" in last


def test_a_host_trace_without_calibration_says_its_own_estimate_in_a_replay_only(
    simulator: Path, tmp_path: Path
) -> None:
    """Host + Kineto without a calibration: the files record no step; a replay says so, with the
    conversion's own estimate of the untraced step and its range (which holds the step the job
    took untraced); a simulation that is no replay says nothing of it."""
    prefix = _job(without_calibration(HOST, tmp_path / "in"), tmp_path / "host")
    replayed = run_cli("simulate", prefix, "--replay")
    assert replayed.returncode == 0, replayed.stderr
    said = [line for line in replayed.stdout.splitlines() if line.startswith("no measured step")]
    assert len(said) == 1 and "measured in the trace" in said[0], replayed.stdout
    estimate = re.search(r"untraced step at ([\d.,]+) ms, uncertain: ([\d.,]+)-([\d.,]+) ms", said[0])
    assert estimate is not None, said[0]
    least, most = (float(estimate[i].replace(",", "")) for i in (2, 3))
    assert least <= calibration(HOST)["untraced_step_us"] / 1e3 <= most
    simulated = run_cli("simulate", prefix)
    assert simulated.returncode == 0, simulated.stderr
    assert "no measured step" not in simulated.stdout
