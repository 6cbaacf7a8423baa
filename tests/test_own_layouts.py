"""A user's own DDP, TP and TP x FSDP2 jobs (issue 37, goal 5): traced the way users trace (no
``chakra-profile``, no layout file; ``tests/capture_own_fsdp.py``, gloo, CPU), scaled to a bigger job
and compared rank by rank (kind, the group's ranks, bytes) with the real capture of that job
(``tests/data/traces/own_layouts``, its PROVENANCE.md).

gloo's c10d collectives (DDP's, FSDP2's) record no process group; DTensor's tensor-parallel ones
name theirs. So DDP is recognised from the trace; a job whose group file lists groups no collective
names is refused with ``--layout`` to give, and with it scales as the real job.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chakra.schema.protobuf import et_def_pb2 as pb

from bench.own_layouts import MINE, load, per_rank, truth
from chakra_convert_fast.converter import api

from .clirun import assert_one_error, run_cli
from .test_layouts import coll
from .test_scale import node, write_rank


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each captured job through ``convert-all --astra-sim``: name -> its PREFIX."""
    out = tmp_path_factory.mktemp("own_layouts")
    jobs = {}
    for name in ("ddp_np2", "tp_np2", "tp_np4", "2d_np4", "hsdp_np4"):
        done = run_cli("convert-all", MINE / name, out / name, "--astra-sim", "-j", "1", "-q")
        assert done.returncode == 0, done.stderr
        jobs[name] = out / name / "trace"
    return jobs


def real(name: str, tmp_path: Path) -> list[list[tuple[str, tuple[int, ...], int]]]:
    return load(MINE / "real" / f"{name}.json", tmp_path / "real")


@pytest.mark.slow
def test_users_own_ddp_is_recognised_and_scales_like_the_real_job(own: dict[str, Path], tmp_path: Path) -> None:
    done = run_cli("scale", own["ddp_np2"], tmp_path / "job", "--ranks", "4")
    assert done.returncode == 0, done.stderr
    mine, expected = per_rank(tmp_path / "job", 4), real("ddp_np4", tmp_path)
    assert mine == expected
    assert mine[0] == [("ALL_REDUCE", (0, 1, 2, 3), 50176)]  # DDP keeps every gradient byte


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "layout", "big", "per_rank_count"),
    [
        ("tp_np4", "ddp,tp=2", "tp_np8", 5),
        ("2d_np4", "fsdp,tp=2", "2d_np8", 12),
        ("hsdp_np4", "hsdp,shard=2", "hsdp_np8", 11),  # its host traces alone: groups from their init nodes
    ],
)
def test_users_own_2d_jobs_are_refused_then_scale_like_the_real_job_with_layout(
    own: dict[str, Path], tmp_path: Path, name: str, layout: str, big: str, per_rank_count: int
) -> None:
    refused = run_cli("scale", own[name], tmp_path / "refused", "--ranks", "8")
    assert_one_error(refused)
    assert "no named group" in refused.stderr and "[0, 2]" in refused.stderr and "--layout" in refused.stderr
    assert not (tmp_path / "refused.0.et").exists()
    done = run_cli("scale", own[name], tmp_path / "job", "--ranks", "8", "--layout", layout)
    assert done.returncode == 0, done.stderr
    assert f"layout {layout} (given" in done.stderr
    assert ("all-reduces on the replicas'" if name == "hsdp_np4" else "taken as data-parallel") in done.stderr
    mine, expected = per_rank(tmp_path / "job", 8), real(big, tmp_path)
    for r in range(8):
        assert mine[r] == expected[r], r
    assert all(len(m) == per_rank_count for m in mine)
    tp = [c for c in mine[2] if c[1] == (2, 3)]  # tensor-parallel (or shard) pairs tiled, replicas widened
    dp = [c for c in mine[2] if c[1] == (0, 2, 4, 6)]
    assert tp and dp and len(tp) + len(dp) == per_rank_count
    if name == "hsdp_np4":  # shards gathered and scattered within the pair, their gradients all-reduced across
        assert {c[0] for c in tp} == {"ALL_GATHER", "REDUCE_SCATTER"} and {c[0] for c in dp} == {"ALL_REDUCE"}


def test_tp_over_every_rank_is_not_silently_ddp(own: dict[str, Path], tmp_path: Path) -> None:
    refused = run_cli("scale", own["tp_np2"], tmp_path / "x", "--ranks", "4")
    assert_one_error(refused)
    assert "a device-mesh dimension of size 1" in refused.stderr
    with pytest.raises(Exception, match="data-parallel degree 1"):
        api.scale(own["tp_np2"], tmp_path / "y", 4, layout="ddp,tp=2")


def test_hsdp_whose_collectives_name_their_groups_is_recognised_then_scaled_by_replicas(tmp_path: Path) -> None:
    # an NCCL-style 2 x 2 HSDP job: shard pairs {0,1} {2,3} (groups 1, 2), replicas {0,2} {1,3} (3, 4)
    groups = {"1": [0, 1], "2": [2, 3], "3": [0, 2], "4": [1, 3]}
    for rank in range(4):
        shard, replicas = str(1 + rank // 2), str(3 + rank % 2)
        nodes = [
            node(1),
            coll(2, pb.ALL_GATHER, 512, shard, (1,)),
            coll(3, pb.REDUCE_SCATTER, 1024, shard, (2,)),
            coll(4, pb.ALL_REDUCE, 512, replicas, (3,)),
        ]
        write_rank(tmp_path / f"job.{rank}.et", nodes)
    (tmp_path / "job.comm_group.json").write_text(json.dumps(groups))
    refused = run_cli("scale", tmp_path / "job", tmp_path / "out" / "x", "--ranks", "8")
    assert_one_error(refused, "HSDP (sharded within, replicated across)", "hsdp,shard=S")
    done = run_cli("scale", tmp_path / "job", tmp_path / "out" / "x", "--ranks", "8", "--layout", "hsdp,shard=2")
    assert done.returncode == 0, done.stderr
    assert "the trace shows hsdp" in done.stderr and "replicas added" in done.stderr
    mine = per_rank(tmp_path / "out" / "x", 8)
    assert mine[5] == [
        ("ALL_GATHER", (4, 5), 512),
        ("REDUCE_SCATTER", (4, 5), 1024),
        ("ALL_REDUCE", (1, 3, 5, 7), 512),
    ]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("hsdp", "hsdp,shard=S"), ("hsdp,shard=2,tp=2", "hsdp,shard=S"), ("hsdp,shard=0", "hsdp,shard=S")],
)
def test_a_bad_hsdp_spec_is_a_usage_error(own: dict[str, Path], tmp_path: Path, spec: str, expected: str) -> None:
    assert_one_error(
        run_cli("scale", own["hsdp_np4"], tmp_path / "x", "--ranks", "8", "--layout", spec), expected, status=2
    )


def test_hsdp_shards_that_do_not_tile_the_job_are_refused(own: dict[str, Path], tmp_path: Path) -> None:
    done = run_cli("scale", own["hsdp_np4"], tmp_path / "x", "--ranks", "8", "--layout", "hsdp,shard=3")
    assert_one_error(done, "not a multiple of shard = 3", status=2)
    done = run_cli("scale", own["hsdp_np4"], tmp_path / "x", "--ranks", "8", "--layout", "hsdp,shard=4")
    assert_one_error(done)  # one shard group of every rank: no replicas, nothing the unnamed all-reduces fit
    assert not list(tmp_path.iterdir())


def test_committed_summaries_are_the_real_captures_collectives(tmp_path: Path) -> None:
    # tp_np4 is committed both whole and as a summary: the summary is what its capture says
    assert truth(MINE / "tp_np4", tmp_path / "et") == real("tp_np4", tmp_path)


@pytest.mark.astra_sim
@pytest.mark.parametrize(
    ("name", "layout"), [("tp_np4", "ddp,tp=2"), ("2d_np4", "fsdp,tp=2"), ("hsdp_np4", "hsdp,shard=2")]
)
def test_the_scaled_own_jobs_check_and_finish_in_astra_sim(
    simulator: Path, own: dict[str, Path], tmp_path: Path, name: str, layout: str
) -> None:
    api.scale(own[name], tmp_path / "job", 8, layout=layout)
    report = api.check([tmp_path / f"job.{r}.et" for r in range(8)], comm_groups=tmp_path / "job.comm_group.json")
    assert report.ok, report
    result = api.simulate(tmp_path / "job")
    assert len(result.ranks) == 8  # every rank finished (ASTRA-sim's log)
