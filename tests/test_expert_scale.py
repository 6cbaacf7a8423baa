"""``scale`` of an expert-parallel job (``chakra-profile --ep``) against real captures of the bigger
job (``tests/data/traces/moe_ep``, PROVENANCE.md there): 2 -> 4 and 4 -> 8 ranks, rank by rank."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chakra_convert_fast.converter import api

from .clirun import assert_one_error, run_cli
from .test_scale import collectives
from .traces import REAL_TRACES_DIR

MOE = REAL_TRACES_DIR / "moe_ep"
ROW_BYTES = 64 * 4  # hidden 64, float32: one dispatched row
CASES = [("mixtral_tiny_np2", "mixtral_tiny_np4"), ("mixtral_e8_np4", "mixtral_e8_np8")]


def _return_positions(prefix: Path) -> list[int]:
    """The positions (among the rank's collectives) of the all-to-alls that return rows: the second
    of each pair with splits (the combine, the dispatch's backward). Rank 0's, as every rank's."""
    found = collectives(f"{prefix}.0.et")
    a2a = [i for i, c in enumerate(found) if c[0] == "ALL_TO_ALL" and c[2] != 8 * _experts(prefix)]
    return a2a[1::2]


def _experts(prefix: Path) -> int:
    return int(json.loads(Path(f"{prefix}.layout.json").read_text())["moe"]["experts"])


def _spread(prefix: Path) -> list[float]:
    """Per MoE layer, the real job's own step-to-step spread of its busiest rank's rows over the mean
    (max - min over every forward of the run, over their mean): what routing alone moves."""
    forwards = json.loads(Path(f"{prefix}.layout.json").read_text())["moe"]["imbalance"]["per_forward"]
    out = []
    for layer in sorted({f["layer"] for f in forwards}):
        ratios = [f["rank_max_over_mean"] for f in forwards if f["layer"] == layer]
        out.append((max(ratios) - min(ratios)) / (sum(ratios) / len(ratios)))
    return out


def _layer(pair: int, layers: int) -> int:
    q = pair % (2 * layers)
    return q if q < layers else 2 * layers - 1 - q


@pytest.mark.parametrize(("captured", "real"), CASES)
def test_scaled_ep_job_equals_the_real_capture_rank_by_rank(tmp_path: Path, captured: str, real: str) -> None:
    ranks = int(real.rsplit("np", 1)[1])
    out = tmp_path / "scaled" / "job"
    result = api.scale(MOE / captured, out, ranks)
    assert result.layout is not None and result.layout.startswith(f"expert parallel {ranks // 2} -> {ranks}")
    returned = _return_positions(MOE / real)
    spread = _spread(MOE / real)
    assert len(returned) == 2 * len(spread)  # a forward and a backward pair per MoE layer
    before = collectives(f"{MOE / captured}.0.et")
    for r in range(ranks):
        mine, theirs = collectives(f"{out}.{r}.et"), collectives(f"{MOE / real}.{r}.et")
        assert [c[:2] for c in mine] == [c[:2] for c in theirs]  # the same collectives on the same groups
        for i, (m, t) in enumerate(zip(mine, theirs, strict=True)):
            if i not in returned:
                assert m == t, (r, i)  # counts, dispatches, the combines' gradients, DDP: the same bytes
                continue
            layer = _layer(returned.index(i), len(spread))
            assert m[2] % ROW_BYTES == 0
            assert abs(m[2] - t[2]) <= spread[layer] * t[2], (r, i, m[2], t[2], spread[layer])
            # the old rule (replicas keep the captured job's bytes) misses the real job by more
            assert abs(before[i][2] - t[2]) > spread[layer] * t[2], (r, i, before[i][2], t[2])
    layout = json.loads(Path(f"{out}.layout.json").read_text())
    assert (layout["ep"], layout["dp"], layout["moe"]["scaled"]["expert_load"]) == (ranks, ranks, "captured")


def test_balanced_and_a_ratio_size_the_returns_from_the_batch(tmp_path: Path) -> None:
    job = MOE / "mixtral_tiny_np2"
    returned = _return_positions(job)
    for load, rows in (("balanced", 512), (1.5, 768)):
        out = tmp_path / str(load) / "job"
        api.scale(job, out, 4, expert_load=load)
        found = collectives(f"{out}.3.et")
        assert {found[i][2] for i in returned} == {rows * ROW_BYTES}
        assert [c for i, c in enumerate(found) if i not in returned] == [
            c for i, c in enumerate(collectives(f"{job}.1.et")) if i not in returned
        ]


def test_a_scaled_ep_job_scales_again_and_at_its_own_size_keeps_its_bytes(tmp_path: Path) -> None:
    job = MOE / "mixtral_e8_np4"
    api.scale(job, tmp_path / "own" / "job", 4)
    for r in range(4):
        assert collectives(f"{tmp_path / 'own' / 'job'}.{r}.et") == collectives(f"{job}.{r}.et")
    api.scale(job, tmp_path / "a" / "job", 8)  # its layout file carries the routing on
    api.scale(tmp_path / "a" / "job", tmp_path / "b" / "job", 2)
    api.scale(job, tmp_path / "c" / "job", 2)
    assert collectives(f"{tmp_path / 'b' / 'job'}.1.et") == collectives(f"{tmp_path / 'c' / 'job'}.1.et")
    assert collectives(f"{tmp_path / 'c' / 'job'}.1.et") != collectives(f"{job}.1.et")  # 8 experts over 2


@pytest.mark.parametrize(
    ("args", "message", "status"),
    [
        (("--ranks", "3"), "the model's 4 experts do not split over 3 expert-parallel ranks", 2),
        (("--ranks", "8"), "the model's 4 experts do not split over 8 expert-parallel ranks", 2),
        (("--ranks", "4", "--expert-load", "0.5"), "--expert-load '0.5': write captured, balanced", 2),
        (("--ranks", "4", "--expert-load", "most"), "--expert-load 'most'", 2),
    ],
)
def test_what_no_real_ep_job_runs_is_refused(tmp_path: Path, args: tuple[str, ...], message: str, status: int) -> None:
    done = run_cli("scale", MOE / "mixtral_tiny_np2", tmp_path / "out" / "x", *args)
    assert_one_error(done, message, status=status)
    assert not (tmp_path / "out").exists()


def test_expert_load_on_a_job_without_experts_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "in"
    shutil.copytree(MOE, job)
    layout = json.loads((job / "mixtral_tiny_np2.layout.json").read_text())
    del layout["ep"]
    (job / "mixtral_tiny_np2.layout.json").write_text(json.dumps(layout))
    done = run_cli("scale", job / "mixtral_tiny_np2", tmp_path / "out" / "x", "-n", "4", "--expert-load", "balanced")
    assert_one_error(done, "is not an expert-parallel job", status=2)


def test_a_layout_file_without_routing_needs_an_expert_load(tmp_path: Path) -> None:
    job = tmp_path / "in"
    shutil.copytree(MOE, job)
    layout = json.loads((job / "mixtral_tiny_np2.layout.json").read_text())
    del layout["moe"]["imbalance"]
    (job / "mixtral_tiny_np2.layout.json").write_text(json.dumps(layout))
    done = run_cli("scale", job / "mixtral_tiny_np2", tmp_path / "out" / "x", "-n", "4")
    assert_one_error(done, "records no routing", "give --expert-load balanced")
    api.scale(job / "mixtral_tiny_np2", tmp_path / "ok" / "x", 4, expert_load="balanced")


def test_scaled_ep_jobs_pass_check_and_finish_in_astra_sim(simulator: Path, tmp_path: Path) -> None:
    for captured, real in CASES:
        ranks = int(real.rsplit("np", 1)[1])
        out = tmp_path / captured / "job"
        api.scale(MOE / captured, out, ranks)
        done = run_cli("check", *(f"{out}.{r}.et" for r in range(ranks)))
        assert done.returncode == 0, done.stderr
        result = api.simulate(out)
        assert len(result.ranks) == ranks  # one finished line per rank (ASTRA-sim's log)
    result = api.simulate(MOE / "mixtral_tiny_np2", ranks=4)  # simulate --ranks writes it by scale
    assert len(result.ranks) == 4


def _without_layout_file(tmp_path: Path, name: str) -> Path:
    """A user's own capture: the ranks of ``name`` and nothing beside them."""
    job = tmp_path / "own"
    job.mkdir(exist_ok=True)
    for path in MOE.glob(f"{name}.*.et"):
        shutil.copy(path, job)
    return job / name


def test_an_ep_trace_without_its_layout_file_is_recognised_and_scaled_by_its_ranks_loads(tmp_path: Path) -> None:
    job = _without_layout_file(tmp_path, "mixtral_tiny_np2")
    returned = _return_positions(MOE / "mixtral_tiny_np2")
    result = api.scale(job, tmp_path / "a" / "x", 4)
    assert result.note is not None and "expert parallelism over every rank (4 dispatch/combine" in result.note
    assert result.layout is not None and "the experts' count and loads not in the trace" in result.layout
    captured = collectives(f"{job}.0.et")
    # each captured rank's load shared evenly by the two ranks its experts go to: the busiest rank's
    # rows are the captured busiest rank's (a lower bound: the trace cannot tell its experts apart)
    assert collectives(f"{tmp_path / 'a' / 'x'}.2.et") == captured
    api.scale(job, tmp_path / "b" / "x", 4, expert_load=1.25)
    assert {collectives(f"{tmp_path / 'b' / 'x'}.1.et")[i][2] for i in returned} == {640 * ROW_BYTES}
    four = _without_layout_file(tmp_path, "mixtral_tiny_np4")
    api.scale(four, tmp_path / "c" / "x", 2)  # fewer ranks: the captured ranks' loads merged, exactly
    real_sends = json.loads(Path(f"{MOE / 'mixtral_tiny_np4'}.layout.json").read_text())["moe"]["imbalance"]
    layer0 = next(f for f in real_sends["per_forward"] if (f["layer"], f["forward"]) == (0, 3))["expert_rows"]
    share = max(layer0[0] + layer0[1], layer0[2] + layer0[3]) / sum(layer0)  # the busiest pair of ranks
    assert collectives(f"{tmp_path / 'c' / 'x'}.0.et")[returned[0]][2] == round(share * 2 * 512) * ROW_BYTES
    done = run_cli("scale", job, tmp_path / "d" / "x", "-n", "3")
    assert_one_error(done, "exchanges among 2 expert-parallel ranks", status=2)
