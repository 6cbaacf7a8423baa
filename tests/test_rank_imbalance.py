"""Rank imbalance said and chosen (``converter/ranks/imbalance.py``): ``simulate`` and ``scale`` say
in one line when the captured ranks differ in compute, and ``--ranks-as slowest|median`` replays
every rank with that rank's compute.

On chakra-profile's 2-rank CPU GPT-2 capture (``tests/data/traces/cpu_gpt2_ddp2``, Kineto traces
alone) with a synthetic wait: 60 ms added to one compute node of rank 1 before its first
collective, so rank 0 waits for it in the simulation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.et import wire
from chakra_convert_fast.converter.et.decode import read_et
from chakra_convert_fast.converter.ranks import imbalance
from chakra_convert_fast.converter.schema.chakra import NodeType

from .clirun import run_cli
from .traces import REAL_TRACES_DIR

CPU = REAL_TRACES_DIR / "cpu_gpt2_ddp2"
WAIT_US = 60_000


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The capture converted (Kineto alone), rank 1 given a 60 ms compute node before its first
    collective: ``JOB.0.et``, ``JOB.1.et``."""
    out = tmp_path_factory.mktemp("imbalance") / "job"
    for rank in (0, 1):
        api.convert_kineto(CPU / f"rank{rank}_device.json.gz", f"{out}.{rank}.et", rank=rank)
    records: list[bytes] = []
    trace = read_et(f"{out}.1.et", records=records)
    first_comm = next(r for r in range(len(trace)) if trace.types[r] == NodeType.COMM_COLL_NODE)
    row = max((r for r in range(first_comm) if trace.types[r] == NodeType.COMP_NODE), key=trace.durations.__getitem__)
    with open(f"{out}.1.et", "wb") as handle:
        handle.write(wire.delimited_message(records[0]))
        for r in range(len(trace)):
            record = records[r + 1]
            if r == row:
                record = imbalance.with_duration(record, trace.durations[r] + WAIT_US)
            handle.write(wire.delimited_message(record))
    return out


def _compute(path: str) -> int:
    return imbalance.compute_of(read_et(path))


@pytest.mark.slow
def test_imbalance_is_measured(job: Path) -> None:
    found = api.rank_imbalance(job)
    assert found.slowest == 1 and found.fastest == 0 and found.median == 0  # the lower median of two
    assert found.spread_us > WAIT_US // 2 and found.notable  # rank 0 was the slower by 17 ms before
    assert found.compute_us == (_compute(f"{job}.0.et"), _compute(f"{job}.1.et"))
    line = found.describe()
    assert "ranks differ in compute: rank 1" in line and "`ranks_as` slowest or median" in line
    assert not imbalance.Imbalance((100, 99)).notable and not imbalance.Imbalance((100,)).notable


@pytest.mark.parametrize(("how", "reference"), [("slowest", 1), ("median", 0)])
def test_ranks_as_gives_every_rank_the_reference_compute(job: Path, how: str, reference: int) -> None:
    """Every rank's compute nodes take the reference rank's durations (by name and occurrence); the
    communication nodes, names and dependencies stay each rank's own; the copy is removed after."""
    with imbalance.ranks_as(str(job), how) as evened:
        assert evened.reference == reference and evened.unmatched <= 2  # rank 1 has one more host gap
        wanted = _compute(f"{job}.{reference}.et")
        for rank in (0, 1):
            new, old = read_et(f"{evened.prefix}.{rank}.et"), read_et(f"{job}.{rank}.et")
            assert imbalance.compute_of(new) == wanted
            assert new.names == old.names and new.types == old.types and new.deps == old.deps
            for row in range(len(old)):
                if old.types[row] != NodeType.COMP_NODE:
                    assert new.durations[row] == old.durations[row]
        folder = os.path.dirname(evened.prefix)
    assert not os.path.exists(folder)


def test_simulate_says_the_wait_and_ranks_as_removes_it(simulator: Path, job: Path) -> None:
    captured = api.simulate(job)
    said = [w for w in captured.warnings if w.startswith("ranks differ in compute")]
    assert len(said) == 1 and "rank 0 spends" in said[0] and "waiting for peers" in said[0]
    waiting = captured.ranks[0].waiting_ns
    assert waiting >= (WAIT_US - 10_000) * 1000  # the synthetic wait, read from ASTRA-sim's log
    for how, reference in (("slowest", 1), ("median", 0)):
        evened = api.simulate(job, ranks_as=how)
        assert evened.prefix == str(job)
        # what waiting is left comes from where each rank's files put its collectives (its threads
        # interleave differently), not from compute: a sixth of the synthetic wait at most
        assert all(r.waiting_ns < waiting / 6 for r in evened.ranks)
        assert evened.ranks[0].step_ns == evened.ranks[1].step_ns
        compute_ns = _compute(f"{job}.{reference}.et") * 1000
        assert compute_ns <= evened.step_ns <= compute_ns * 1.02
        assert any(w.startswith(f"`ranks_as` {how}: every rank replayed") for w in evened.warnings)
    spread_ns = api.rank_imbalance(job).spread_us * 1000
    assert captured.step_ns - api.simulate(job, ranks_as="median").step_ns >= spread_ns * 0.99


def test_cli_says_it_in_one_line(simulator: Path, job: Path) -> None:
    done = run_cli("simulate", job)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ranks differ in compute" in line]
    assert len(said) == 1 and "--ranks-as slowest or median" in said[0]
    done = run_cli("simulate", job, "--ranks-as", "fastest")
    assert done.returncode == 2 and "--ranks-as" in done.stderr and "Traceback" not in done.stderr


def test_simulate_json_has_the_imbalance_facts(simulator: Path, job: Path, tmp_path: Path) -> None:
    """``simulate --json`` carries what the line says: each rank's compute, the slowest, fastest and
    median ranks, their spread, the rank that waits most and how much of its step, the line itself;
    the same figures as ``rank_imbalance`` and the per-rank results (from ASTRA-sim's log)."""
    out = tmp_path / "result.json"
    done = run_cli("simulate", job, "--json", out)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ranks differ in compute" in line]
    result = json.loads(out.read_text())
    facts, found = result["imbalance"], api.rank_imbalance(job)
    assert facts["compute_us"] == list(found.compute_us) and facts["spread_us"] == found.spread_us
    assert (facts["slowest_rank"], facts["fastest_rank"], facts["median_rank"]) == (1, 0, 0)
    assert facts["notable"] and facts["replicas"] and facts["ranks_as"] == "captured"
    assert facts["share"] == pytest.approx(found.share, abs=1e-6)
    waited = max(result["per_rank"], key=lambda r: r["waiting_ns"])
    assert facts["waiting"]["rank"] == waited["rank"] == 0
    assert facts["waiting"]["waiting_ns"] == waited["waiting_ns"] >= (WAIT_US - 10_000) * 1000
    assert facts["waiting"]["step_ns"] == waited["step_ns"]
    assert facts["waiting"]["share"] == pytest.approx(waited["waiting_ns"] / waited["step_ns"], abs=1e-6)
    # the line simulate printed (the library's JSON names parameters, the command line its flags)
    assert len(facts["lines"]) == 1 and facts["lines"][0].split(" (replay every")[0] in said[0]
    done = run_cli("simulate", job, "--json", "--ranks-as", "median")
    assert done.returncode == 0, done.stderr
    evened = json.loads(done.stdout)["imbalance"]
    assert evened["ranks_as"] == "median" and evened["compute_us"] == facts["compute_us"]
    assert evened["waiting"]["waiting_ns"] < facts["waiting"]["waiting_ns"] / 6
    assert any(line.startswith("`ranks_as` median: every rank replayed") for line in evened["lines"])


@pytest.mark.slow
def test_scale_says_it_and_scales_the_evened_job(job: Path, tmp_path: Path) -> None:
    done = run_cli("scale", job, tmp_path / "x4", "--ranks", "4")
    assert done.returncode == 0, done.stderr
    assert sum("ranks differ in compute" in line for line in done.stderr.splitlines()) == 1
    done = run_cli("scale", job, tmp_path / "s4", "--ranks", "4", "--ranks-as", "slowest")
    assert done.returncode == 0, done.stderr
    wanted = _compute(f"{job}.1.et")
    assert [_compute(f"{tmp_path}/s4.{r}.et") for r in range(4)] == [wanted] * 4
    assert sorted(os.listdir(tmp_path)) == sorted(
        [
            *(f"x4.{r}.et" for r in range(4)),
            *(f"s4.{r}.et" for r in range(4)),
            "x4.comm_group.json",
            "s4.comm_group.json",
        ]
    )


def test_scale_ranks_as_never_writes_over_the_capture(job: Path) -> None:
    before = [Path(f"{job}.{r}.et").read_bytes() for r in (0, 1)]
    done = run_cli("scale", job, job, "--ranks", "2", "--ranks-as", "median")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert [Path(f"{job}.{r}.et").read_bytes() for r in (0, 1)] == before


def test_with_duration_sets_or_adds_the_field(job: Path) -> None:
    """0 removes the field (as the encoder writes a zero duration), a value where there is none adds it."""
    records: list[bytes] = []
    trace = read_et(f"{job}.0.et", records=records)
    row = next(r for r in range(len(trace)) if trace.durations[r] > 0)
    zero = imbalance.with_duration(records[row + 1], 0)
    again = imbalance.with_duration(zero, 1234)
    assert len(zero) < len(records[row + 1]) and zero != again
    out = Path(f"{job}.check.et")
    for record, wanted in ((zero, 0), (again, 1234)):
        with open(out, "wb") as handle:
            handle.write(wire.delimited_message(records[0]))
            for r in range(len(trace)):
                handle.write(wire.delimited_message(record if r == row else records[r + 1]))
        new = read_et(out)
        assert new.durations[row] == wanted and new.names == trace.names and new.deps == trace.deps
    out.unlink()


def test_sweep_ranks_as_slowest(simulator: Path, job: Path, tmp_path: Path) -> None:
    """A sweep of the job evened out: every point's slowest rank waits (almost) nothing, the outputs
    go where they were asked for, and the line says the captured ranks differed."""
    out = tmp_path / "s"
    done = run_cli("simulate", job, "--sweep", "ranks=2,4", "--ranks-as", "slowest", "--out", out)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "ranks differ in compute" in line]
    assert len(said) == 1 and "(--ranks-as slowest)" in said[0]
    points = json.loads(out.with_suffix(".json").read_text())["points"]
    compute_ns = _compute(f"{job}.1.et") * 1000
    assert [p["ranks"] for p in points] == [2, 4]
    for point in points:
        assert compute_ns <= point["step_ns"] <= compute_ns * 1.02


def test_ranks_as_in_an_unwritable_work_dir_is_one_line(job: Path, tmp_path: Path) -> None:
    done = run_cli("simulate", job, "--ranks-as", "slowest", "--work-dir", tmp_path / "missing" / "dir")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "cannot make a folder for the job" in done.stderr


def test_layout_jobs_are_not_replicas(tmp_path: Path) -> None:
    """The ranks of a tensor x FSDP layout job do different work by design: never said to differ,
    and --ranks-as is refused (one line, exit 2), before anything runs."""
    job = Path(__file__).parent / "data" / "layouts" / "tp2fsdp_np4" / "job"
    found = api.rank_imbalance(job)
    assert not found.replicas and not found.notable and len(found.compute_us) == 4
    done = run_cli("scale", job, tmp_path / "x", "--ranks", "8", "--ranks-as", "slowest")
    assert done.returncode == 2 and "layout job" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not list(tmp_path.iterdir())
