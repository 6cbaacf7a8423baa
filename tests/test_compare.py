"""``compare A B`` (``converter/compare``): where the time of two runs of a job went differently.

A committed public trace against itself (nothing differs); the synthetic MoE job of
``tests/moe_trace.py`` against its own replay in ASTRA-sim (the difference is where the converter
moved it: the shared expert's stream); two simulated runs (a network what-if); the one-line
errors; the op classes; the waiting rule on a small named case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.compare import _waiting, union
from chakra_convert_fast.converter.compare.classes import op_class
from chakra_convert_fast.converter.compare.sides import Op, RankRun, Side

from . import moe_trace
from .clirun import run_cli
from .traces import REAL_TRACES_DIR

NCCL = REAL_TRACES_DIR / "kineto_public" / "hta_a100_nccl_rank0of2.json.gz"


def test_union() -> None:
    assert union([]) == 0
    assert union([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25


@pytest.mark.parametrize(
    ("name", "cpu", "comm", "expected"),
    [
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", False, True, "communication"),
        (moe_trace.GEMM, False, False, "GPU: GEMM"),
        ("void pytorch_flash::flash_fwd_kernel<...>", False, False, "GPU: attention"),
        (moe_trace.ADD, False, False, "GPU: elementwise"),
        ("Memcpy HtoD (Pageable -> Device)", False, False, "GPU: memcpy"),
        ("[host gap]", True, False, "host: idle and launch gaps"),
        ("cudaStreamSynchronize (wait)", True, False, "host: waiting for the GPU"),
        ("cudaLaunchKernel", True, False, "host: CUDA/HIP runtime"),
        ("aten::mm", True, False, "host: ops"),
        ("aten::mm", None, False, "host: ops"),  # where it ran not known: by the name
        (moe_trace.GEMM, None, False, "GPU: GEMM"),
    ],
)
def test_op_classes(name: str, cpu: bool | None, comm: bool, expected: str) -> None:
    assert op_class(name, cpu, comm) == expected


def test_waiting_for_peers_is_simulates_rule() -> None:
    """Rank 1 issues each collective 30 us after rank 0: rank 0 waits 30 us a collective (its ends
    come later), rank 1 nothing; transfer is the rest."""

    def run(rank: int, starts: list[float]) -> RankRun:
        ops = [Op("stream 9", "communication", "communication", "c", s, 100 + s + 10 * rank, True) for s in starts]
        return RankRun(rank, 500.0, ops)

    side = Side("x", "simulation", {0: run(0, [0, 200]), 1: run(1, [30, 230])})
    assert _waiting(side) == {0: 60.0, 1: 0.0}
    assert _waiting(Side("x", "trace", {0: run(0, [0])})) == {}


@pytest.mark.slow
def test_a_trace_against_itself_differs_nowhere(tmp_path: Path) -> None:
    result = api.compare(NCCL, NCCL, json_output=tmp_path / "d.json")
    assert result.a.kind == result.b.kind == "trace" and result.a.step == 6
    for rows in (*result.ranks.values(), result.lanes, result.classes, result.ops):
        for row in rows:
            assert row.diff in (None, 0.0), row
    assert {r.key for r in result.lanes} == {"CPU", "stream 7", "stream 40"}
    assert "communication" in {r.key for r in result.classes}
    document = json.loads((tmp_path / "d.json").read_text())
    step = document["per_rank"]["rank 0"][0]
    assert step["key"] == "step" and round(step["a_us"]) == round(step["b_us"]) == 224936 and step["diff_us"] == 0


@pytest.mark.slow
def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    done = run_cli("compare", tmp_path / "missing.json", NCCL)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1 and "no such file" in done.stderr
    done = run_cli("compare", NCCL, NCCL, "--rank", "3")
    assert done.returncode == 2 and "rank 3 is not on both sides" in done.stderr
    done = run_cli("compare", NCCL, NCCL, "--json", NCCL)
    assert done.returncode == 1 and "would overwrite the input" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"displayTimeUnit": "ns", "otherData": {"simulated": "x"},\n"traceEvents": [{"ph": "X"}]}')
    done = run_cli("compare", bad, NCCL, "--json", tmp_path / "out.json")
    assert done.returncode == 1 and "not one of a simulated node" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "out.json").exists()


@pytest.fixture(scope="module")
def moe_run(simulator: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The MoE job's traces, its replay's timeline, and a network run's timeline."""
    base = tmp_path_factory.mktemp("compare")
    traces = moe_trace.write_moe_job(base / "in")[0].parent
    # the traced durations: the replay is held against the trace (the default would take the
    # profiler's time out of the host timeline, docs/overhead.md)
    done = run_cli("convert-all", traces, base / "et", "-j", "1", "-q", "--tracing-overhead", "none")
    assert done.returncode == 0, done.stderr
    api.simulate(base / "et" / "trace", api.SimulateOptions(replay=True), timeline=base / "replay.json")
    api.simulate(base / "et" / "trace", api.SimulateOptions(topology="Switch"), timeline=base / "switch.json")
    return traces, base / "replay.json", base / "switch.json"


def test_replay_against_its_trace(moe_run: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Every simulated node is the traced op it replays (no note); the busy times of CPU, GPU compute
    and communication are the trace's; what differs is the shared expert's stream, whose kernels the
    converter wrote to end when they ended (docs/kineto.md), and the GEMMs on it."""
    traces, replay, _ = moe_run
    result = api.compare(traces, replay, json_output=tmp_path / "c.json", plot=tmp_path / "c.png")
    assert not result.notes and sorted(result.a.ranks) == sorted(result.b.ranks) == [0, 1]
    rows = {r.key: r for r in result.ranks["rank 0"]}
    assert abs(rows["step"].ratio or 0) < 0.05
    for key in ("CPU", "GPU compute", "communication"):
        assert rows[key].a and abs(rows[key].ratio or 0) < 0.01, key
    assert rows["communication waiting for peers"].a is not None  # two ranks: the split is known
    assert result.lanes[0].key == f"stream {moe_trace.SIDE}" and (result.lanes[0].diff or 0) < -500
    assert result.classes[0].key == "GPU: GEMM" and result.ops[0].key == moe_trace.GEMM
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "c.json").read_text())["per_lane"][0]["key"] == f"stream {moe_trace.SIDE}"


def test_two_simulated_runs(moe_run: tuple[Path, Path, Path]) -> None:
    """A network what-if against the replay: with no trace to name the nodes, the simulator's own
    kinds are the lanes; the difference is in communication, not compute."""
    _, replay, switch = moe_run
    done = run_cli("compare", replay, switch)
    assert done.returncode == 0, done.stderr
    assert "B: " in done.stdout and "per op class" in done.stdout
    result = api.compare(replay, switch)
    lanes = {r.key: r for r in result.lanes}
    assert set(lanes) == {"compute", "communication"}
    assert lanes["compute"].diff == 0 and lanes["communication"].diff != 0
