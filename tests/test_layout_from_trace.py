"""The layout from the trace (issue 37, goal 1) and layout files checked against the capture
(issue 40, problem 2).

``scale`` without a layout file recognises FSDP from the collectives and scales it as FSDP (a
user's own FSDP2 capture, ``own_fsdp2_np{2,4}``: 2 -> 4 equals the real 4-rank capture rank by
rank); what the trace cannot settle (pipeline, tensor x data, HSDP, expert parallelism, gathers
without scatters) is refused with the option to give (``layout``), and with it scales as the real
job (``tests/data/layouts``' captures with their layout files taken away); a layout file that
contradicts the capture, or has an unknown ``dp_mode``, is refused instead of trusted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from chakra_convert_fast.converter import api
from chakra_convert_fast.converter.errors import ConverterError

from .clirun import assert_one_error, run_cli
from .test_layouts import coll, comm, real_groups
from .test_scale import collectives, node, write_rank
from .traces import REAL_TRACES_DIR

LAYOUTS = Path(__file__).parent / "data" / "layouts"
OWN = REAL_TRACES_DIR


@pytest.fixture(scope="module")
def own_fsdp(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The user's own FSDP2 job on 2 and on 4 ranks, each through ``convert-all --astra-sim``."""
    out = tmp_path_factory.mktemp("own_fsdp")
    jobs = {}
    for n in (2, 4):
        done = run_cli("convert-all", OWN / f"own_fsdp2_np{n}", out / f"np{n}", "--astra-sim", "-j", "1", "-q")
        assert done.returncode == 0, done.stderr
        jobs[n] = out / f"np{n}" / "trace"
    return jobs


@pytest.mark.slow
def test_users_own_fsdp2_capture_scales_like_the_real_job(own_fsdp: dict[int, Path], tmp_path: Path) -> None:
    out = tmp_path / "four"
    done = run_cli("scale", own_fsdp[2], out, "--ranks", "4")
    assert done.returncode == 0, done.stderr
    assert "layout recognised from the trace" in done.stderr and "FSDP" in done.stderr
    compared = 0
    for r in range(4):
        mine, real = collectives(f"{out}.{r}.et"), collectives(f"{own_fsdp[4]}.{r}.et")
        assert mine == real, r
        compared += len(mine)
    assert compared == 4 * 8  # 5 all-gathers, 3 reduce-scatters a rank
    assert [c[2] for c in collectives(f"{own_fsdp[2]}.0.et")][:2] == [8320, 8384]  # the shards halve:
    assert [c[2] for c in collectives(f"{out}.0.et")][:2] == [4160, 4192]
    assert json.loads(Path(f"{out}.layout.json").read_text())["dp_mode"] == "fsdp"


def test_fsdp_is_scaled_as_ddp_only_when_asked_and_then_it_says_so(own_fsdp: dict[int, Path], tmp_path: Path) -> None:
    result = api.scale(own_fsdp[2], tmp_path / "ddp", 4, layout="ddp")
    assert result.note is not None and result.note.startswith("layout ddp (given; the trace shows fsdp")
    assert [c[2] for c in collectives(f"{tmp_path / 'ddp'}.0.et")][:2] == [8320, 8384]  # every byte kept


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "small", "spec", "refusal"),
    [
        ("tp2ddp", 4, "ddp,tp=2", "sub-groups of two families"),
        ("pp2", 4, "ddp,pp=2", "point-to-point (pipeline) peers cannot be scaled"),
        ("tp2fsdp", 4, "fsdp,tp=2", "FSDP x tensor parallelism"),
    ],
)
def test_what_the_trace_cannot_settle_is_refused_and_layout_scales_it(
    tmp_path: Path, case: str, small: int, spec: str, refusal: str
) -> None:
    source = LAYOUTS / f"{case}_np{small}"
    job = tmp_path / "in"
    job.mkdir()
    for path in source.iterdir():
        if path.name != "job.layout.json":  # a user's capture: no layout file
            shutil.copy(path, job / path.name)
    done = run_cli("scale", job / "job", tmp_path / "refused" / "x", "--ranks", "8")
    assert_one_error(done, refusal, "the trace alone cannot lay out", "--layout")
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "out" / "job"
    result = api.scale(job / "job", out, 8, layout=spec)
    assert result.note is not None and result.note.startswith(f"layout {spec} (given; the trace shows")
    real = LAYOUTS / f"{case}_np8" / "job"
    real_g = real_groups(real)
    for rank in range(8):
        mine, theirs = comm(f"{out}.{rank}.et", result.comm_groups), comm(f"{real}.{rank}.et", real_g)
        if spec.startswith("fsdp"):  # without the layout file's units, a shard is DP/D of the captured one:
            # exact where each parameter's rows divide the degrees, FSDP's padding apart otherwise (< 0.1%)
            assert [m[:2] + m[3:] for m in mine] == [t[:2] + t[3:] for t in theirs], rank
            assert all(abs(m[2] - t[2]) <= t[2] / 1000 for m, t in zip(mine, theirs, strict=True)), rank
        else:
            assert mine == theirs, rank


def test_chakra_profile_fsdp_without_its_layout_file_is_recognised(tmp_path: Path) -> None:
    job = tmp_path / "in"
    job.mkdir()
    for path in (LAYOUTS / "fsdp_np2").glob("job.[0-9].et"):
        shutil.copy(path, job / path.name)
    result = api.scale(job / "job", tmp_path / "out" / "job", 8)
    assert result.layout is not None and "fsdp" in result.layout
    assert result.note is not None and "FSDP" in result.note


def _job(folder: Path, per_rank: list[pb.Node], ranks: int = 2, groups: dict[str, list[int]] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        write_rank(folder / f"job.{rank}.et", per_rank)
    (folder / "job.comm_group.json").write_text(json.dumps(groups or {}))
    return folder / "job"


@pytest.mark.parametrize(
    ("nodes", "groups", "message"),
    [
        (
            [node(1), coll(2, pb.ALL_TO_ALL, 512, "1", (1,))],
            {"1": [0, 1], "2": [2, 3]},
            "all-to-all on sub-group(s) 1: expert parallelism in expert groups",
        ),
        ([node(1), coll(2, pb.ALL_GATHER, 512, "0", (1,))], None, "all-gathers or reduce-scatters without the other"),
        (
            [
                node(1),
                coll(2, pb.ALL_GATHER, 512, "1", (1,)),
                coll(3, pb.REDUCE_SCATTER, 1024, "1", (2,)),
                coll(4, pb.ALL_REDUCE, 512, "2", (3,)),
            ],
            {"1": [0, 1], "2": [0, 2]},
            "HSDP (sharded within, replicated across)",
        ),
    ],
)
def test_unsettled_layouts_are_refused(
    tmp_path: Path, nodes: list[pb.Node], groups: dict[str, list[int]] | None, message: str
) -> None:
    job = _job(tmp_path / "in", nodes, 4 if groups else 2, groups)
    with pytest.raises(ConverterError, match="the trace alone cannot lay out") as caught:
        api.scale(job, tmp_path / "out" / "x", 8)
    assert message in str(caught.value) and "layout" in str(caught.value.hint)
    assert not (tmp_path / "out").exists()


def test_an_all_to_all_over_every_rank_keeps_its_bytes_and_says_so(tmp_path: Path) -> None:
    job = _job(tmp_path / "in", [node(1), coll(2, pb.ALL_TO_ALL, 512, "0", (1,))])
    result = api.scale(job, tmp_path / "out" / "x", 8)
    assert result.note is not None and result.note.startswith("layout from the trace: all-to-all over every rank")
    assert collectives(f"{tmp_path / 'out' / 'x'}.7.et") == [("ALL_TO_ALL", "0", 512)]


@pytest.mark.slow
def test_a_bad_layout_spec_is_a_usage_error(tmp_path: Path) -> None:
    job = _job(tmp_path / "in", [node(1), coll(2, pb.ALL_REDUCE, 64, "0", (1,))])
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "4", "--layout", "zero2")
    assert_one_error(done, "--layout 'zero2': write ddp or fsdp", status=2)
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "4", "--layout", "ddp,tp=4")
    assert_one_error(done, "captured ranks are not a multiple of tp x pp = 4", status=2)


# -- issue 40, problem 2: a layout file that contradicts the capture is refused -----------------------
def _with_layout(tmp_path: Path, case: str, change: dict[str, object]) -> Path:
    job = tmp_path / "in"
    shutil.copytree(LAYOUTS / case, job)
    layout = json.loads((job / "job.layout.json").read_text())
    for key, value in change.items():
        if key == "swap":  # every rank's tp and dp groups exchanged
            for rank in layout["ranks"]:
                rank["tp"], rank["dp"] = rank["dp"], rank["tp"]
        else:
            layout[key] = value
    (job / "job.layout.json").write_text(json.dumps(layout))
    return job / "job"


@pytest.mark.parametrize(
    ("case", "change", "message"),
    [
        ("fsdp_np2", {"dp_mode": "ddp"}, "dp_mode is ddp, but rank 0's data-parallel group carries all-gathers"),
        ("tp2ddp_np4", {"dp_mode": "fsdp"}, "dp_mode is fsdp, but rank 0's data-parallel group carries no"),
        ("fsdp_np2", {"dp_mode": "zero2"}, "dp_mode 'zero2': a layout file's dp_mode is ddp or fsdp"),
        ("tp2ddp_np4", {"swap": True}, "the layout file contradicts the capture"),
    ],
)
def test_a_layout_file_that_contradicts_the_capture_is_refused(
    tmp_path: Path, case: str, change: dict[str, object], message: str
) -> None:
    job = _with_layout(tmp_path, case, change)
    done = run_cli("scale", job, tmp_path / "out" / "x", "--ranks", "8")
    assert_one_error(done, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # 14 jobs scaled: seconds each
@pytest.mark.parametrize("case", sorted(p.name for p in LAYOUTS.iterdir() if p.is_dir()))
def test_every_real_layout_file_agrees_with_its_capture(tmp_path: Path, case: str) -> None:
    size = int(case.rsplit("np", 1)[1])
    api.scale(LAYOUTS / case / "job", tmp_path / "x", size * 2)


def test_simulate_ranks_runs_the_recognised_fsdp_job(simulator: Path, own_fsdp: dict[int, Path]) -> None:
    result = api.simulate(own_fsdp[2], ranks=4)
    assert len(result.ranks) == 4  # every rank finished (ASTRA-sim's log)
    assert any(w.startswith("layout recognised from the trace") and "FSDP" in w for w in result.warnings)
